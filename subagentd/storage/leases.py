"""Lease owners: one id per process, and whether the process behind an owner id still exists."""

from __future__ import annotations

import os
import socket
import uuid

_HOST = socket.gethostname()


def new_owner() -> str:
    """`host:pid:nonce` — unique per process start, and checkable on the same host."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def owner_alive(owner: str) -> bool:
    """False only when the owner ran on this host and its process is gone (a crash or kill)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit():
        return True  # another machine: only lease expiry tells
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
