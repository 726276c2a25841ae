"""Waiting for the writer lock in PostgreSQL's own lock queue: first come, first served.

A blocking `pg_advisory_xact_lock` joins the lock's wait queue, and PostgreSQL's lock manager
queues every later request that conflicts with a waiter behind it (lock.c LockAcquireExtended:
"If lock requested conflicts with locks requested by waiters, must join wait queue"); the
holder's release grants the lock to the first waiter. So a process waiting this way gets the lock
before the holder's next group: its `pg_try_advisory_xact_lock` fails while anyone waits, and
its next blocking request queues behind. A process that only tried again after short sleeps
would miss the gap between two groups of a busy sibling, again and again.

The wait blocks its thread, and the event loop must serve on: it runs in a worker thread
(wire/lockwait.py) on the group's own connection, which is lent to it meanwhile
(PgConnection.reclaim: anything else that needs the connection ends the wait first, through
PostgreSQL's cancel request, and the waiter queues again).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import psycopg

from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.reconnect import IDENTIFIED

STOP_WAIT = 1.0  # seconds a cancelled wait may take to end before its socket is shut


class LentWait:
    """One wait for the writer lock on a lent connection: `run` in a worker thread, `stop` from
    any thread; afterwards `xid` is the transaction that took it, or `error` why not (the lock
    wait's timeout, a cancel, a lost connection)."""

    def __init__(self, conn: PgConnection, tree: int | None, locks: str, milliseconds: int) -> None:
        self.conn = conn
        self.tree = tree  # the tree whose locks `locks` (a select list) takes; None: every tree's
        # one round trip, which also reads the transaction's id (PgGroupCommit.commit)
        self.sql = (
            f"BEGIN; SET LOCAL lock_timeout = {max(1, milliseconds)}; SELECT {locks}, {IDENTIFIED}"
        )
        self.canceller = conn.raw.pgconn.get_cancel()  # made here: not while the thread uses it
        self.finished = threading.Event()
        self.xid: str | None = None
        self.backend = 0  # the server process that ran it (pg_backend_pid: a pooler's differs)
        self.started = ""  # when its server started (pg_postmaster_start_time)
        self.error: Exception | None = None

    def run(self) -> None:
        """The wait itself (a worker thread's): BEGIN, then the lock, waited for in the queue.
        The statement watchdog bounds it as any statement (connection.py Watchdog)."""
        conn = self.conn
        conn.since = time.monotonic()
        conn.round_trips += 1
        try:
            cursor = conn.raw.execute(self.sql)
            cursor.nextset()
            cursor.nextset()
            row = cursor.fetchone()
            if row is not None:
                self.xid, self.backend, self.started = row[-3:]
        except Exception as exc:  # handed to the loop (PgGroupCommit.settle_lent)
            self.error = exc
        finally:
            conn.since = None
            self.finished.set()

    def stop(self) -> None:
        """End the wait now if it still waits (PostgreSQL cancels the statement), and return
        once the thread is done with the connection; a server that answers not even that gets
        the connection's socket shut (the connection is then lost, and made anew)."""
        if self.finished.is_set():
            return
        try:
            self.canceller.cancel()
        except psycopg.Error:
            pass
        if not self.finished.wait(STOP_WAIT):
            shut(self.conn.raw)
            self.finished.wait()

    @property
    def taken(self) -> bool:
        return self.finished.is_set() and self.error is None and self.xid is not None


def shut(raw: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket: libpq's wait on it returns at once, the connection lost."""
    try:
        fd = raw.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (psycopg.Error, OSError):  # closed already
        pass
