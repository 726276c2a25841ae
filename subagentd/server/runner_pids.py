"""The runner processes a `--detach` background process started, one file each in its private
directory, so the next background process, after a SIGKILL of this one, stops the runs it left
(their process groups), and only those: a pid whose start time differs is someone else's now."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("subagentd")


class PidFiles:
    """The runner processes this background process started, one file each: `<pid>` holding
    the process's start time (/proc/<pid>/stat field 22)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)

    def sweep(self) -> int:
        """Stop the process groups of runs a killed predecessor left; how many were stopped."""
        stopped = 0
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            try:
                pid = int(name)
                with open(path) as f:
                    recorded = f.read().strip()
            except (ValueError, OSError):
                continue
            if recorded and start_time(pid) == recorded:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    stopped += 1
                    log.warning("detached: stopped runner process %d left by a crash", pid)
                except OSError:
                    pass
            try:
                os.unlink(path)
            except OSError:
                pass
        return stopped

    def add(self, pid: int) -> None:
        started = start_time(pid)
        if started is None:
            return
        path = os.path.join(self.directory, str(pid))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(started)

    def remove(self, pid: int) -> None:
        try:
            os.unlink(os.path.join(self.directory, str(pid)))
        except OSError:
            pass


def start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]
