"""One host connection: frames in, dispatch, group commit, frames out, cancellation, shutdown."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
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
from subagentd.errors import (
    DatabaseLostError,
    InvalidParamsError,
    LeaseLostError,
    StorageBusyError,
    StorageFailedError,
)
from subagentd.schema.codes import Code
from subagentd.schema.lifecycle import SUPPORTED_VERSIONS, VERSION_META_KEY
from subagentd.server.boundary import INTERNAL_MESSAGE, guard
from subagentd.server.envelope import Session, error_reply, success_reply, valid_id
from subagentd.server.framing import BadHeader, FrameReader, Oversize, encode_frame
from subagentd.server.handlers import METHODS, Handler
from subagentd.server.memory import IDLE_SECONDS, Trimmer
from subagentd.server.prelude import Started
from subagentd.server.requestlog import log_request
from subagentd.server.transport import FdReader, FdWriter
from subagentd.server.waiting import Deferred, Kept, Ledger, Owed, Pending

log = logging.getLogger("subagentd")

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_NO_LIFECYCLE = frozenset({"initialize", "ping", "server/discover"})
_CANCEL = {"notifications/cancelled": "requestId", "$/cancelRequest": "id"}
OUTBOX_LIMIT = 8 * 1024 * 1024  # bytes of unwritten frames before reading pauses
MAX_PENDING = 1024  # replies that may wait at once (agents/close drains); beyond: 1011 OVERLOADED
BUSY_RETRY = 0.1  # seconds before a timer's work refused for another process's lock runs again


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

    def drop_notifications(self, error: BaseException) -> None:
        """A failed request's notifications are not sent; but when its transaction found this
        process fenced, they are the host's news of the agents it let go (Engine.lease_lost)."""
        if not isinstance(error, LeaseLostError):
            del self.conn.notes[self.notes_mark :]


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
        self.outbox: list[bytes | memoryview] = []  # committed output, ready to write
        self.outbox_bytes = 0
        self.ledger = Ledger(self._frame, self._held)  # output held back until its commit
        self.notes: list[bytes] = []
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

    def _held(self, size: int) -> None:
        self.trimmer.note(size)
        if not self._reading:  # the read loop flushes inline after each chunk (or wakes us)
            self._wake.set()

    def _push(self, frame: bytes | memoryview) -> None:
        """Output to write now: committed, or claiming nothing (the answers of a lost group)."""
        self.outbox.append(frame)
        self.outbox_bytes += len(frame)
        if not self._reading:
            self._wake.set()

    def flush_notes(self) -> None:
        notes, self.notes = self.notes, []
        for frame in notes:
            self.ledger.hold(frame)

    def _commit(self) -> None:
        """Group commit: what the group produced becomes writable, or, when the commit fails,
        the group is answered as lost (see _fail_group)."""
        if self.ledger.lost is None:
            try:
                self.service.commit()
            except StorageFailedError as exc:
                self.ledger.lost = exc
        if self.ledger.lost is not None:
            self._fail_group()
            return
        frames, size = self.ledger.committed()
        if frames:
            self.outbox += frames
            self.outbox_bytes += size

    def _lose(self, exc: StorageFailedError) -> None:
        """The current group is lost; the rest of the frame being handled is refused."""
        if self.ledger.lost is None:
            self.ledger.lost = exc

    def _fail_group(self) -> None:
        """A lost group: storage is rolled back and memory rebuilt from it, then the group's
        requests are answered STORAGE_FAILED (Ledger.answer_lost); notifications are dropped."""
        lost = self.ledger.lost
        self.notes.clear()
        try:
            self.service.rebuild()
        except Exception:
            log.critical("cannot rebuild the live state from the database; shutting down")
            self._read_scope.cancel()

        def error(request_id: Any) -> dict[str, Any]:
            return error_reply(Code.STORAGE_FAILED, lost.message, request_id, lost.data)

        answers = self.ledger.answer_lost(error)
        for answer in answers:
            self._push(self._frame(answer))
        log.error(
            "storage failed (%s): the commit group was rolled back; %d answer(s) %s",
            lost.cause,
            len(answers),
            Code.STORAGE_FAILED.name,
        )

    def _flush_inline(self) -> None:
        """Group commit right after a chunk of input: commit, then write what the pipe takes now.

        Saves the hop to the flusher task on every round trip. What the pipe does not take (as a
        view, not a copy), and anything while the flusher is mid-write (frame order), is left to
        the flusher.
        """
        if self._writing or self.writer.broken:
            self._wake.set()
            return
        self._commit()
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
            self._commit()
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

    def _run_outside_request(self, callback: Callable[[], None], retry: bool = True) -> bool:
        """A timer's (or the heartbeat's) work in its own transaction of the current group.
        False when another process's lock refused it (then, with `retry`, it runs again later)."""
        mark = len(self.notes)
        ran = True
        try:
            with self.service.transaction():
                callback()
        except StorageBusyError:
            ran = False
            if retry:
                self.call_later(BUSY_RETRY, callback)
        except StorageFailedError as exc:
            self._lose(exc)
        except LeaseLostError:  # its notices (agent/settled, lease-lost) are sent
            log.warning("another process took over this one's sessions: its agents were let go")
        except DatabaseLostError as exc:  # expected once the file is gone: one line, no traceback
            del self.notes[mark:]
            log.warning("a scheduled task was not done: %s", exc.message)
        except Exception:
            del self.notes[mark:]
            log.exception("unexpected failure in a scheduled task")
        if self.ledger.lost is not None:
            self._fail_group()
        self.flush_notes()
        self._wake.set()
        return ran

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
        """Reap what processes that died or stalled left; a fenced idle process finds out here."""
        while True:
            await anyio.sleep(self.service.settings.lease_ttl / 3)
            self._run_outside_request(self.service.heartbeat, retry=False)  # the next one retries

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
            if self.outbox_bytes + self.ledger.size > OUTBOX_LIMIT:
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
            self.ledger.reply(error_reply(Code.INTERNAL_ERROR, INTERNAL_MESSAGE))
            self.flush_notes()
        if self.ledger.lost is not None:
            self._fail_group()

    def handle_frame(self, frame: bytes | Oversize | BadHeader) -> None:
        if isinstance(frame, Oversize):
            self.ledger.reply(
                error_reply(
                    Code.INVALID_REQUEST,
                    f"frame exceeds the limit of {frame.limit} bytes (--max-frame-bytes); it was discarded",
                )
            )
            return
        if isinstance(frame, BadHeader):
            self.ledger.reply(error_reply(Code.PARSE_ERROR, f"Parse error: {frame.detail}"))
            return
        try:
            message = _decode(frame)
        except msgspec.DecodeError as exc:
            self.ledger.reply(error_reply(Code.PARSE_ERROR, "Parse error", data=str(exc)))
            return
        except RecursionError:
            self.ledger.reply(
                error_reply(Code.PARSE_ERROR, "Parse error", data="JSON is nested too deeply")
            )
            return
        if isinstance(message, list):
            if not message:
                self.ledger.reply(error_reply(Code.INVALID_REQUEST, "Invalid Request: empty batch"))
                return
            replies = [
                r for r in (self.handle_message(m, in_batch=True) for m in message) if r is not None
            ]
            waiting = [r for r in replies if isinstance(r, Pending)]
            if waiting:
                self.ledger.wait(Owed(waiting, replies))
            elif replies:
                self.ledger.reply(replies)
        else:
            reply = self.handle_message(message)
            if isinstance(reply, Pending):
                self.ledger.wait(Owed([reply]))
            elif reply is not None:
                self.ledger.reply(reply)
        self.flush_notes()

    def handle_message(self, message: Any, in_batch: bool = False) -> Any:
        """One request or notification: a reply dict, a Pending reply, or None.

        Refusals before dispatch and lifecycle replies are Kept: they stand even if the group is
        lost. Once the group is lost, the rest of the frame is refused without running.
        """
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
            return _refusal(
                Code.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', request_id
            )
        if not isinstance(method, str):
            return _refusal(
                Code.INVALID_REQUEST, 'Invalid Request: "method" must be a string', request_id
            )
        params = message.get("params")
        if "params" in message and not isinstance(params, dict | list):
            return _refusal(
                Code.INVALID_REQUEST,
                'Invalid Request: "params" must be an object or an array',
                request_id,
            )
        if method in _CANCEL:
            if isinstance(params, dict):
                self.cancel(params.get(_CANCEL[method]))
            return Kept(success_reply({}, request_id, False)) if is_request else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(VERSION_META_KEY) if isinstance(meta, dict) else None
        stateless = version is not None
        if stateless and version not in SUPPORTED_VERSIONS:
            if not is_request:
                return None
            return _refusal(
                Code.UNSUPPORTED_PROTOCOL_VERSION,
                f"unsupported protocol version {version!r}",
                request_id,
                {"supported": list(SUPPORTED_VERSIONS), "requested": version},
            )
        lifecycle = method in _NO_LIFECYCLE
        if not (stateless or self.session.initialized or lifecycle):
            if not is_request:
                return None
            return _refusal(Code.NOT_INITIALIZED, "server not initialized", request_id)
        lost = self.ledger.lost
        if lost is not None and not lifecycle:
            if not is_request:
                return None
            return error_reply(Code.STORAGE_FAILED, lost.message, request_id, lost.data)
        handler = METHODS.get(method)
        if handler is not None and not handler.confined and self.session.default_caller is not None:
            if not is_request:
                return None
            return _refusal(
                Code.METHOD_NOT_FOUND,
                f'method "{method}" is not served to an MCP client confined by --caller;'
                " the host API needs a connection started without --caller",
                request_id,
                method,
            )
        if handler is not None and handler.defers and is_request:
            if len(self.ledger.pending) >= MAX_PENDING:
                return _refusal(
                    Code.OVERLOADED,
                    f"too many requests waiting ({MAX_PENDING}); retry with backoff",
                    request_id,
                    {"reason": Code.OVERLOADED.name},
                )
            if request_id in self.ledger.pending:
                return _refusal(
                    Code.INVALID_REQUEST,
                    f"Invalid Request: id {_encode(request_id).decode()} is already used by"
                    " a request that is still waiting",
                    request_id,
                )
        call = Call(self, self.service, self.session, stateless, notes_mark=len(self.notes))
        # jsonrpcserver runs the method and shapes its Result; its per-request signature check
        # (inspect.signature, ~30% of a request in profiles) is skipped: entries take anything.
        entry = self._methods.get(method)
        started = perf_counter()
        result = (
            rpc_call(Request(method, params if params is not None else {}, request_id), call, entry)
            if entry is not None
            else Left(MethodNotFoundResult(method))
        )
        if log.isEnabledFor(logging.DEBUG):
            log_request(method, request_id, is_request, started)
        if not is_request:
            return None
        if isinstance(result, Left):
            err = result._error
            data = None if err.data is NODATA else err.data
            reply = error_reply(err.code, err.message, request_id, data)
            return Kept(reply) if lifecycle or entry is None else reply
        if call.deferred is not None and not call.deferred.done:
            pending = Pending(request_id, call.deferred, stateless, self.ledger.generation)
            self.ledger.pending[request_id] = pending
            return pending
        if call.deferred is not None:
            return success_reply(call.deferred.result, request_id, stateless)
        reply = success_reply(result._value.result, request_id, stateless)
        return Kept(reply) if lifecycle else reply

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
                except StorageFailedError as exc:
                    self._lose(exc)
                    call.drop_notifications(exc)
                    raise
                except BaseException as error:
                    call.drop_notifications(error)
                    raise

            return guard(run, tool=handler.tool)

        return entry

    # --- cancellation --------------------------------------------------------------------

    def cancel(self, request_id: Any) -> None:
        """Answer a request that has not completed with -32800; accepted effects stay accepted."""
        if valid_id(request_id):
            self.ledger.cancel(request_id)

    # --- shutdown ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop every live agent (no more turns/end can arrive), commit, and write what is owed."""
        for step in (
            lambda: self.service.shutdown(lambda: None),
            lambda: self.service.force_end_all("shutdown"),
        ):
            with anyio.move_on_after(self.grace):
                while not self._run_outside_request(step, retry=False):
                    await anyio.sleep(BUSY_RETRY)  # another process holds the write lock
        with anyio.move_on_after(self.grace):
            while self.outbox or self.ledger.frames or self._writing:
                self._wake.set()
                await self._drained.wait()
        self._commit()


def _refusal(code: int, message: str, request_id: Any, data: Any = None) -> Kept:
    """A refusal before dispatch: it depends on no stored state."""
    return Kept(error_reply(code, message, request_id, data))
