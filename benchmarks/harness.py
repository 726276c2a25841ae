"""Process plumbing for the benchmarks: spawn a stdio server, write and read NDJSON frames.

Every read is bounded by a deadline. Pipelined runs write from a thread while the calling thread
reads, so neither side can fill a pipe and deadlock.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any

import msgspec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "benchmarks", "peers")
PYTHON = sys.executable
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "subagentd-bench", "version": "0"},
}


class ServerFailure(RuntimeError):
    """The server died, timed out or answered with an error; carries its stderr tail."""


def server_command(kind: str, db: str | None = None, durability: str = "normal") -> list[str]:
    if kind == "echo":
        return [PYTHON, os.path.join(PEERS, "echo_server.py")]
    if kind == "mcp":
        return [PYTHON, os.path.join(PEERS, "mcp_sdk_server.py")]
    if kind == "subagentd":
        return [
            PYTHON,
            "-m",
            "subagentd",
            "--db",
            db or ":memory:",
            "--durability",
            durability,
            "--log-level",
            "warning",
            # the benchmarks drive 10k live children under one root and thousands of messages
            # into one inbox: far past the default quotas (SECURITY.md), which are not measured
            "--max-children=0",
            "--max-live-per-root=0",
            "--max-live=0",
            "--max-queued=0",
        ]
    raise ValueError(kind)


class Server:
    """One server child process over pipes."""

    def __init__(
        self,
        command: list[str],
        *,
        prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # interpreter options or a profiler module go right after the interpreter
        self.command = [command[0], *(prefix or []), *command[1:]]
        self.stderr = tempfile.TemporaryFile()
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd="/",  # never the repo: `python -m` would import ./subagentd ahead of PYTHONPATH
            bufsize=0,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        self.parts: list[bytes] = []  # a partial line, in pieces (joined once, not per chunk)
        self.lines: deque[bytes] = deque()
        self.next_id = 1
        self.notifications: list[Any] = []

    # --- raw I/O --------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise self.failure("timed out waiting for output")
        ready, _, _ = select.select([self.rfd], [], [], remaining)
        if not ready:
            raise self.failure("timed out waiting for output")
        chunk = os.read(self.rfd, 1 << 20)
        if not chunk:
            raise self.failure("server closed stdout")
        if b"\n" not in chunk:
            self.parts.append(chunk)
            return
        self.parts.append(chunk)
        *lines, tail = b"".join(self.parts).split(b"\n")
        self.lines.extend(lines)
        self.parts = [tail] if tail else []

    def read_line(self, deadline: float) -> bytes:
        while not self.lines:
            self._fill(deadline)
        return self.lines.popleft()

    def stderr_tail(self, limit: int = 4000) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        return text[-limit:]

    def failure(self, what: str) -> ServerFailure:
        rc = self.proc.poll()
        return ServerFailure(
            f"{what}; command={' '.join(self.command)} rc={rc}\n--- stderr tail ---\n"
            f"{self.stderr_tail()}"
        )

    # --- JSON-RPC -------------------------------------------------------------------------

    def frame(self, method: str, params: Any = None, request_id: Any = None) -> bytes:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if request_id is not None:
            msg["id"] = request_id
        if params is not None:
            msg["params"] = params
        return _encode(msg) + b"\n"

    def take_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def notify(self, method: str, params: Any = None) -> None:
        self.write(self.frame(method, params))

    def response(self, request_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            msg = _decode(self.read_line(deadline))
            if isinstance(msg, dict) and "id" not in msg and "method" in msg:
                self.notifications.append(msg)
                continue
            if isinstance(msg, dict) and msg.get("id") == request_id:
                return msg

    def call(self, method: str, params: Any = None, timeout: float = 30.0) -> Any:
        request_id = self.take_id()
        self.write(self.frame(method, params, request_id))
        reply = self.response(request_id, timeout)
        if "error" in reply:
            raise self.failure(f"{method} failed: {reply['error']}")
        return reply["result"]

    def notification(self, method: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout
        while True:
            for note in self.notifications:
                if note["method"] == method and all(
                    note["params"].get(k) == v for k, v in match.items()
                ):
                    self.notifications.remove(note)
                    return note["params"]
            msg = _decode(self.read_line(deadline))
            if isinstance(msg, dict) and "id" not in msg and "method" in msg:
                self.notifications.append(msg)

    def initialize(self) -> dict[str, Any]:
        result = self.call("initialize", INIT_PARAMS)
        self.notify("notifications/initialized")
        return result

    # --- measurements ---------------------------------------------------------------------

    def pipelined(
        self, frames: list[bytes], timeout: float = 120.0
    ) -> tuple[float, int, list[bytes]]:
        """Write all frames from a thread while reading every response here.

        Returns (seconds from first byte written to last response read, error count, the first
        few error lines). Notifications that arrive meanwhile are counted out, not answered.
        """
        blob = b"".join(frames)
        expected = len(frames)
        errors: list[bytes] = []
        write_error: list[BaseException] = []

        def writer() -> None:
            try:
                self.write(blob)
            except BaseException as exc:  # noqa: BLE001 - reported below
                write_error.append(exc)

        deadline = time.perf_counter() + timeout
        thread = threading.Thread(target=writer, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        got = 0
        while got < expected:
            line = self.read_line(deadline)
            head = line[:48]
            if b'"method"' in head and b'"id"' not in head:
                self.notifications.append(_decode(line))
                continue
            got += 1
            if b'"error":' in line or b'"isError":true' in line:
                errors.append(line[:400] if len(errors) < 5 else b"")
        elapsed = time.perf_counter() - t0
        thread.join(timeout)
        if write_error:
            raise self.failure(f"writing failed: {write_error[0]!r}")
        real_errors = [e for e in errors if e]
        return elapsed, len(errors), real_errors

    def round_trips(self, frames: list[bytes], timeout: float = 60.0) -> list[float]:
        """One request in flight at a time: seconds per request, response matched by order."""
        samples = []
        deadline = time.perf_counter() + timeout
        for frame in frames:
            t0 = time.perf_counter()
            self.write(frame)
            while True:
                line = self.read_line(deadline)
                head = line[:48]
                if b'"method"' in head and b'"id"' not in head:
                    self.notifications.append(_decode(line))
                    continue
                break
            samples.append(time.perf_counter() - t0)
        return samples

    def rss_kib(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise self.failure("no VmRSS")

    def close(self, timeout: float = 15.0) -> int:
        """EOF on stdin, then wait for exit (killed after the timeout)."""
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise self.failure(f"did not exit within {timeout}s of EOF") from None
        try:
            self.proc.stdout.close()  # type: ignore[union-attr]
        except OSError:
            pass
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
