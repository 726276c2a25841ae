"""Starting subagentd as a child process: its command line and where its stderr (logs) goes."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, Any, Literal

StderrMode = Literal["capture", "inherit", "discard"]
CANNOT_START = "cannot start: "
EXIT_WAIT = 2.0  # seconds to wait for a subagentd that closed its stdout to exit (its log read)


def server_command(
    args: Sequence[str] = (),
    *,
    db: str | None = None,
    caller: str | None = None,
    command: Sequence[str] | None = None,
) -> list[str]:
    """`python -m subagentd serve [--db DB] [--caller ID] ARGS` (or `command` instead of the
    first part, e.g. `["subagentd"]` or `["subagentd", "serve"]`)."""
    argv = list(command) if command is not None else [sys.executable, "-m", "subagentd", "serve"]
    if db is not None:
        argv += ["--db", db]
    if caller is not None:
        argv += ["--caller", caller]
    return argv + list(args)


class Stderr:
    """subagentd's stderr: captured to a temporary file (read with `text()`), inherited, or dropped."""

    def __init__(self, mode: StderrMode) -> None:
        self.file: IO[bytes] | None = tempfile.TemporaryFile() if mode == "capture" else None
        self.target: Any = {"capture": self.file, "inherit": None, "discard": subprocess.DEVNULL}[
            mode
        ]

    def text(self, limit: int = 64 * 1024) -> str:
        """The last `limit` characters subagentd logged (empty unless captured)."""
        if self.file is None or self.file.closed:
            return ""
        self.file.seek(0)
        return self.file.read().decode(errors="replace")[-limit:]

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def cannot_start_line(logged: str) -> str | None:
    """subagentd's own `cannot start: …` line in what it logged (text or JSON log format), the
    last one; None when there is none."""
    for line in reversed(logged.splitlines()):
        at = line.find(CANNOT_START)
        if at < 0:
            continue
        if line.startswith("{"):  # --log-format json
            try:
                message = json.loads(line).get("message")
            except (ValueError, AttributeError):
                message = None
            if isinstance(message, str) and message.startswith(CANNOT_START):
                return message
        return line[at:]
    return None
