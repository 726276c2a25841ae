"""No run outlives subagentd: a watchdog process stops the runs' process groups once it ends.

A `--runner` run leads a process group of its own (its signals reach what it starts), so it
survives its parent's death: a SIGKILL of subagentd, or an MCP client that kills subagentd's
group, would leave it working for nobody. The first run starts one watchdog: a small Python
process in a session of its own (no signal aimed at subagentd's group reaches it), reading a pipe
whose write end only subagentd holds (close-on-exec: the runs do not inherit it). subagentd
writes `+<pid> <start time>` when a run starts and `-<pid>` once it has been reaped; when the pipe
ends — subagentd exited, however it died — the watchdog sends SIGKILL to the process group of
every run still listed and exits. A pid whose start time (/proc/<pid>/stat field 22) differs is
someone else's by then and is left alone. Why not PR_SET_PDEATHSIG: it reaches only the run
itself, not what the run started, and fires when the *thread* that started the run exits.

This file runs as a script (`python -I -S watchdog.py`): nothing but the standard library.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot, or None when it is gone."""
    try:  # os.open and os.read: no file object (a turn's start reads it)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return stat.rpartition(b")")[2].split()[19].decode()


class Watchdog:
    """subagentd's side: the watchdog process, started with the first run (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def add(self, pid: int) -> None:
        started = _start_time(pid)
        if started is not None:
            self._send(f"+{pid} {started}\n")

    def remove(self, pid: int) -> None:
        self._send(f"-{pid}\n")

    def _send(self, line: str) -> None:
        with self._lock:
            if self._fd is None and not self._start():
                return
            assert self._fd is not None
            try:
                os.write(self._fd, line.encode())  # a short line: one atomic pipe write
            except OSError:  # the watchdog is gone (killed): runs are stopped as before
                os.close(self._fd)
                self._fd = None

    def _start(self) -> bool:
        read_end, write_end = os.pipe()  # both close-on-exec (PEP 446): no run inherits them
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of what is aimed at subagentd's group
            )
        except OSError as exc:
            os.close(write_end)
            print(f"subagentd: the runs' watchdog could not start: {exc}", file=sys.stderr)
            return False
        finally:
            os.close(read_end)
        self._fd = write_end
        return True

    def close(self) -> None:
        """At exit: the pipe closed (the watchdog stops what is still listed) and reaped."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._process is not None:
                try:
                    self._process.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
                self._process = None


def _watch() -> None:
    """The watchdog process: follow the list on stdin; at its end, stop what is listed."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    listed: dict[int, str] = {}
    with open(0, "rb", closefd=False) as pipe:
        for raw in pipe:
            line = raw.decode().strip()
            if line.startswith("+"):
                number, _, started = line[1:].partition(" ")
                listed[int(number)] = started
            elif line.startswith("-"):
                listed.pop(int(line[1:]), None)
    for pid, started in listed.items():
        now = _start_time(pid)
        if now is not None and now != started:
            continue  # the pid is someone else's now
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            continue
        print(f"subagentd ended: stopped runner process {pid} and its group", file=sys.stderr)


if __name__ == "__main__":
    _watch()
