"""The two side connections of a process on PostgreSQL: its doorbell (LISTEN) and its lease
renewal thread.

The doorbell is a connection that LISTENs on this process's channel; its socket is the fd the
server waits on. A sender's NOTIFY is queued in its write transaction and delivered at commit, so
a ring never precedes the signal rows it announces (storage/signals.py: the rows are the truth).
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
    """This process's doorbell: a LISTEN connection, drained without blocking."""

    def __init__(self, url: str, timeouts: Timeouts | None = None) -> None:
        self.conn = psycopg.connect(url, autocommit=True, **(timeouts or Timeouts()).libpq())
        self.channel = ""
        self._fd = self.conn.fileno()  # the server waits on this number (it outlives a loss)
        self._quiet: int | None = None  # a pipe's write end, once the connection was lost

    def listen(self, owner: str) -> None:
        """Listen on `owner`'s channel (an owner that changed stops listening on its old one)."""
        if self.channel:
            self.conn.execute(f"UNLISTEN {self.channel}")
        self.channel = channel_of(owner)
        self.conn.execute(f"LISTEN {self.channel}")

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> int:
        """Consume every notification received (they carry nothing); how many there were."""
        pgconn = self.conn.pgconn
        count = 0
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as exc:  # the server went away: heartbeats still poll
            log.warning("the doorbell connection failed (%s); signals wait for the heartbeat", exc)
            self._silence()
            return count
        while pgconn.notifies() is not None:
            count += 1
        if pgconn.status == pq.ConnStatus.BAD:  # the server said goodbye (e.g. it shuts down)
            log.warning("the doorbell connection was closed; signals wait for the heartbeat")
            self._silence()
        return count

    def _silence(self) -> None:
        """After a lost connection the server must not wait on a closed (or reused) number, nor
        on an endlessly readable one: a pipe nobody writes takes its place, and signals are taken
        at heartbeats from then on."""
        if self._quiet is None:  # libpq closed the socket: the number now holds the pipe
            read, self._quiet = os.pipe()
            if read != self._fd:  # the number may be free again, and the pipe may get it itself
                os.dup2(read, self._fd)
                os.close(read)

    def close(self) -> None:
        self.conn.close()
        if self._quiet is not None:
            for fd in (self._fd, self._quiet):
                os.close(fd)
            self._quiet = None


class Renewer(threading.Thread):
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
