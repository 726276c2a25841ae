"""Owner ids: which process holds a lease, and whether this process can tell it is gone."""

from __future__ import annotations

import hashlib
import os
import socket
import uuid

_HOST = socket.gethostname()


def _pid_scope() -> str:
    """Which processes this one's pids name: its boot (boot_id) and its PID namespace (the
    inode of /proc/self/ns/pid), hashed short. Two processes with one hostname (containers on
    the host's network) see each other's pids only when their scopes are equal."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id",):
        try:
            with open(path) as file:
                parts.append(file.read().strip())
        except OSError:
            parts.append("")
    try:
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except OSError:
        parts.append("")
    if not any(parts):
        return ""
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:12]


_SCOPE = _pid_scope()


def new_owner() -> str:
    """`host:pid:nonce:scope` — unique per process start; its pid is checkable by a process of
    the same host, boot and PID namespace (the scope, see _pid_scope)."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}:{_SCOPE}"


def owner_alive(owner: str) -> bool:
    """False only when the owner's process is gone, as this process can tell: same host, same
    boot, same PID namespace (its pid names the same process here), and no such pid. Anything
    else (another machine or container, an owner id without a scope) only lease expiry tells."""
    host, pid_text, _, scope = (owner.partition("#")[0].split(":") + ["", "", "", ""])[:4]
    if host != _HOST or not pid_text.isdigit() or not _SCOPE or scope != _SCOPE:
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(int(pid_text))


def _zombie(pid: int) -> bool:
    """A process that has exited and waits for its parent to reap it (a SIGKILLed server whose
    parent is slow to reap): gone, though its pid still answers."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[:1] == [b"Z"]
    except OSError:
        return False
