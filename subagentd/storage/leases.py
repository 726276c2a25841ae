"""Lease owners: one id and one `owners` row per process, kept renewed by a thread of its own."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("subagentd")

_HOST = socket.gethostname()

# A renewal that took the write lock writes expires_at = now + ttl; the owner renews every third
# of the ttl, so it has two thirds of it to get the lock from busy writers.
RENEW_EVERY = 1 / 3


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


@dataclass(slots=True)
class Holding:
    """This process's owner row as this process knows it: who, for how long, and until when it
    was last renewed (0: not known to be valid; the next write transaction checks the row)."""

    owner: str
    ttl: float
    expires: float = 0.0


RENEW_SQL = "UPDATE owners SET expires_at = ? WHERE owner = ? AND fenced = 0"


class Renewer(threading.Thread):
    """Renews the owner row every ttl/3 on its own connection, so leases outlive a busy event
    loop (a stopped process stops this thread too, and its leases do expire). While another
    connection holds the write lock it waits (busy_timeout); a renewal that finds the row fenced
    or gone leaves `expires` at 0, so the next write transaction sees the loss."""

    def __init__(
        self, path: str, holding: Holding, busy_timeout_ms: int, clock: Callable[[], float]
    ) -> None:
        super().__init__(name="subagentd-lease-renewal", daemon=True)
        self.path = path
        self.holding = holding
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        except sqlite3.Error as exc:  # commits still renew the lease
            log.warning("lease renewal thread cannot open the database: %s", exc)
            return
        try:
            while not self.stopped.wait(self.holding.ttl * RENEW_EVERY):
                self.renew(conn)
        finally:
            conn.close()

    def renew(self, conn: sqlite3.Connection) -> None:
        holding = self.holding
        owner, ttl = holding.owner, holding.ttl
        try:
            conn.execute("BEGIN IMMEDIATE")
            expires = self.clock() + ttl  # counted from when the write lock was ours
            held = conn.execute(RENEW_SQL, (expires, owner)).rowcount == 1
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # busy past the timeout, or the database went away
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            log.debug("lease renewal failed (%s); retrying in %.1f s", exc, ttl * RENEW_EVERY)
            return
        if holding.owner == owner:
            holding.expires = expires if held else 0.0
