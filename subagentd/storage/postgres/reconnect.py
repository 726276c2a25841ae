"""A lost PostgreSQL main connection: a new one made off the event loop's thread, and the outcome
of a COMMIT whose answer was lost with it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger("subagentd")

Connect = Callable[[], psycopg.Connection[Any]]


# read in the round trip that takes the writer lock: what a COMMIT whose answer is lost is looked
# up by (its transaction, its server process, and when that server started)
IDENTIFIED = "pg_current_xact_id()::text, pg_backend_pid(), pg_postmaster_start_time()::text"


def outcome_of(
    connect: Connect, xid: str, backend: int, started: str
) -> tuple[str | None, psycopg.Connection[Any] | None]:
    """Whether the transaction `xid` committed, as a new connection reads pg_xact_status:
    "committed" or "aborted", the old server process (`backend`) ended first if it still runs
    it (so the outcome is final); None when that cannot be found out (the server does not
    answer). With it the new connection, when one was made and works.

    A server started since (`started` differs: a restart, or a failover's promoted standby)
    may have handed the id out again: an id whose records never reached its WAL is the next
    one it gives. There "committed" may be another transaction's, so it is None; "aborted" or
    "in progress" still mean this one did not commit (had it committed there, the id would be
    its own)."""
    try:
        fresh = connect()
    except psycopg.Error as exc:
        log.warning("the outcome of a COMMIT cannot be checked: %s", exc)
        return None, None
    try:
        row = fresh.execute(
            "SELECT pg_postmaster_start_time()::text, pg_xact_status(%s::xid8)", (xid,)
        ).fetchone()
        same_server = row is not None and row[0] == started
        status = None if row is None else row[1]
        if status == "in progress" and same_server:  # its server process has not seen the loss
            fresh.execute(_END_IT, (backend, int(xid) & 0xFFFFFFFF))
            status = _xact_status(fresh, xid)
    except psycopg.Error as exc:
        log.warning("the outcome of a COMMIT cannot be checked: %s", exc)
        fresh.close()
        return None, None
    if not same_server:
        if status == "committed":
            log.warning(
                "the outcome of a COMMIT cannot be checked: the server restarted or failed over"
                " since, and the transaction's id may have been given to another"
            )
            return None, fresh
        return ("aborted" if status in ("aborted", "in progress") else None), fresh
    return (status if status in ("committed", "aborted") else None), fresh


# the server process ended only if it still runs that transaction (its 32-bit xid) on the same
# server (a pid read on a failover's new primary, or reused since, never ends an unrelated session)
_END_IT = (
    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
    " WHERE pid = %s AND backend_xid::text = %s::text"
)


def _xact_status(conn: psycopg.Connection[Any], xid: str) -> str | None:
    row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
    return None if row is None else row[0]


class Reconnect(threading.Thread):
    """Connects anew, every half second until it succeeds (the server may be restarting), off
    the event loop's thread; the group commit takes the connection at its next heartbeat."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        super().__init__(name="subagentd-reconnect", daemon=True)
        self.connect = connect
        self.done = threading.Event()
        self.stopped = threading.Event()
        self.conn: psycopg.Connection[Any] | None = None
        self.began = time.monotonic()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.conn = self.connect()
            except psycopg.Error as exc:
                log.debug("the database is unreachable (%s); trying again", exc)
                self.stopped.wait(0.5)
                continue
            break
        self.done.set()

    def take(self, wait: float) -> psycopg.Connection[Any] | None:
        """The new connection once made (waiting up to `wait` seconds for it), else None."""
        if wait > 0:
            self.done.wait(wait)
        return self.conn if self.done.is_set() else None

    def stop(self) -> None:
        self.stopped.set()
        if self.done.is_set() and self.conn is not None:
            self.conn.close()
