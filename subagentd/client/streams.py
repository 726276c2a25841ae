"""The async transport: NDJSON JSON-RPC over anyio byte streams, one reader task routing frames.

Why a reader task: async callers wait concurrently (many requests in flight from many tasks,
plus a turn loop), so one task reads every frame and wakes the request it answers; the callers
never touch the stream. It runs on any anyio backend (asyncio, trio).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, overload

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from subagentd.client import frames
from subagentd.client.errors import CannotStart, ConnectionClosed, RequestTimeout
from subagentd.client.pipes import KEEP_NOTIFICATIONS, TIMEOUT
from subagentd.client.process import (
    EXIT_WAIT,
    Stderr,
    StderrMode,
    cannot_start_line,
    server_command,
)

T = TypeVar("T")
N = TypeVar("N", bound=msgspec.Struct)
MAX_LINE = 1 << 30  # a frame of a 100k-agent listing is ~17 MiB; this only stops a runaway

Handler = Callable[[dict[str, Any]], None]


class Waiting:
    """One request in flight: its method and, once read, its response."""

    __slots__ = ("method", "done", "response")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = anyio.Event()
        self.response: dict[str, Any] | None = None


class Streams:
    """Use as `async with`: the reader task runs inside; leaving closes subagentd's stdin."""

    def __init__(
        self,
        send: anyio.abc.ByteSendStream | None = None,
        receive: anyio.abc.ByteReceiveStream | None = None,
        *,
        argv: Sequence[str] | None = None,
        stderr: StderrMode = "capture",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self._send, self._receive = send, receive
        self._argv, self._stderr_mode, self._env, self._cwd = argv, stderr, env, cwd
        self.process: anyio.abc.Process | None = None
        self.stderr: Stderr | None = None
        self.ids = frames.Ids()
        self.notifications: deque[dict[str, Any]] = deque(maxlen=KEEP_NOTIFICATIONS)
        self.handlers: dict[str, list[Handler]] = {}
        self._waiting: dict[Any, Waiting] = {}
        self._arrived = anyio.Event()  # set (and replaced) whenever a notification is queued
        self._write = anyio.Lock()
        self._closed: str | None = None
        self._cannot_start: str | None = None  # subagentd's own `cannot start: …` line
        self._tasks: anyio.abc.TaskGroup | None = None

    @classmethod
    def spawn(
        cls,
        *args: str,
        db: str | None = None,
        caller: str | None = None,
        command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stderr: StderrMode = "capture",
    ) -> Self:
        """A client that starts `python -m subagentd serve --db DB ARGS` (or `command`) when
        entered with `async with`."""
        argv = server_command(args, db=db, caller=caller, command=command)
        return cls(argv=argv, stderr=stderr, env=env, cwd=cwd)

    async def __aenter__(self) -> Self:
        if self._argv is not None:
            self.stderr = Stderr(self._stderr_mode)
            self.process = await anyio.open_process(
                list(self._argv), stderr=self.stderr.target, env=self._env, cwd=self._cwd
            )
            self._send, self._receive = self.process.stdin, self.process.stdout
        if self._send is None or self._receive is None:
            raise ValueError("give send and receive streams, or use spawn()")
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._read, self._receive)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Close (shielded: also when the body was cancelled), then stop the reader; what the
        body raised propagates as it is, not wrapped in an exception group."""
        assert self._tasks is not None
        try:
            with anyio.CancelScope(shield=True):
                await self.aclose()
        finally:
            self._tasks.cancel_scope.cancel()
            await self._tasks.__aexit__(None, None, None)
            if self._receive is not None:
                await self._receive.aclose()

    async def aclose(self, timeout: float = TIMEOUT) -> int | None:
        """EOF on subagentd's stdin (it commits and exits); waits for its exit code if spawned."""
        if self._send is not None:
            await self._send.aclose()
        if self.process is None:
            return None
        with anyio.move_on_after(timeout) as waited:
            code = await self.process.wait()
        if waited.cancelled_caught:
            self.process.kill()
            code = await self.process.wait()
        if self.stderr is not None:
            self.stderr.close()
        return code

    def stderr_text(self) -> str:
        return self.stderr.text() if self.stderr is not None else ""

    # --- reading --------------------------------------------------------------------------

    async def _read(self, receive: anyio.abc.ByteReceiveStream) -> None:
        lines = BufferedByteReceiveStream(receive)
        try:
            while True:
                self._route(frames.decode(await lines.receive_until(b"\n", MAX_LINE)))
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
        ):
            self._closed = "subagentd closed its stdout"
            await self._read_why_it_stopped()
        except (msgspec.DecodeError, anyio.DelimiterNotFound) as exc:
            self._closed = f"subagentd wrote a frame that is not JSON-RPC: {exc}"
        for waiting in self._waiting.values():
            waiting.done.set()
        self._arrived.set()

    async def _read_why_it_stopped(self) -> None:
        """A spawned subagentd that closed its stdout and exited saying `cannot start: …`
        (captured): that line is what calls raise (CannotStart)."""
        if self.process is None or self.stderr is None:
            return
        with anyio.move_on_after(EXIT_WAIT):
            await self.process.wait()
            line = cannot_start_line(self.stderr.text())
            if line is not None:
                self._cannot_start = line

    def _closed_error(self, method: str | None = None) -> ConnectionClosed:
        if self._cannot_start is not None:
            return CannotStart(self._cannot_start)
        assert self._closed is not None
        return ConnectionClosed(
            f"{self._closed} before answering {method}" if method else self._closed
        )

    def _route(self, message: Any) -> None:
        if frames.is_notification(message):
            if frames.hand_over(message, self.handlers, self.notifications):
                self._arrived.set()
                self._arrived = anyio.Event()
            return
        for response in message if isinstance(message, list) else [message]:
            waiting = self._waiting.get(response.get("id")) if isinstance(response, dict) else None
            if waiting is not None:
                waiting.response = response
                waiting.done.set()

    # --- sending --------------------------------------------------------------------------

    async def send_raw(self, data: bytes) -> None:
        """Write bytes verbatim (tests' escape hatch)."""
        if self._send is None:
            raise ConnectionClosed("not connected")
        async with self._write:
            await self._send.send(data)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.send_raw(frames.notification(method, params))

    @overload
    async def call(
        self, method: str, params: Any = None, *, result: type[T], timeout: float = ...
    ) -> T: ...
    @overload
    async def call(
        self, method: str, params: Any = None, *, result: None = None, timeout: float = ...
    ) -> Any: ...
    async def call(
        self,
        method: str,
        params: Any = None,
        *,
        result: type[T] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """Request and wait: the result (plain JSON, or `result`'s type), or `RpcError`; after
        `timeout` a `notifications/cancelled` is sent and `RequestTimeout` raised."""
        if self._closed is not None:
            raise self._closed_error()
        request_id = next(self.ids)
        waiting = self._waiting[request_id] = Waiting(method)
        try:
            await self.send_raw(frames.request(request_id, method, params))
            with anyio.move_on_after(timeout):
                await waiting.done.wait()
        finally:
            del self._waiting[request_id]
        if waiting.response is None:
            if self._closed is not None:
                raise self._closed_error(method)
            await self.notify("notifications/cancelled", {"requestId": request_id})
            raise RequestTimeout(f"{method} (id {request_id}) got no response within {timeout:g} s")
        return frames.outcome(waiting.response, method, result)

    # --- notifications --------------------------------------------------------------------

    def on(self, method: str, handler: Handler) -> None:
        """Call `handler(params)` in the reader task for every `method` notification from now on
        (instead of queueing it); it must not block."""
        self.handlers.setdefault(method, []).append(handler)

    def off(self, method: str, handler: Handler) -> None:
        self.handlers.get(method, []).remove(handler)

    async def notification(
        self, method: str | None = None, timeout: float = TIMEOUT, **match: Any
    ) -> dict[str, Any]:
        """The params of the first queued notification `method` whose params hold `match`;
        waits (bounded by `timeout`) until one comes."""
        with anyio.move_on_after(timeout):
            while True:
                for note in self.notifications:
                    if frames.matches(note, method, match):
                        self.notifications.remove(note)
                        params: dict[str, Any] = note.get("params") or {}
                        return params
                if self._closed is not None:
                    raise self._closed_error()
                await self._arrived.wait()
        raise RequestTimeout(f"no {method or 'notification'} matching {match} within {timeout:g} s")

    async def wait_for(self, kind: type[N], timeout: float = TIMEOUT, **match: Any) -> N:
        """`notification`, typed: `await wait_for(TurnStart, agent_id="c1")` is a `TurnStart`."""
        params = await self.notification(frames.METHOD_OF[kind], timeout, **match)
        return frames.typed(kind, params)
