"""The blocking client: spawn subagentd (or attach to its pipes) and call it with typed methods.

Every host-API method and tool is a method named after its wire name (`agents/spawn` is
`agents_spawn`), taking the fields of its schema Struct as arguments and returning the result
Struct (generated: `subagentd/client/methods.py`); `call` sends anything else. The transport is
`Pipes` (see there why it is blocking).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from types import TracebackType

from subagentd.client.errors import CannotStart, ConnectionClosed
from subagentd.client.methods import BlockingMethods
from subagentd.client.pipes import TIMEOUT
from subagentd.client.process import (
    EXIT_WAIT,
    Stderr,
    StderrMode,
    cannot_start_line,
    server_command,
)


class Client(BlockingMethods):
    """A connection to one subagentd; `Client.spawn(...)` starts one and owns it."""

    process: subprocess.Popen[bytes] | None = None
    stderr: Stderr | None = None

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
        keep_raw: bool = False,
    ) -> Client:
        """Start `python -m subagentd serve --db DB ARGS` (or `command`) and connect to it."""
        logs = Stderr(stderr)
        try:
            proc = subprocess.Popen(
                server_command(args, db=db, caller=caller, command=command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logs.target,
                env=env,
                cwd=cwd,
            )
        except BaseException:
            logs.close()
            raise
        assert proc.stdin is not None and proc.stdout is not None
        client = cls(proc.stdin.fileno(), proc.stdout.fileno(), keep_raw=keep_raw)
        client.process, client.stderr = proc, logs
        return client

    def stderr_text(self) -> str:
        """What the spawned subagentd logged so far (its stderr, when captured)."""
        return self.stderr.text() if self.stderr is not None else ""

    def closed_error(self) -> ConnectionClosed:
        """CannotStart with subagentd's own `cannot start: …` line when it exited saying one
        (its stderr captured); else the plain ConnectionClosed."""
        if self.process is not None and self.stderr is not None:
            try:
                self.process.wait(EXIT_WAIT)
            except subprocess.TimeoutExpired:
                pass
            else:
                line = cannot_start_line(self.stderr.text())
                if line is not None:
                    return CannotStart(line)
        return super().closed_error()

    def close(self, timeout: float = TIMEOUT) -> int | None:
        """Close subagentd's stdin (EOF: it commits and exits) and wait for it; its exit code
        (killed after `timeout`). Without a spawned process, only our ends are closed."""
        proc = self.process
        if proc is None:
            for fd in (self.write_fd, self.read_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            return None
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass  # it exited already (killed, signalled)
        self.read_to_eof(timeout)  # a subagentd blocked writing to us could not exit
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self.stderr is not None:
            self.stderr.close()
        return proc.returncode

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
