"""The blocking transport: NDJSON JSON-RPC over a pair of pipe fds, read only when the caller asks.

Why blocking and threadless: a host that drives subagentd from plain code (the demo, the tests,
the benchmarks) wants each call to return its answer with no event loop and no thread hop (a
thread hop alone costs tens of microseconds per round trip, visible in the benchmarks). Frames are
read by whichever thread waits for one, under one lock, with `select` bounding every wait; a write
never blocks on a full pipe, because while it waits it also reads what subagentd wrote (so a
large pipelined write cannot deadlock against a reader that is not reading). Notifications are
kept in arrival order until taken (or handled at once by a handler registered with `on`).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, overload

import msgspec

from subagentd.client import frames
from subagentd.client.errors import ConnectionClosed, RequestTimeout

T = TypeVar("T")
N = TypeVar("N", bound=msgspec.Struct)

TIMEOUT = 30.0
"""Seconds any single wait lasts unless told otherwise: only a failure waits this long."""
READ_SLICE = 0.05  # seconds a reader holds the lock waiting for a frame before letting others in
KEEP_NOTIFICATIONS = 100_000
"""Notifications nobody took are kept up to this many (the oldest are dropped after)."""
CHUNK = 1 << 16  # a pipe holds 64 KiB; a larger read only allocates (and frees) more

Handler = Callable[[dict[str, Any]], None]


class Pipes:
    """Send frames, read frames: responses filed by id, notifications queued in order."""

    def __init__(self, write_fd: int, read_fd: int, *, keep_raw: bool = False) -> None:
        self.write_fd = write_fd
        self.read_fd = read_fd
        os.set_blocking(write_fd, False)  # writes wait in select, reading meanwhile
        self.ids = frames.Ids()
        self.responses: dict[Any, dict[str, Any]] = {}
        self.notifications: deque[dict[str, Any]] = deque(maxlen=KEEP_NOTIFICATIONS)
        self.raw: list[bytes] = []  # every line read, when keep_raw (tests check the bytes)
        self.keep_raw = keep_raw
        self.reading = threading.Event()  # clear it to stop reading stdout (a slow host, in tests)
        self.reading.set()
        self.handlers: dict[str, list[Handler]] = {}
        self._lines: deque[bytes] = deque()
        self._partial: list[bytes] = []
        self._eof = False
        self._io = threading.RLock()

    # --- raw bytes ------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        """Write bytes verbatim (a frame, part of one, or garbage: tests' escape hatch)."""
        view = memoryview(data)
        with self._io:
            try:  # the common case: the pipe has room, one write and done
                view = view[os.write(self.write_fd, view[:CHUNK]) :]
            except BlockingIOError:
                pass
            while view:
                reading = self.reading.is_set() and not self._eof
                readable, writable, _ = select.select(
                    [self.read_fd] if reading else [],
                    [self.write_fd],
                    [],
                    None if reading else 0.05,
                )
                if readable:
                    self._read_chunk()
                if writable:
                    try:
                        view = view[os.write(self.write_fd, view[:CHUNK]) :]
                    except BlockingIOError:
                        continue

    def _read_chunk(self) -> None:
        chunk = os.read(self.read_fd, CHUNK)
        if not chunk:
            self._eof = True
            return
        if b"\n" not in chunk:
            self._partial.append(chunk)
            return
        self._partial.append(chunk)
        *lines, tail = b"".join(self._partial).split(b"\n")
        self._partial = [tail] if tail else []
        self._lines.extend(lines)
        if self.keep_raw:
            self.raw.extend(lines)

    def next_line(self, timeout: float = TIMEOUT) -> bytes:
        """The next line subagentd wrote, undecoded."""
        deadline = time.monotonic() + timeout
        with self._io:
            while not self._lines:
                if self._eof:
                    raise self.closed_error()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimeout(f"no frame from subagentd within {timeout:g} s")
                if not self.reading.is_set():
                    self.reading.wait(left)
                    continue
                if select.select([self.read_fd], [], [], left)[0]:
                    self._read_chunk()
            return self._lines.popleft()

    def closed_error(self) -> ConnectionClosed:
        """What a call raises once subagentd closed its stdout."""
        return ConnectionClosed("subagentd closed its stdout")

    def read_to_eof(self, timeout: float = TIMEOUT) -> bool:
        """Read (keeping every line for later) until subagentd closes its stdout; False when
        `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._io:
            while not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    if select.select([self.read_fd], [], [], left)[0]:
                        self._read_chunk()
                except (OSError, ValueError):  # our end was closed already
                    return True
            return True

    # --- frames ---------------------------------------------------------------------------

    def next_frame(self, timeout: float = TIMEOUT) -> Any:
        """The next frame whatever it is (batches come back as lists); responses are also filed
        by id and notifications queued (or handed to their handlers)."""
        with self._io:
            message = frames.decode(self.next_line(timeout))
            if frames.is_notification(message):
                frames.hand_over(message, self.handlers, self.notifications)
            elif isinstance(message, dict):
                self.responses[message.get("id")] = message
            return message

    def send(self, message: Any) -> None:
        """Write one JSON value (a request, a notification, a batch list) as a frame."""
        self.send_bytes(frames.encode(message) + b"\n")

    def notify(self, method: str, params: Any = None) -> None:
        self.send_bytes(frames.notification(method, params))

    def start(self, method: str, params: Any = None) -> int:
        """Send a request without waiting; its id (pass it to `response` or `result`)."""
        request_id = next(self.ids)
        self.send_bytes(frames.request(request_id, method, params))
        return request_id

    def response(self, request_id: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The response frame to `request_id`, reading (and filing) frames until it comes.

        The lock is let go every READ_SLICE seconds while nothing arrives, so other threads can
        send meanwhile (a reply that waits, e.g. agents/wait_idle, must not stall the host)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._io:
                if request_id in self.responses:
                    return self.responses.pop(request_id)
                left = deadline - time.monotonic()
                try:
                    self.next_frame(max(0.0, min(left, READ_SLICE)))
                except RequestTimeout:
                    if left <= READ_SLICE:
                        raise RequestTimeout(
                            f"no frame from subagentd within {timeout:g} s"
                        ) from None

    @overload
    def result(self, request_id: Any, result: type[T], method: str | None = None) -> T: ...
    @overload
    def result(self, request_id: Any, result: None = None, method: str | None = None) -> Any: ...
    def result(
        self, request_id: Any, result: type[T] | None = None, method: str | None = None
    ) -> Any:
        """The result of `request_id` (as `result` when given), or its `RpcError` raised."""
        return frames.outcome(self.response(request_id), method, result)

    @overload
    def call(
        self, method: str, params: Any = None, *, result: type[T], timeout: float = ...
    ) -> T: ...
    @overload
    def call(
        self, method: str, params: Any = None, *, result: None = None, timeout: float = ...
    ) -> Any: ...
    def call(
        self,
        method: str,
        params: Any = None,
        *,
        result: type[T] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """Request and wait: the result (plain JSON, or `result`'s type), or `RpcError`."""
        response = self.response(self.start(method, params), timeout)
        return frames.outcome(response, method, result)

    # --- notifications --------------------------------------------------------------------

    def on(self, method: str, handler: Handler) -> None:
        """Call `handler(params)` for every `method` notification read from now on (instead of
        queueing it); it runs in the thread that read the frame."""
        self.handlers.setdefault(method, []).append(handler)

    def off(self, method: str, handler: Handler) -> None:
        self.handlers.get(method, []).remove(handler)

    def notification(
        self, method: str | None = None, timeout: float = TIMEOUT, **match: Any
    ) -> dict[str, Any]:
        """The params of the first queued notification `method` whose params hold `match`;
        reads (bounded by `timeout`) until one comes."""
        deadline = time.monotonic() + timeout
        with self._io:
            while True:
                for note in self.notifications:
                    if frames.matches(note, method, match):
                        self.notifications.remove(note)
                        params: dict[str, Any] = note.get("params") or {}
                        return params
                self.next_frame(max(0.0, deadline - time.monotonic()))

    def wait_for(self, kind: type[N], timeout: float = TIMEOUT, **match: Any) -> N:
        """`notification`, typed: `wait_for(TurnStart, agent_id="c1")` is a `TurnStart`."""
        return frames.typed(kind, self.notification(frames.METHOD_OF[kind], timeout, **match))

    def poll(self) -> None:
        """Read every frame already waiting, without blocking (nothing once subagentd closed)."""
        with self._io:
            while True:
                try:
                    self.next_frame(0)
                except (RequestTimeout, ConnectionClosed):
                    return

    def drain_notifications(self) -> list[dict[str, Any]]:
        """Every queued notification frame, taken."""
        with self._io:
            notes = list(self.notifications)
            self.notifications.clear()
            return notes

    def barrier(self) -> None:
        """A ping, read up to its reply: subagentd answers frames in order, so every reply and
        notification it wrote for what was sent before is read by then (deferred replies that
        are still waiting, e.g. agents/close, are not). Synchronizes without sleeping."""
        self.response(self.start("ping"))

    def settle_quietly(self, timeout: float = 0.3) -> None:
        """Read whatever arrives within `timeout` (to assert that nothing more was sent)."""
        try:
            while True:
                self.next_frame(timeout)
        except RequestTimeout:
            return

    @property
    def closed(self) -> bool:
        """subagentd closed its stdout and every line it wrote was taken."""
        return self._eof and not self._lines
