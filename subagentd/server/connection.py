"""One host connection: frames in, dispatch, group commit, frames out, cancellation, shutdown."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
from jsonrpcserver.dispatcher import call as rpc_call
from jsonrpcserver.request import Request
from jsonrpcserver.result import MethodNotFoundResult
from jsonrpcserver.sentinels import NODATA
from oslash.either import Left

from subagentd.core.service import Service
from subagentd.core.settings import Settings
from subagentd.errors import DatabaseLostError, InvalidParamsError
from subagentd.schema.codes import Code
from subagentd.schema.lifecycle import SUPPORTED_VERSIONS, VERSION_META_KEY
from subagentd.server.boundary import INTERNAL_MESSAGE, guard
from subagentd.server.envelope import Session, error_reply, success_reply, valid_id
from subagentd.server.framing import BadHeader, FrameReader, Oversize, encode_frame
from subagentd.server.handlers import METHODS, Handler
from subagentd.server.memory import IDLE_SECONDS, Trimmer
from subagentd.server.prelude import Started
from subagentd.server.transport import FdReader, FdWriter

log = logging.getLogger("subagentd")

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_NO_LIFECYCLE = frozenset({"initialize", "ping", "server/discover"})
_CANCEL = {"notifications/cancelled": "requestId", "$/cancelRequest": "id"}
OUTBOX_LIMIT = 8 * 1024 * 1024  # bytes of unwritten frames before reading pauses
MAX_PENDING = 1024  # replies that may wait at once (agents/close drains); beyond: 1011 OVERLOADED


class Deferred:
    """A result that arrives later (agents/close waits for its drain)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.done = False
        self.on_done: Callable[[], None] | None = None

    def complete(self) -> None:
        self.done = True
        if self.on_done is not None:
            self.on_done()


@dataclass
class Call:
    """What a handler sees of the connection."""

    conn: Connection
    service: Service
    session: Session
    stateless: bool
    deferred: Deferred | None = None
    notes_mark: int = 0

    @property
    def settings(self) -> Settings:
        return self.service.settings

    def defer(self, result: Any) -> Callable[[], None]:
        self.deferred = Deferred(result)
        return self.deferred.complete

    def drop_notifications(self) -> None:
        del self.conn.notes[self.notes_mark :]


@dataclass
class Pending:
    """A deferred reply still owed to the host."""

    request_id: Any
    deferred: Deferred
    stateless: bool
    cancelled: bool = False

    def reply(self) -> dict[str, Any]:
        if self.cancelled:
            return error_reply(Code.REQUEST_CANCELLED, "request cancelled", self.request_id)
        return success_reply(self.deferred.result, self.request_id, self.stateless)


