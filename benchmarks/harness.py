"""Process plumbing for the benchmarks: spawn a stdio server, write and read NDJSON frames.

The pipes are subagentd.client's blocking ones (the same client for subagentd and its peers):
every read is bounded by a deadline, and a write reads what the server wrote whenever the pipe
is full, so a pipelined run cannot deadlock and needs no thread.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import msgspec

from subagentd.client import Client, ConnectionClosed, RequestTimeout
from subagentd.client import frames as wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "benchmarks", "peers")
PYTHON = sys.executable
_decode = msgspec.json.Decoder().decode

INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "subagentd-bench", "version": "0"},
}


class ServerFailure(RuntimeError):
    """The server died, timed out or answered with an error; carries its stderr tail."""


TS_PEER = os.path.join(PEERS, "ts-mcp")


def ensure_ts_peer() -> None:
    """`npm ci` the TypeScript SDK peer (pinned by its package-lock.json) unless it is installed."""
    if os.path.isdir(os.path.join(TS_PEER, "node_modules", "@modelcontextprotocol", "sdk")):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ServerFailure("the TypeScript SDK peer needs Node.js and npm on PATH")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=TS_PEER,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise ServerFailure(f"npm ci in {TS_PEER} failed:\n{done.stdout}{done.stderr}")


def server_command(kind: str, db: str | None = None, durability: str = "normal") -> list[str]:
    if kind == "echo":
        return [PYTHON, os.path.join(PEERS, "echo_server.py")]
    if kind == "anyio":
        return [PYTHON, os.path.join(PEERS, "anyio_echo.py")]
    if kind == "stack":
        return [PYTHON, os.path.join(PEERS, "stack_floor.py")]
    if kind == "asyncio":
        return [PYTHON, os.path.join(PEERS, "asyncio_echo.py")]
    if kind == "mcp":
        return [PYTHON, os.path.join(PEERS, "mcp_sdk_server.py")]
    if kind == "mcp-ts":
        ensure_ts_peer()
        return [shutil.which("node") or "node", os.path.join(TS_PEER, "server.mjs")]
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
            # nor are the budgets of a tree over its life (PROTOCOL.md section 12)
            "--tree-max-spawns=0",
            "--tree-max-turns=0",
        ]
    raise ValueError(kind)


def serve_options(env: dict[str, str]) -> set[str]:
    """The long options `subagentd serve` of another checkout accepts (from its --help): an
    older revision, measured beside the working tree, may lack options added since."""
    shown = subprocess.run(
        [PYTHON, "-m", "subagentd", "serve", "--help"],
        env={**os.environ, **env},
        cwd="/",  # never the repo: `python -m` would import ./subagentd ahead of PYTHONPATH
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(re.findall(r"--[a-z][a-z-]*", shown))


def accepted(command: list[str], options: set[str]) -> list[str]:
    """The command without its `--name=value` options that `options` lacks (the quota flags,
    which lift limits an older revision does not have); other words stay, a PostgreSQL URL with
    `?host=…` among them."""
    return [
        a for a in command if not a.startswith("--") or "=" not in a or a.split("=")[0] in options
    ]


class Server:
    """One server child process, driven through subagentd.client's blocking pipes."""

    def __init__(
        self,
        command: list[str],
        *,
        prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # interpreter options or a profiler module go right after the interpreter
        self.command = [command[0], *(prefix or []), *command[1:]]
        self.t_spawn = time.perf_counter()
        self.client = Client.spawn(
            command=self.command,
            cwd="/",  # never the repo: `python -m` would import ./subagentd ahead of PYTHONPATH
            env={**os.environ, **(env or {})},
        )
        assert self.client.process is not None
        self.proc = self.client.process

    # --- raw I/O --------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write bytes; while the pipe is full, what the server wrote meanwhile is read."""
        try:
            self.client.send_bytes(data)
        except OSError as exc:
            raise self.failure(f"writing failed: {exc!r}") from None

    def read_line(self, deadline: float) -> bytes:
        try:
            return self.client.next_line(max(0.0, deadline - time.perf_counter()))
        except RequestTimeout:
            raise self.failure("timed out waiting for output") from None
        except ConnectionClosed:
            raise self.failure("server closed stdout") from None

    def stderr_tail(self, limit: int = 4000) -> str:
        return self.client.stderr_text()[-limit:]

    def failure(self, what: str) -> ServerFailure:
        rc = self.proc.poll()
        return ServerFailure(
            f"{what}; command={' '.join(self.command)} rc={rc}\n--- stderr tail ---\n"
            f"{self.stderr_tail()}"
        )

    # --- JSON-RPC -------------------------------------------------------------------------

    def frame(self, method: str, params: Any = None, request_id: Any = None) -> bytes:
        if request_id is None:
            return wire.notification(method, params)
        return wire.request(request_id, method, params)

    def take_id(self) -> int:
        return next(self.client.ids)

    def notify(self, method: str, params: Any = None) -> None:
        self.write(self.frame(method, params))

    def response(self, request_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        try:
            return self.client.response(request_id, timeout)
        except (RequestTimeout, ConnectionClosed) as exc:
            raise self.failure(f"no response to {request_id}: {exc}") from None

    def call(self, method: str, params: Any = None, timeout: float = 30.0) -> Any:
        reply = self.response(self.client.start(method, params), timeout)
        if "error" in reply:
            raise self.failure(f"{method} failed: {reply['error']}")
        return reply["result"]

    def notification(self, method: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        try:
            return self.client.notification(method, timeout, **match)
        except (RequestTimeout, ConnectionClosed) as exc:
            raise self.failure(f"no {method} {match}: {exc}") from None

    def initialize(self) -> dict[str, Any]:
        result = self.call("initialize", INIT_PARAMS)
        self.notify("notifications/initialized")
        return result

    # --- measurements ---------------------------------------------------------------------

    def pipelined(
        self, frames: list[bytes], timeout: float = 120.0, window: int | None = None
    ) -> tuple[float, int, list[bytes]]:
        """Write all frames (reading responses whenever the pipe is full) and read every response.

        `window`: at most that many requests in flight (as many agents, each sending its next
        message once the last is answered): the first `window` frames, then one more per response.
        Returns (seconds from first byte written to last response read, error count, the first
        few error lines). Notifications that arrive meanwhile are counted out, not answered.
        """
        expected = len(frames)
        errors: list[bytes] = []
        deadline = time.perf_counter() + timeout
        t0 = time.perf_counter()
        sent = expected if window is None else min(window, expected)
        self.write(b"".join(frames[:sent]))
        got = 0
        while got < expected:
            line = self.read_line(deadline)
            head = line[:48]
            if b'"method"' in head and b'"id"' not in head:
                self.client.notifications.append(_decode(line))
                continue
            got += 1
            if b'"error":' in line or b'"isError":true' in line:
                errors.append(line[:400] if len(errors) < 5 else b"")
            if sent < expected:
                self.write(frames[sent])
                sent += 1
        elapsed = time.perf_counter() - t0
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
                    self.client.notifications.append(_decode(line))
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
        rc = self.client.close(timeout)
        if rc is None or rc < 0:
            raise self.failure(f"did not exit within {timeout}s of EOF")
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
