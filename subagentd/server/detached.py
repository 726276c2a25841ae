"""The background side of `--detach`: many client connections served as one MCP connection.

The background process serves its root's connection on one end of a socketpair (its fds 0 and
1); `Mux`, on a thread of its own, accepts the front processes on the private Unix socket and
relays their lines to the other end. Each front's request ids are made unique on the way in
(`<front>:<id as JSON>`) and restored on the way back, so every answer reaches the front that
asked; a progress notification goes to the front that gave its token, any other notification to
every front. The first `initialize` is the connection's; a later front's is answered with the
same result and its `notifications/initialized` is not passed on. A front that goes away has its
unanswered requests cancelled (`notifications/cancelled`): a wait it can no longer read consumes
nothing. With no front attached and nothing running or queued for `idle` seconds, the mux ends
the connection's input, and the process stops as a `--caller` server does at end of input.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from subagentd.server.runner_pids import PidFiles

log = logging.getLogger("subagentd")

CHECK_EVERY = 0.5  # seconds between idle checks
MAX_LINE = 64 * 1024 * 1024  # bytes of one line from a front before it is dropped


class Busy(Protocol):
    @property
    def busy(self) -> bool: ...


class Front:
    """One attached front process: its socket, its unread bytes, its unanswered requests."""

    def __init__(self, number: int, sock: socket.socket) -> None:
        self.number = number
        self.sock = sock
        self.buffer = b""
        self.pending: set[str] = set()  # rewritten ids of its requests not answered yet
        self.tokens: set[Any] = set()  # progress tokens its requests gave
        self.initialized = False


class Mux:
    """Relays the front processes' lines to the connection's end of the socketpair and back."""

    def __init__(self, listener: socket.socket, inner: socket.socket, idle: float) -> None:
        self.listener = listener
        self.inner = inner  # the other end of the connection's fds 0 and 1
        self.idle = idle
        self.work: Busy | None = None  # the runner whose runs keep it from idling (follow)
        self.fronts: dict[int, Front] = {}
        self._numbers = 0
        self._inner_buffer = b""
        self._init_result: Any = None  # the connection's answer to the first initialize
        self._init_waiting: list[tuple[Front, Any]] = []  # later initializes before it came
        self._init_id: str | None = None
        self.thread = threading.Thread(target=self._run, name="detached-mux", daemon=True)

    def follow(self, work: Busy) -> None:
        """While `work` is busy the process is not idle, fronts or none."""
        self.work = work

    def start(self) -> None:
        self.thread.start()

    # --- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, "listen")
        selector.register(self.inner, selectors.EVENT_READ, "inner")
        quiet_since = time.monotonic()
        try:
            while True:
                for key, _ in selector.select(CHECK_EVERY):
                    if key.data == "listen":
                        self._accept(selector)
                    elif key.data == "inner":
                        if not self._from_inner():
                            return  # the connection ended: the process is stopping
                    else:
                        self._from_front(key.data, selector)
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
                front.sock.close()
            self.inner.shutdown(socket.SHUT_WR)  # end of input for the connection

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        self._numbers += 1
        front = Front(self._numbers, sock)
        self.fronts[front.number] = front
        selector.register(sock, selectors.EVENT_READ, front)
        log.info("detached: client %d attached (%d attached)", front.number, len(self.fronts))

    def _from_front(self, front: Front, selector: selectors.BaseSelector) -> None:
        try:
            data = front.sock.recv(256 * 1024)
        except OSError:
            data = b""
        if not data or len(front.buffer) > MAX_LINE:
            self._detach(front, selector)
            return
        front.buffer += data
        *lines, front.buffer = front.buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._inbound(front, line)

    def _detach(self, front: Front, selector: selectors.BaseSelector) -> None:
        selector.unregister(front.sock)
        front.sock.close()
        del self.fronts[front.number]
        for request_id in sorted(front.pending):  # nothing it did not read is consumed
            self._to_inner(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": request_id, "reason": "the client went away"},
                }
            )
        log.info("detached: client %d went away (%d attached)", front.number, len(self.fronts))

    # --- front -> connection ---------------------------------------------------------------

    def _inbound(self, front: Front, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._inner_line(line)  # the connection answers it (a parse error, id null)
            return
        if not isinstance(message, dict):
            self._inner_line(line)
            return
        method = message.get("method")
        if method == "notifications/initialized" and front.initialized:
            return
        if method == "initialize" and "id" in message:
            if self._init_id is not None:  # the connection was initialized by an earlier front
                front.initialized = True
                if self._init_result is None:
                    self._init_waiting.append((front, message["id"]))
                else:
                    self._answer(front, message["id"], self._init_result)
                return
        if method == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                params["requestId"] = _rewrite(front.number, params["requestId"])
        if method is not None and "id" in message:
            rewritten = _rewrite(front.number, message["id"])
            message["id"] = rewritten
            front.pending.add(rewritten)
            token = ((message.get("params") or {}).get("_meta") or {}).get("progressToken")
            if token is not None:
                front.tokens.add(json.dumps(token))
            if method == "initialize":
                self._init_id = rewritten
        self._to_inner(message)

    def _to_inner(self, message: dict[str, Any]) -> None:
        self._inner_line(json.dumps(message, separators=(",", ":")).encode())

    def _inner_line(self, line: bytes) -> None:
        self.inner.sendall(line + b"\n")

    # --- connection -> fronts --------------------------------------------------------------

    def _from_inner(self) -> bool:
        try:
            data = self.inner.recv(256 * 1024)
        except OSError:
            data = b""
        if not data:
            return False
        self._inner_buffer += data
        *lines, self._inner_buffer = self._inner_buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._outbound(line)
        return True

    def _outbound(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if "method" not in message:  # an answer: to the front that asked
            front_number, original = _restore(message.get("id"))
            if front_number is None:
                return
            if message.get("id") == self._init_id and "result" in message:
                self._init_result = message["result"]
                for waiting, request_id in self._init_waiting:
                    self._answer(waiting, request_id, self._init_result)
                self._init_waiting.clear()
            front = self.fronts.get(front_number)
            if front is None:
                return  # it went away; its waits were cancelled
            front.pending.discard(message["id"])
            if front.number == front_number and message.get("id") == self._init_id:
                front.initialized = True
            message["id"] = original
            self._send(front, message)
            return
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        for front in list(self.fronts.values()):
            if token is None or json.dumps(token) in front.tokens:
                self._send(front, message)

    def _answer(self, front: Front, request_id: Any, result: Any) -> None:
        self._send(front, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _send(self, front: Front, message: dict[str, Any]) -> None:
        try:
            front.sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        except OSError:
            pass  # it went away: its end is read as closed next


def _rewrite(front: int, request_id: Any) -> str:
    return f"{front}:{json.dumps(request_id)}"


def _restore(request_id: Any) -> tuple[int | None, Any]:
    if not isinstance(request_id, str):
        return None, None
    number, _, original = request_id.partition(":")
    try:
        return int(number), json.loads(original)
    except ValueError:
        return None, None


@dataclass(frozen=True)
class Background:
    """A background process's part in serving: the relay that must not idle while the runner
    is busy, and the pid files its runs are recorded in."""

    mux: Mux
    pids: PidFiles