class Connection:
    """Reads frames, dispatches them in arrival order, writes replies after their commit."""

    def __init__(
        self,
        service: Service,
        reader: FdReader,
        writer: FdWriter,
        *,
        framing: str = "auto",
        max_frame_bytes: int = 16 * 1024 * 1024,
        default_caller: str | None = None,
        grace: float = 5.0,
        handle_signals: bool = True,
        started: Started | None = None,
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        self.started = started or Started(FrameReader(framing, max_frame_bytes), Session())
        self.framer = self.started.framer
        self.session = self.started.session
        if default_caller is not None:
            self.session.default_caller = default_caller
        self.grace = grace
        self.handle_signals = handle_signals
        self.outbox: list[bytes | memoryview] = []
        self.outbox_bytes = 0
        self.notes: list[bytes] = []
        self.pending: dict[Any, Pending] = {}
        self._writing = False
        self._reading = False  # handling a chunk of input (its flush follows inline)
        self._tg: anyio.abc.TaskGroup | None = None
        self._methods = {name: self._entry(handler) for name, handler in METHODS.items()}
        self.trimmer = Trimmer()
        service.emit = self.emit
        service.timers = self

    # --- outbound ------------------------------------------------------------------------

    def emit(self, method: str, params: msgspec.Struct) -> None:
        """A notification to the host; written after the current request's reply and commit."""
        self.notes.append(self._frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def _frame(self, message: Any) -> bytes:
        return encode_frame(_encode(message), self.framer.lsp)

    def send(self, message: Any) -> None:
        self._push(self._frame(message))

    def _push(self, frame: bytes | memoryview) -> None:
        self.outbox.append(frame)
        self.outbox_bytes += len(frame)
        self.trimmer.note(len(frame))
        if not self._reading:  # the read loop flushes inline after each chunk (or wakes us)
            self._wake.set()

    def flush_notes(self) -> None:
        notes, self.notes = self.notes, []
        for frame in notes:
            self._push(frame)

    def _flush_inline(self) -> None:
        """Group commit right after a chunk of input: commit, then write what the pipe takes now.

        Saves the hop to the flusher task on every round trip. What the pipe does not take (as a
        view, not a copy), and anything while the flusher is mid-write (frame order), is left to
        the flusher.
        """
        if self._writing or self.writer.broken:
            self._wake.set()
            return
        self.service.commit()
        if not self.outbox:
            return
        data = b"".join(self.outbox)
        self.outbox.clear()
        self.outbox_bytes = 0
        try:
            written = self.writer.write_now(data)
        except OSError as exc:
            log.warning("cannot write to the host (%s); replies are dropped", exc)
            self.writer.broken = True
            return
        if written < len(data):
            self._push(memoryview(data)[written:])  # the rest, without a copy

    async def _flusher(self) -> None:
        """Group commit: everything dispatched so far is committed, then its frames are written."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            self.service.commit()
            if self.outbox:
                data = b"".join(self.outbox)
                self.outbox.clear()
                self.outbox_bytes = 0
                self._writing = True
                try:
                    await self.writer.write(data)
                except OSError as exc:  # the host closed our stdout: nobody is listening any more
                    log.warning("cannot write to the host (%s); replies are dropped", exc)
                    self.writer.broken = True
                finally:
                    self._writing = False
                del data  # not kept alive (megabytes after a burst) while waiting for the next
            self._drained.set()
            self._drained = anyio.Event()

    async def _trim_when_quiet(self) -> None:
        """Once a burst is over and written, give the memory it freed back (server/memory.py)."""
        while True:
            await anyio.sleep(IDLE_SECONDS)
            if not self.outbox and not self._writing:
                self.trimmer.tick()

    # --- timers (core.engine.Timers) -----------------------------------------------------

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        scope = anyio.CancelScope()

        async def later() -> None:
            with scope:
                await anyio.sleep(delay)
                self._run_outside_request(callback)

        assert self._tg is not None
        self._tg.start_soon(later)
        return scope.cancel

    def _run_outside_request(self, callback: Callable[[], None]) -> None:
        mark = len(self.notes)
        try:
            with self.service.transaction():
                callback()
        except DatabaseLostError as exc:  # expected once the file is gone: one line, no traceback
            del self.notes[mark:]
            log.warning("a scheduled task was not done: %s", exc.message)
        except Exception:
            del self.notes[mark:]
            log.exception("unexpected failure in a scheduled task")
        self.flush_notes()
        self._wake.set()

    # --- inbound -------------------------------------------------------------------------

    async def serve(self) -> None:
        self._wake = anyio.Event()
        self._drained = anyio.Event()
        self._read_scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._flusher)
            tg.start_soon(self._heartbeat)
            tg.start_soon(self._trim_when_quiet)
            if self.handle_signals:
                tg.start_soon(self._signals)
            with self._read_scope:
                await self._read_loop()
            await self._shutdown()
            tg.cancel_scope.cancel()

    async def _heartbeat(self) -> None:
        """Keep this process's leases alive for other processes sharing the database."""
        while True:
            await anyio.sleep(self.service.settings.lease_ttl / 3)
            self._run_outside_request(self.service.heartbeat)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                self._read_scope.cancel()
                return

    async def _read_loop(self) -> None:
        for frame in self.started.frames:  # read before the server was up (see prelude)
            self.handle_frame_safely(frame)
        self._flush_inline()
        while not self.started.input_ended:
            if self.outbox_bytes > OUTBOX_LIMIT:
                await self._drained.wait()  # a host that does not read stdout slows us down
                continue
            data = await self.reader.read()
            if not data:
                for frame in self.framer.finish():
                    self.handle_frame_safely(frame)
                self._wake.set()
                log.info("end of input: shutting down")
                return
            self._reading = True
            try:
                for frame in self.framer.feed(data):
                    self.handle_frame_safely(frame)
            finally:
                self._reading = False
            self._flush_inline()

    def handle_frame_safely(self, frame: bytes | Oversize | BadHeader) -> None:
        """One frame; a failure outside the handler boundary (e.g. an unencodable result) must not
        end the connection: it is logged and answered -32603 with no detail."""
        try:
            self.handle_frame(frame)
        except Exception:
            log.exception("unexpected failure while handling a frame")
            self.send(error_reply(Code.INTERNAL_ERROR, INTERNAL_MESSAGE))
            self.flush_notes()

    def handle_frame(self, frame: bytes | Oversize | BadHeader) -> None:
        if isinstance(frame, Oversize):
            self.send(
                error_reply(
                    Code.INVALID_REQUEST,
                    f"frame exceeds the limit of {frame.limit} bytes (--max-frame-bytes); it was discarded",
                )
            )
            return
        if isinstance(frame, BadHeader):
            self.send(error_reply(Code.PARSE_ERROR, f"Parse error: {frame.detail}"))
            return
        try:
            message = _decode(frame)
        except msgspec.DecodeError as exc:
            self.send(error_reply(Code.PARSE_ERROR, "Parse error", data=str(exc)))
            return
        except RecursionError:
            self.send(
                error_reply(Code.PARSE_ERROR, "Parse error", data="JSON is nested too deeply")
            )
            return
        if isinstance(message, list):
            if not message:
                self.send(error_reply(Code.INVALID_REQUEST, "Invalid Request: empty batch"))
                return
            replies = [
                r for r in (self.handle_message(m, in_batch=True) for m in message) if r is not None
            ]
            if any(isinstance(r, Pending) for r in replies):
                self._await_batch(replies)
            elif replies:
                self.send(replies)
        else:
            reply = self.handle_message(message)
            if isinstance(reply, Pending):
                self._await_single(reply)
            elif reply is not None:
                self.send(reply)
        self.flush_notes()

    def handle_message(self, message: Any, in_batch: bool = False) -> Any:
        """One request or notification: a reply dict, a Pending reply, or None."""
        if not isinstance(message, dict):
            return error_reply(Code.INVALID_REQUEST, "Invalid Request: not an object")
        is_request = "id" in message
        request_id = message.get("id")
        if not valid_id(request_id):
            return error_reply(
                Code.INVALID_REQUEST, "Invalid Request: id must be a string, a number or null"
            )
        method = message.get("method")
        if message.get("jsonrpc") != "2.0":
            return error_reply(
                Code.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', request_id
            )
        if not isinstance(method, str):
            return error_reply(
                Code.INVALID_REQUEST, 'Invalid Request: "method" must be a string', request_id
            )
        params = message.get("params")
        if "params" in message and not isinstance(params, dict | list):
            return error_reply(
                Code.INVALID_REQUEST,
                'Invalid Request: "params" must be an object or an array',
                request_id,
            )
        if method in _CANCEL:
            if isinstance(params, dict):
                self.cancel(params.get(_CANCEL[method]))
            return success_reply({}, request_id, False) if is_request else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(VERSION_META_KEY) if isinstance(meta, dict) else None
        stateless = version is not None
        if stateless and version not in SUPPORTED_VERSIONS:
            if not is_request:
                return None
            return error_reply(
                Code.UNSUPPORTED_PROTOCOL_VERSION,
                f"unsupported protocol version {version!r}",
                request_id,
                {"supported": list(SUPPORTED_VERSIONS), "requested": version},
            )
        if not (stateless or self.session.initialized or method in _NO_LIFECYCLE):
            if not is_request:
                return None
            return error_reply(Code.NOT_INITIALIZED, "server not initialized", request_id)
        handler = METHODS.get(method)
        if handler is not None and handler.defers and len(self.pending) >= MAX_PENDING:
            return error_reply(
                Code.OVERLOADED,
                f"too many requests waiting ({MAX_PENDING}); retry with backoff",
                request_id,
                {"reason": Code.OVERLOADED.name},
            )
        call = Call(self, self.service, self.session, stateless, notes_mark=len(self.notes))
        # jsonrpcserver runs the method and shapes its Result; its per-request signature check
        # (inspect.signature, ~30% of a request in profiles) is skipped: entries take anything.
        entry = self._methods.get(method)
        result = (
            rpc_call(Request(method, params if params is not None else {}, request_id), call, entry)
            if entry is not None
            else Left(MethodNotFoundResult(method))
        )
        if not is_request:
            return None
        if isinstance(result, Left):
            err = result._error
            data = None if err.data is NODATA else err.data
            return error_reply(err.code, err.message, request_id, data)
        if call.deferred is not None and not call.deferred.done:
            return Pending(request_id, call.deferred, stateless)
        if call.deferred is not None:
            return success_reply(call.deferred.result, request_id, stateless)
        return success_reply(result._value.result, request_id, stateless)

    def _entry(self, handler: Handler) -> Callable[..., Any]:
        def entry(call: Call, /, *args: Any, **params: Any) -> Any:
            def run() -> Any:
                if args:
                    raise InvalidParamsError("params must be an object, not an array")
                value = (
                    params if handler.params is None else msgspec.convert(params, handler.params)
                )
                try:
                    if handler.writes:
                        with self.service.transaction():
                            return handler.run(call, value)
                    return handler.run(call, value)
                except BaseException:
                    call.drop_notifications()
                    raise

            return guard(run, tool=handler.tool)

        return entry

    # --- deferred replies and cancellation -----------------------------------------------

    def _await_single(self, pending: Pending) -> None:
        self.pending[pending.request_id] = pending

        def done() -> None:
            if self.pending.pop(pending.request_id, None) is pending:
                self.send(pending.reply())

        pending.deferred.on_done = done

    def _await_batch(self, replies: list[Any]) -> None:
        waiting = [r for r in replies if isinstance(r, Pending)]

        def done() -> None:
            if all(p.deferred.done or p.cancelled for p in waiting):
                for p in waiting:
                    p.deferred.on_done = None
                    self.pending.pop(p.request_id, None)
                self.send([r.reply() if isinstance(r, Pending) else r for r in replies])

        for p in waiting:
            self.pending[p.request_id] = p
            p.deferred.on_done = done

    def cancel(self, request_id: Any) -> None:
        """Answer a request that has not completed with -32800; accepted effects stay accepted."""
        pending = self.pending.get(request_id) if valid_id(request_id) else None
        if pending is None:
            return
        pending.cancelled = True
        if pending.deferred.on_done is not None:
            pending.deferred.on_done()

    # --- shutdown ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop every live agent (no more turns/end can arrive), commit, and write what is owed."""
        self._run_outside_request(lambda: self.service.shutdown(lambda: None))
        self._run_outside_request(lambda: self.service.force_end_all("shutdown"))
        with anyio.move_on_after(self.grace):
            while self.outbox or self._writing:
                self._wake.set()
                await self._drained.wait()
        self.service.commit()
