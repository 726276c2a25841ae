"""The runner processes a `--detach` background process started, one file each in its private
directory, so the next background process, after a SIGKILL of this one, stops the runs it left
(their process groups), and only those.

Which group is ours: each run leads a group (and session) of its own whose id is its pid. A
recorded pid whose process still has the recorded start time (/proc/<pid>/stat field 22; alive
or a zombie) still names our group. A recorded pid whose process is gone does too while a member
of its group lives on: a group id stays taken while the group has a member, so no other process
can have been given that pid, nor made that group, since the run did. The members are the
processes whose group id is the pid and which started no earlier than the run. A pid that now
belongs to a process with another start time is someone else's: our group ended before the pid
could be reused, and nothing is signalled.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import NamedTuple

log = logging.getLogger("subagentd")


class Stat(NamedTuple):
    """What /proc/<pid>/stat says of a process that matters here."""

    state: str  # field 3: "Z" for a zombie
    group: int  # field 5: its process group id
    started: str  # field 22: its start time in clock ticks since boot


class PidFiles:
    """The runner processes this background process started, one file each: `<pid>` holding
    the process's start time (/proc/<pid>/stat field 22)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)

    def sweep(self) -> int:
        """Stop the process groups of runs a killed predecessor left; how many still had a
        live process (the run itself, or what it started when the run had already exited)."""
        stopped = 0
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            try:
                pid = int(name)
                with open(path) as f:
                    recorded = f.read().strip()
            except (ValueError, OSError):
                continue
            if recorded.isdigit() and stop_group(pid, recorded):
                stopped += 1
                log.warning("detached: stopped runner process %d (its group) left by a crash", pid)
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


def stop_group(pid: int, started: str) -> bool:
    """SIGKILL to the group the run `pid` (started at `started`) leads, if it is still ours
    (module docstring); whether a live process was in it."""
    leader = stat(pid)
    if leader is not None and leader.started != started:
        return False  # the pid is someone else's now
    members = group_members(pid, since=int(started))
    leader_alive = leader is not None and leader.state != "Z"
    if leader is None and not members:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # the run left its own group: the run alone
        if leader_alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                return False
    except OSError:
        return False
    return leader_alive or bool(members)


def group_members(group: int, since: int) -> list[int]:
    """The live processes in process group `group` that started at `since` or later."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        one = stat(int(name))
        if one is not None and one.group == group and one.state != "Z":
            if int(one.started) >= since:
                found.append(int(name))
    return found


def stat(pid: int) -> Stat | None:
    """A process's state, group and start time, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return Stat(fields[0], int(fields[2]), fields[19])
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot, or None when it is gone."""
    found = stat(pid)
    return None if found is None else found.started
