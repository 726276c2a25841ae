"""The two side connections of a process on PostgreSQL: its doorbell (LISTEN) and its lease
renewal thread.

The doorbell is a connection that LISTENs on this process's channel; its socket is the fd the
server waits on. A sender's NOTIFY is queued in its write transaction and delivered at commit, so
a ring never precedes the signal rows it announces (storage/signals.py: the rows are the truth).
Its payload names the session signalled, so the owner takes that session's rows under its tree's
lock alone (server/connection.py `_doorbell`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable

import psycopg
from psycopg import pq

from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding
from subagentd.storage.postgres.connection import Timeouts, to_psycopg

log = logging.getLogger("subagentd")


def channel_of(owner: str) -> str:
    """A NOTIFY channel per owner (an identifier: ≤ 63 bytes, lower-case, no quoting needed)."""
    return "subagentd_" + hashlib.sha256(owner.encode()).hexdigest()[:32]


class Listener:
    """This process's doorbell: a LISTEN connection, drained without blocking.

    The server waits on a number of the doorbell's own (a duplicate of the socket), never on
    libpq's: once the connection is lost libpq closes its number, which a new connection may
    then get; ours stays this doorbell's, held by a pipe nobody writes until `revive`
    connects again (at heartbeats) and puts the new socket under it."""

    def __init__(self, url: str, timeouts: Timeouts | None = None) -> None:
        self.url = url
        self.timeouts = timeouts or Timeouts()
        self.conn = self._connect()
        self.channel = ""
        self._fd = os.dup(self.conn.fileno())  # the server waits on this number
        self._quiet: int | None = None  # a pipe's write end, while the connection is lost
        self.wakeups = 0  # drains that found a notification (server/stats `traffic`)
        self.rings = 0  # notifications they found

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url, autocommit=True, **self.timeouts.libpq())

    def listen(self, owner: str) -> None:
        """Listen on `owner`'s channel (an owner that changed stops listening on its old one)."""
        if self.channel and self._quiet is None:
            self.conn.execute(f"UNLISTEN {self.channel}")
        self.channel = channel_of(owner)
        if self._quiet is None:
            self.conn.execute(f"LISTEN {self.channel}")

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> list[str]:
        """Consume every notification received: the sessions they name (a sender's payload,
        storage/postgres/tables.py PgSignals; "" for one that names none), in order."""
        if self._quiet is not None or self._fd < 0:  # silenced, or closed (a late wake-up)
            return []
        pgconn = self.conn.pgconn
        rung: list[str] = []
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as exc:  # the server went away: heartbeats still poll
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "lost"
            log.warning(
                "the doorbell connection failed (%s); signals wait for the heartbeat", reason
            )
            self._silence()
            return rung
        while (note := pgconn.notifies()) is not None:
            rung.append(note.extra.decode("utf-8", "replace"))
        if rung:
            self.wakeups += 1
            self.rings += len(rung)
        if pgconn.status == pq.ConnStatus.BAD:  # the server said goodbye (e.g. it shuts down)
            log.warning("the doorbell connection was closed; signals wait for the heartbeat")
            self._silence()
        return rung

    def _silence(self) -> None:
        """After a lost connection the server must not wait on an endlessly readable socket: a
        pipe nobody writes takes its place under our number until `revive`."""
        if self._quiet is None and self._fd >= 0:
            read, self._quiet = os.pipe()
            os.dup2(read, self._fd)
            os.close(read)

    def revive(self) -> None:
        """A lost doorbell connects again (called at heartbeats) and listens as before."""
        if self._quiet is None or self._fd < 0:
            return
        try:
            fresh = self._connect()
            if self.channel:
                fresh.execute(f"LISTEN {self.channel}")
        except psycopg.Error:
            return  # the next heartbeat tries again
        os.dup2(fresh.fileno(), self._fd)
        os.close(self._quiet)
        self._quiet = None
        try:
            self.conn.close()
        except psycopg.Error:
            pass
        self.conn = fresh
        log.warning("the doorbell connection was opened again")

    def close(self) -> None:
        self.conn.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._quiet is not None:
            os.close(self._quiet)
            self._quiet = None


# A group's commit-time renewal of its owner row (RENEW_SQL), unless the row is locked: only this
# process's renewal thread locks it while a group holds the writer lock, and its UPDATE renews the
# row anyway. Waiting for it instead could outlast the group's lock_timeout (the serving lock
# wait) on a loaded machine and lose the whole group.
RENEW_UNLOCKED = (
    "UPDATE owners SET expires_at = ? WHERE owner = (SELECT owner FROM owners"
    " WHERE owner = ? AND fenced = 0 FOR UPDATE SKIP LOCKED)"
)


class PgRenewer(threading.Thread):
    """Renews the owner row every ttl/3 on its own connection, never waiting for the writer lock
    (row locks alone order it with a fencing writer: the UPDATE re-checks `fenced = 0`)."""

    def __init__(
        self,
        url: str,
        holding: Holding,
        lock_wait_ms: int,
        clock: Callable[[], float],
        timeouts: Timeouts | None = None,
    ) -> None:
        super().__init__(name="subagentd-lease-renewal", daemon=True)
        self.url = url
        self.timeouts = timeouts or Timeouts()
        self.holding = holding
        self.lock_wait_ms = lock_wait_ms
        self.clock = clock
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        conn = self._connect()
        try:
            while not self.stopped.wait(self.holding.ttl * RENEW_EVERY):
                if conn is None or conn.closed or conn.pgconn.status == pq.ConnStatus.BAD:
                    if conn is not None:
                        conn.close()
                    conn = self._connect()  # the server dropped it: commits renew meanwhile
                    if conn is None:
                        self.holding.answered_since = self.clock()
                if conn is not None:
                    self.renew(conn)
        finally:
            if conn is not None:
                conn.close()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]] | None:
        try:
            conn = psycopg.connect(self.url, autocommit=True, **self.timeouts.libpq())
            conn.execute(
                f"SET lock_timeout = {int(self.lock_wait_ms)};"
                f" SET statement_timeout = {int(self.timeouts.statement * 1000)}"
            )
        except psycopg.Error as exc:  # commits still renew the lease
            log.warning("lease renewal thread cannot connect to the database: %s", exc)
            return None
        return conn

    def renew(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        holding = self.holding
        owner, ttl = holding.owner, holding.ttl
        expires = self.clock() + ttl
        holding.renewal_began()
        try:
            held = conn.execute(to_psycopg(RENEW_SQL), (expires, owner)).rowcount == 1
        except psycopg.Error as exc:
            holding.renewal_ended(False, self.clock())
            log.debug("lease renewal failed (%s); retrying in %.1f s", exc, ttl * RENEW_EVERY)
            return
        holding.renewal_ended(True, self.clock())
        if holding.owner == owner:
            holding.expires = expires if held else 0.0
