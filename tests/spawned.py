"""The tests' host: the public client (`subagentd.client`) over a real subagentd's pipes, every
wait bounded; the server as a child process or in-process on a thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from subagentd.client import Client, RpcError
from subagentd.client.pipes import TIMEOUT

__all__ = ["TIMEOUT", "Host", "InProcessServer", "RpcError", "ServerProcess"]


class Host(Client):
    """The public client over a server's pipes, keeping every line read (tests check the bytes),
    plus shorthands that play a real host with plain dicts."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        super().__init__(write_fd, read_fd, keep_raw=True)

    def close(self, timeout: float = TIMEOUT) -> None:
        """After the server closed its end: read to its EOF and close our read fd."""
        if self.read_fd >= 0:
            self.read_to_eof(timeout)
            os.close(self.read_fd)
            self.read_fd = -1

    def read_any(self, timeout: float = TIMEOUT) -> Any:
        """The next frame whatever it is (batches come back as lists)."""
        return self.next_frame(timeout)

    def initialize(self, **capabilities: Any) -> dict[str, Any]:  # type: ignore[override]
        params: dict[str, Any] = {
            "protocolVersion": "2025-06-18",
            "clientInfo": {"name": "test", "version": "0"},
        }
        if capabilities:
            params["capabilities"] = {"experimental": {"subagentd": capabilities}}
        result = self.call("initialize", params)
        self.notify("notifications/initialized")
        return result

    def open(self, agent_id: str, **params: Any) -> dict[str, Any]:
        return self.call("agents/open", {"agent_id": agent_id, **params})

    def spawn(  # type: ignore[override]
        self, caller: str, child_id: str, label: str = "task", prompt: str = "go", **params: Any
    ) -> dict[str, Any]:
        """Spawn and consume the child's first turn/start; returns the spawn result plus turn_id."""
        result = self.call(
            "agents/spawn",
            {"caller": caller, "child_id": child_id, "label": label, "prompt": prompt, **params},
        )
        start = self.notification("turn/start", agent_id=child_id)
        return {**result, "turn_id": start["turn_id"], "turn": start}

    def end_turn(
        self, agent_id: str, turn_id: str, reason: str = "completed", output: str | None = None
    ) -> None:
        params: dict[str, Any] = {"agent_id": agent_id, "turn_id": turn_id, "reason": reason}
        if output is not None:
            params["output"] = output
        self.call("turns/end", params)

    def tool(self, name: str, caller: str, **arguments: Any) -> Any:
        return self.call(name, {"caller": caller, **arguments})


class ServerProcess:
    """`python -m subagentd` as a child process with pipes; stderr captured to a file.

    `argv` replaces everything after the Python executable (e.g. `["-c", code, "--db", ...]`).
    """

    def __init__(
        self,
        *args: str,
        db: str = ":memory:",
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
        preexec_fn: Any = None,
    ) -> None:
        import tempfile

        self.stderr = tempfile.TemporaryFile()
        if argv is None:
            argv = ["-m", "subagentd", "--db", db, *args]
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env={**os.environ, **(env or {})},
            preexec_fn=preexec_fn,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.host = Host(self.proc.stdin.fileno(), os.dup(self.proc.stdout.fileno()))

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def stop(self) -> int:
        try:
            self.close_stdin()  # also when the process already exited (killed, signalled)
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.host.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.stderr.close()
        return self.proc.returncode


class InProcessServer:
    """The real Connection on a real event loop in a thread, talking over os.pipe() pairs."""

    def __init__(
        self,
        *,
        report_delivery: str = "wakeup",
        interrupt_grace: float = 10.0,
        caller: str | None = None,
        store: Any = None,
        max_depth: int = 8,
        max_frame_bytes: int = 16 * 1024 * 1024,
        prepare: Any = None,  # a function of the Service, run in the start-up transaction
        serve_with: Any = None,  # the Connection -> what anyio runs instead of its serve
        **settings: Any,  # any other core Settings field (e.g. quotas)
    ) -> None:
        import anyio

        from subagentd.core.service import Service
        from subagentd.core.settings import Settings
        from subagentd.server.connection import Connection
        from subagentd.server.handlers import METHODS
        from subagentd.storage.database import SqliteStore
        from subagentd.wire.transport import FdReader, FdWriter

        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        self.store = store or SqliteStore(":memory:")
        chosen = Settings(
            report_delivery=report_delivery,
            interrupt_grace=interrupt_grace,
            max_depth=max_depth,
            **settings,
        )
        self.service = Service(self.store, chosen)  # the Connection attaches its outlets
        with self.service.transaction():
            self.service.recovery.recover()
            if caller is not None:  # as `subagentd --caller` does at start-up
                from subagentd.cli import open_default_caller

                open_default_caller(self.service, caller)
            if prepare is not None:  # state made before serving (never from the test's thread)
                prepare(self.service)
        self.service.commit()
        self.connection = Connection(
            self.service,
            FdReader(to_server_r),
            FdWriter(from_server_w),
            locks=self.service.store,
            methods=METHODS,
            default_caller=caller,
            handle_signals=False,
            max_frame_bytes=max_frame_bytes,
        )
        self._to_server_w = to_server_w
        self._fds = [to_server_r, from_server_w]
        self.error: BaseException | None = None
        self.stopped = False
        main = self.connection.serve if serve_with is None else serve_with(self.connection)

        def run() -> None:
            try:
                anyio.run(main)
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
            finally:
                for fd in self._fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.host = Host(to_server_w, from_server_r)

    def stop(self) -> None:
        if self.stopped:  # a test that stops it before its store's fixture closes the store
            return
        self.stopped = True
        try:
            os.close(self._to_server_w)
        except OSError:
            pass
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "server did not stop after EOF"
        self.host.close()
        if self.error is not None:
            raise self.error


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def run_client_suite(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Run another language's test command (npm test, go test) to the end; its output, or an
    AssertionError carrying the output's tail when it fails or runs too long."""
    what = " ".join([Path(argv[0]).name, *argv[1:]])
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace")
        raise AssertionError(f"{what} ran longer than {timeout} s:\n{output[-20000:]}") from None
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"{what} failed (exit {done.returncode}):\n{output[-20000:]}"
    return output
