"""The background side of `--detach`: many client connections served as one MCP connection.

The background process serves its root's connection on one end of a socketpair (its fds 0 and
1); `Mux`, on a thread of its own, accepts the front processes on the private Unix socket and
relays their frames to the other end, never blocking on any socket: each side has its own
buffer, and the connection's answers are always read, so no front can hold up another.

Each front is answered as a direct connection would answer it. Its frames are cut as the
server cuts them (wire/framing.py, `--max-frame-bytes`); what the server would answer with
id null (a parse error, an oversized frame, a non-object, an id of the wrong type, a broken
envelope of a notification, an empty batch) is answered here with the server's own refusal, so
nothing is ever answered to nobody. Request ids and progress tokens are made unique on the way
in (`<front>:<value as JSON>`) and restored on the way back, so every answer and every progress
notification reaches the front that asked; any other notification goes to every front. A batch
is forwarded as one batch and its answers restored as one array, with the members answered here
in their places. The first `initialize` is the connection's; a later front's is answered with
the same result (a refused one lets the next front's initialize the connection), and a front
that has not initialized is refused as before initialize. A front that stops reading is no
longer read past `PAUSE_AT` unread bytes and is disconnected past `MAX_UNREAD` (a log line); a
front that goes away, or ends its input, has its unanswered requests cancelled
(`notifications/cancelled`): a wait it can no longer read consumes nothing. With no front
attached and nothing running or queued for `idle` seconds, the mux ends the connection's input,
and the process stops as a `--caller` server does at end of input.

Longer than ~300 lines on purpose: the relay's whole promise (a transparent pipe per front) is
one loop and the rewriting it does both ways; split, the two directions' rules would drift.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from subagentd.errors import InvalidRequestError, NotInitializedError, SubagentdError
from subagentd.runners.runner_pids import PidFiles
from subagentd.schema.lifecycle import VERSION_META_KEY
from subagentd.server.dispatcher import (
    BAD_ID,
    CANCEL,
    EMPTY_BATCH,
    LIFECYCLE,
    NOT_AN_OBJECT,
    NOT_INITIALIZED,
    check_envelope,
    decode,
)
from subagentd.wire.boundary import refusal
from subagentd.wire.framing import Frame, FrameReader
from subagentd.wire.session import valid_id

log = logging.getLogger("subagentd")

CHECK_EVERY = 0.5  # seconds between idle checks
CHUNK = 256 * 1024  # bytes read from a socket at once
PAUSE_AT = 4 * 1024 * 1024  # unread bytes of a front past which its requests wait
IN_FLIGHT = 256  # requests of a front not answered yet past which its next ones wait
MAX_UNREAD = 16 * 1024 * 1024  # unread bytes of a front past which it is disconnected
STALL = 10.0  # seconds a front may leave its answers unread, taking nothing, before it is cut
INNER_PAUSE_AT = 4 * 1024 * 1024  # bytes not yet taken by the connection: fronts wait

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Busy(Protocol):
    @property
    def busy(self) -> bool: ...


class Front:
    """One attached front process: its socket, its framing, what it has not read yet, and its
    requests not answered yet."""

    def __init__(self, number: int, sock: socket.socket, reader: FrameReader) -> None:
        self.number = number
        self.sock = sock
        self.reader = reader
        self.out = bytearray()  # answers it has not read yet
        self.taken = time.monotonic()  # when it last took some of them (or had none)
        self.frames: deque[Frame] = deque()  # read, not yet relayed (it or the connection lags)
        self.input_done = False  # its socket ended: the frames above are its last
        self.pending: Counter[str] = Counter()  # rewritten ids of its requests not answered
        self.batches: list[Batch] = []  # its batches not answered yet, oldest first
        self.initialized = False  # its initialize was answered with a result
        self.initializing: str | None = None  # the rewritten id of its initialize on its way
        self.ended = False  # its input ended: closed once its answers are written
        self.events = 0  # what the selector watches on its socket


@dataclass
class Batch:
    """A batch on its way: its members' answers in order, each a reply or the rewritten id whose
    answer takes its place."""

    front: Front
    slots: list[dict[str, Any] | str]


class Mux:
    """Relays the front processes' frames to the connection's end of the socketpair and back."""

    def __init__(
        self,
        listener: socket.socket,
        inner: socket.socket,
        idle: float,
        max_frame_bytes: int = 16 * 1024 * 1024,
        framing: str = "auto",
        on_clients: Callable[[int], None] | None = None,
    ) -> None:
        self.listener = listener
        self.inner = inner  # the other end of the connection's fds 0 and 1
        self.idle = idle
        self.max_frame_bytes = max_frame_bytes
        self.framing = framing
        self.on_clients = on_clients  # told how many fronts are attached, at each change
        self.work: Busy | None = None  # the runner whose runs keep it from idling (follow)
        self.fronts: dict[int, Front] = {}
        self._numbers = 0
        self._inner_in = FrameReader("ndjson", 1 << 62)  # the connection's answers: never cut
        self._inner_out = bytearray()  # frames the connection has not taken yet
        self._inner_events = 0
        self._init_result: Any = None  # the connection's answer to the first initialize
        self._init_id: str | None = None  # the rewritten id of the initialize on its way
        self._init_waiting: list[tuple[Front, Any]] = []  # later initializes meanwhile
        self.selector = selectors.DefaultSelector()
        self.thread = threading.Thread(target=self._run, name="detached-mux", daemon=True)

    def follow(self, work: Busy) -> None:
        """While `work` is busy the process is not idle, fronts or none."""
        self.work = work

    def start(self) -> None:
        self.thread.start()

    # --- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        self.listener.setblocking(False)
        self.inner.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self.selector.register(self.inner, selectors.EVENT_READ, "inner")
        self._inner_events = selectors.EVENT_READ
        quiet_since = time.monotonic()
        try:
            while True:
                for key, events in self.selector.select(CHECK_EVERY):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "inner":
                        if events & selectors.EVENT_WRITE:
                            self._flush_inner()
                        if events & selectors.EVENT_READ and not self._from_inner():
                            return  # the connection ended: the process is stopping
                    else:
                        front = key.data
                        if events & selectors.EVENT_WRITE:
                            self._flush(front)
                        if events & selectors.EVENT_READ and front.number in self.fronts:
                            self._from_front(front)
                self._watch()
                if self.fronts or (self.work is not None and self.work.busy):
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= self.idle:
                    log.info("detached: idle for %.1f s with no client: stopping", self.idle)
                    return
        except Exception:
            log.exception("detached: the relay failed: stopping")
        finally:
            self.listener.close()
            for front in list(self.fronts.values()):
                _last_words(front)
            try:
                self.inner.shutdown(socket.SHUT_WR)  # end of input for the connection
            except OSError:
                pass

    def _watch(self) -> None:
        """What each socket is watched for: a front is read while it and the connection keep
        up, written while it has answers to read; the connection is always read."""
        inner = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._inner_out else 0)
        if inner != self._inner_events:
            self.selector.modify(self.inner, inner, "inner")
            self._inner_events = inner
        now = time.monotonic()
        for front in list(self.fronts.values()):
            if front.frames:
                self._pump(front)
            if front.number not in self.fronts:
                continue
            if front.ended and not front.pending and not front.out:
                self._detach(front, "its input ended")
                continue
            if front.out and now - front.taken > STALL:
                log.warning(
                    "detached: client %d stopped reading (%d bytes unread for %.0f s):"
                    " disconnected",
                    front.number,
                    len(front.out),
                    STALL,
                )
                self._detach(front, "it stopped reading")
                continue
            wanted = selectors.EVENT_WRITE if front.out else 0
            if not (front.frames or front.input_done or self._lagging(front)):
                wanted |= selectors.EVENT_READ
            if wanted != front.events:
                if front.events == 0:
                    self.selector.register(front.sock, wanted, front)
                elif wanted == 0:
                    self.selector.unregister(front.sock)
                else:
                    self.selector.modify(front.sock, wanted, front)
                front.events = wanted

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        self._numbers += 1
        front = Front(self._numbers, sock, FrameReader(self.framing, self.max_frame_bytes))
        self.fronts[front.number] = front
        log.info("detached: client %d attached (%d attached)", front.number, len(self.fronts))
        self._clients_changed()

    def _clients_changed(self) -> None:
        if self.on_clients is not None:
            try:
                self.on_clients(len(self.fronts))
            except OSError as exc:
                log.warning("detached: cannot record the number of clients: %s", exc)

    def _from_front(self, front: Front) -> None:
        try:
            data = front.sock.recv(CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        front.frames.extend(front.reader.feed(data) if data else front.reader.finish())
        front.input_done = not data
        self._pump(front)

    def _lagging(self, front: Front) -> bool:
        """Whether a front's next request waits: it reads too slowly, has too many on their
        way, or the connection has not taken what came before."""
        return (
            len(front.out) >= PAUSE_AT
            or len(front.pending) >= IN_FLIGHT
            or len(self._inner_out) >= INNER_PAUSE_AT
        )

    def _pump(self, front: Front) -> None:
        """Relay a front's frames while it and the connection keep up."""
        while front.frames and not self._lagging(front) and front.number in self.fronts:
            frame = front.frames.popleft()
            try:
                value = decode(frame)
            except SubagentdError as exc:
                self._reply(front, refusal(exc))
                continue
            self._inbound(front, value)
        if front.input_done and not front.frames and not front.ended:
            front.ended = True  # its input ended: what it can no longer read consumes nothing
            self._cancel_pending(front)
            try:
                front.sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def _detach(self, front: Front, why: str) -> None:
        if front.events:
            self.selector.unregister(front.sock)
            front.events = 0
        front.sock.close()
        del self.fronts[front.number]
        self._cancel_pending(front)
        log.info(
            "detached: client %d went away (%s; %d attached)", front.number, why, len(self.fronts)
        )
        self._clients_changed()

    def _cancel_pending(self, front: Front) -> None:
        for request_id in sorted(front.pending):  # nothing it did not read is consumed
            self._to_inner(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": request_id, "reason": "the client went away"},
                }
            )
        if front.number not in self.fronts:
            front.pending.clear()
        self._init_waiting = [(f, m) for f, m in self._init_waiting if f is not front]

    # --- front -> connection ---------------------------------------------------------------

    def _inbound(self, front: Front, value: Any) -> None:
        """One decoded frame of a front: forwarded rewritten, or answered here as the server
        would answer it with id null."""
        if type(value) is not list:
            forwarded, local = self._member(front, value)
            if local is not None:
                self._reply(front, local)
            elif forwarded is not None:
                self._to_inner(forwarded)
            return
        if not value:
            self._reply(front, refusal(InvalidRequestError(EMPTY_BATCH)))
            return
        members: list[dict[str, Any]] = []
        slots: list[dict[str, Any] | str] = []
        for item in value:
            forwarded, local = self._member(front, item, in_batch=True)
            if local is not None:
                slots.append(local)
            elif forwarded is not None:
                members.append(forwarded)
                if "id" in forwarded:
                    slots.append(forwarded["id"])
        if members:
            self._to_inner(members)
        if any(isinstance(slot, str) for slot in slots):
            front.batches.append(Batch(front, slots))
        elif slots:
            self._reply(front, slots)

    def _member(
        self, front: Front, message: Any, in_batch: bool = False
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A message as forwarded (rewritten), or the reply given here; (None, None) when it
        is neither (a notification the server would drop, or one held here)."""
        if type(message) is not dict:
            return None, refusal(InvalidRequestError(NOT_AN_OBJECT))
        is_request = "id" in message
        request_id = message.get("id")
        if not valid_id(request_id):
            return None, refusal(InvalidRequestError(BAD_ID))
        method = message.get("method")
        try:
            check_envelope(message)
        except InvalidRequestError as exc:
            if not is_request:
                return None, refusal(exc)
            method = None  # a request's refusal carries its id: the server answers it
        if isinstance(method, str) and not self._may_run(front, message, method):
            if not is_request:
                return None, None
            return None, refusal(NotInitializedError(NOT_INITIALIZED), request_id)
        if method == "notifications/initialized" and not is_request:
            return None, None  # the connection's own was sent by the front that initialized it
        if method == "initialize" and is_request:
            if in_batch:
                if not (front.initialized or front.initializing) and self._init_result is not None:
                    front.initialized = True
                    return None, {"jsonrpc": "2.0", "id": request_id, "result": self._init_result}
                if self._init_id is None and self._init_result is None:
                    self._init_id = front.initializing = _rewrite(front.number, request_id)
            elif self._hold_initialize(front, message):
                return None, None
        params = message.get("params")
        if method in CANCEL and isinstance(params, dict):
            field = CANCEL[method]
            if field in params and valid_id(params[field]):
                params[field] = _rewrite(front.number, params[field])
        if isinstance(params, dict):
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            if isinstance(token, str) or type(token) is int:
                assert isinstance(meta, dict)
                meta["progressToken"] = _rewrite(front.number, token)
        if is_request:
            message["id"] = _rewrite(front.number, request_id)
            front.pending[message["id"]] += 1
        return message, None

    def _may_run(self, front: Front, message: dict[str, Any], method: str) -> bool:
        """Whether a direct connection runs it now: lifecycle, cancellation and stateless
        requests always; anything else once this front's initialize was answered."""
        if front.initialized or method in LIFECYCLE or method in CANCEL:
            return True
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and meta.get(VERSION_META_KEY) is not None

    def _hold_initialize(self, front: Front, message: dict[str, Any]) -> bool:
        """A front's first initialize once the connection has one: answered with its result
        (held while the first is on its way); True when it is not forwarded."""
        if front.initialized or front.initializing:
            return False  # its second: the connection refuses it, as a direct one would
        if self._init_result is not None:
            front.initialized = True
            self._reply(front, {"jsonrpc": "2.0", "id": message["id"], "result": self._init_result})
            return True
        if self._init_id is not None:
            self._init_waiting.append((front, message))
            return True
        self._init_id = front.initializing = _rewrite(front.number, message["id"])
        return False

    def _to_inner(self, message: Any) -> None:
        self._inner_out += _encode(message) + b"\n"
        self._flush_inner()

    def _flush_inner(self) -> None:
        while self._inner_out:
            try:
                sent = self.inner.send(self._inner_out)
            except BlockingIOError:
                return
            del self._inner_out[:sent]

    # --- connection -> fronts --------------------------------------------------------------

    def _from_inner(self) -> bool:
        try:
            data = self.inner.recv(CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        for frame in self._inner_in.feed(data):
            if isinstance(frame, bytes):
                try:
                    self._outbound(_decode(frame))
                except msgspec.DecodeError:
                    log.warning("detached: the connection wrote a line that is not JSON")
        return True

    def _outbound(self, message: Any) -> None:
        if type(message) is list:  # a batch's answers: into their batch's places
            self._batch_answered(message)
            return
        if type(message) is not dict:
            return
        if "method" not in message:
            self._answered(message)
            return
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        if isinstance(token, str) and ":" in token:  # progress: to the front whose token it is
            number, original = _restore(token)
            front = self.fronts.get(number) if number is not None else None
            if front is not None:
                assert isinstance(params, dict)
                params["progressToken"] = original
                self._reply(front, message)
            return
        for front in list(self.fronts.values()):
            self._reply(front, message)

    def _answered(self, message: dict[str, Any], send: bool = True) -> Front | None:
        """An answer of the connection: its id restored, to the front that asked (`send`)."""
        rewritten = message.get("id")
        number, original = _restore(rewritten)
        if number is None:
            log.warning("detached: an answer with id %r has no client", rewritten)
            return None
        assert isinstance(rewritten, str)
        if rewritten == self._init_id:
            self._initialized(message)
        front = self.fronts.get(number)
        message["id"] = original
        if front is None:
            return None
        front.pending[rewritten] -= 1
        if front.pending[rewritten] <= 0:
            del front.pending[rewritten]
        if front.initializing == rewritten:
            front.initializing = None
            front.initialized = "result" in message
        if send:
            self._reply(front, message)
        return front

    def _batch_answered(self, answers: list[Any]) -> None:
        """A batch's answers: into the places of the oldest batch of that front whose
        members' ids they bear, with the members answered here in theirs."""
        ids = [a.get("id") if type(a) is dict else None for a in answers]
        fronts = {self._answered(a, send=False) for a in answers if type(a) is dict}
        fronts.discard(None)
        if len(fronts) != 1:
            return  # its front went away
        (front,) = fronts
        assert front is not None
        for batch in front.batches:
            if [slot for slot in batch.slots if isinstance(slot, str)] == ids:
                front.batches.remove(batch)
                places = iter(answers)
                self._reply(front, [next(places) if isinstance(s, str) else s for s in batch.slots])
                return
        log.warning("detached: a batch answer matches no batch of client %d", front.number)

    def _initialized(self, message: dict[str, Any]) -> None:
        """The answer to the connection's initialize: its result answers the fronts that
        waited; a refusal leaves the connection to the next one's initialize."""
        self._init_id = None
        waiting, self._init_waiting = self._init_waiting, []
        if "result" in message:
            self._init_result = message["result"]
            for front, request in waiting:
                front.initialized = True
                self._reply(
                    front, {"jsonrpc": "2.0", "id": request["id"], "result": message["result"]}
                )
            return
        for front, request in waiting:
            if front.number in self.fronts:
                self._inbound(front, request)

    def _reply(self, front: Front, message: Any) -> None:
        if front.number not in self.fronts:
            return
        if not front.out:
            front.taken = time.monotonic()
        front.out += front.reader.encode(message)
        if len(front.out) > MAX_UNREAD:
            log.warning(
                "detached: client %d stopped reading (%d bytes unread, more than %d): disconnected",
                front.number,
                len(front.out),
                MAX_UNREAD,
            )
            self._detach(front, "it stopped reading")
            return
        self._flush(front)

    def _flush(self, front: Front) -> None:
        while front.out:
            try:
                sent = front.sock.send(front.out)
            except BlockingIOError:
                return
            except OSError:
                front.out.clear()
                if front.number in self.fronts:
                    self._detach(front, "its connection closed")
                return
            del front.out[:sent]
            if sent:
                front.taken = time.monotonic()


def _last_words(front: Front) -> None:
    """The process is stopping: what a front has not read yet, within a second, then closed."""
    try:
        front.sock.settimeout(1.0)
        front.sock.sendall(front.out)
    except OSError:
        pass
    front.sock.close()


def _rewrite(front: int, value: Any) -> str:
    return f"{front}:{_encode(value).decode()}"


def _restore(value: Any) -> tuple[int | None, Any]:
    if not isinstance(value, str):
        return None, None
    number, _, original = value.partition(":")
    try:
        return int(number), _decode(original)
    except (ValueError, msgspec.DecodeError):
        return None, None


@dataclass(frozen=True)
class Background:
    """A background process's part in serving: the relay that must not idle while the runner
    is busy, and the pid files its runs are recorded in."""

    mux: Mux
    pids: PidFiles
