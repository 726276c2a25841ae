"""PostgreSQL write transactions: group commit, request savepoints, one writer at a time, fencing.

The same promises as storage/transactions.py (SQLite). Each group transaction takes a
transaction-scoped advisory lock (`pg_advisory_xact_lock(WRITER_LOCK)`) right after BEGIN, so the
processes sharing a database write one group at a time, exactly as under SQLite's single write
lock: every rule's read-then-write inside a group sees the latest committed state (READ COMMITTED
reads what committed before each statement, and nobody else commits meanwhile). A wait for that
lock past `lock_timeout` is the busy refusal (StorageBusyError, 1011); the server takes the lock
ahead of a write without waiting (`take_lock`) and waits for it itself, its event loop running.

The rules both backends share (the lock taken ahead, fencing, request savepoints) are
storage/group_base.py's; how the writer lock is taken and a group committed are here.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors

from subagentd.errors import StorageBusyError, StorageFailedError
from subagentd.storage.group_base import GroupCommitBase, RenewalThread
from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding
from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.doorbell import Listener, Renewer

log = logging.getLogger("subagentd")

WRITER_LOCK = 0x5342_4144  # the advisory lock key every group transaction takes ("SBAD")


class PgGroupCommit(GroupCommitBase):
    """One connection whose writes gather into one transaction until `commit` (group commit)."""

    _error = psycopg.Error
    conn: PgConnection

    def __init__(
        self,
        conn: PgConnection,
        url: str,
        lock_wait_ms: int,
        clock: Callable[[], float],
        connect: Callable[[], psycopg.Connection[Any]],
    ) -> None:
        super().__init__(lock_wait_ms, clock)
        self.conn = conn
        self._conn = conn.unheld  # the savepoint and rollback statements, past the held rows
        self._deferred = conn.held
        self.url = url
        self._connect = connect  # a new main connection, set up as the first one
        self._renew_wait_ms = int(lock_wait_ms)
        self.doorbell: Listener | None = None

    def check_file(self) -> bool:
        """Called with every heartbeat. There is no file to lose; a main connection the server
        dropped is opened anew here (outside a group: the lost group already failed), so writes
        work again once the server is back. True: writes are not refused for good."""
        if self.conn.lost and not self.conn.in_transaction:
            try:
                fresh = self._connect()
            except psycopg.Error as exc:
                log.warning("the database is unreachable (%s); retrying at the next heartbeat", exc)
            else:
                self.conn.raw.close()
                self.conn.raw = fresh
                self.conn.held.clear()
                self._open = False
                log.warning("reconnected to the database after a lost connection")
        return True

    def limit_lock_wait(self, milliseconds: int) -> None:
        """From now on wait at most this long for another process's group (the event loop must
        not stall); start-up keeps the constructor's longer wait."""
        self._lock_wait_ms = int(milliseconds)

    def begin(self) -> None:
        """Join the open group transaction, or open one for the first writer since the commit."""
        if not self.conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()

    def defer(self, sql: str, row: tuple[object, ...]) -> None:
        """Write one row of `sql` in the open group: it runs with the connection's next statement
        (or the COMMIT), the rows since the last one in one executemany (storage/deferred.py,
        as on SQLite). A failure to run them aborts the transaction: its COMMIT is refused."""
        conn = self.conn
        if not conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()
        conn.held.add(conn.unheld, sql, row)

    def _begin_locked(self, wait: bool) -> None:
        """BEGIN and the writer lock, waiting up to `lock_timeout` (`wait`) or not at all
        (pg_try_advisory_xact_lock)."""
        conn = self.conn
        try:
            if wait:  # one round trip (several statements in one query)
                conn.execute(
                    f"BEGIN; SET LOCAL lock_timeout = {int(self._lock_wait_ms)};"
                    f" SELECT pg_advisory_xact_lock({WRITER_LOCK})"
                )
            else:  # one round trip too: the lock's answer is the second result
                cursor = conn.execute(f"BEGIN; SELECT pg_try_advisory_xact_lock({WRITER_LOCK})")
                cursor.nextset()
                (got,) = cursor.fetchone()
                if not got:
                    raise errors.LockNotAvailable("writer lock held")
        except errors.LockNotAvailable:
            self._rollback_quietly()
            raise StorageBusyError() from None
        except psycopg.Error as exc:
            self._rollback_quietly()
            raise StorageFailedError(cause_of(exc)) from exc

    def _reason(self, exc: Exception) -> str:
        return cause_of(exc)

    def commit(self) -> None:
        """Make every write so far durable (one COMMIT), renewing this process's lease first when
        a third of it is spent; a group a failed statement aborted is rolled back and refused
        (PostgreSQL would turn its COMMIT into a rollback without an error)."""
        conn = self.conn
        if conn.in_transaction:
            if conn.failed:
                self.rollback()
                raise StorageFailedError("error")
            holding = self._holding
            renew = False
            try:
                if holding is not None:
                    now = self._now()
                    renew = holding.expires - now < holding.ttl * (1 - RENEW_EVERY)
                    if renew:
                        conn.execute(RENEW_SQL, (now + holding.ttl, holding.owner))
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                raise self._abandon(exc) from exc
            if renew and holding is not None:
                holding.expires = now + holding.ttl
        elif self._open:
            self._open = False
            raise StorageFailedError("error")
        self._open = False

    def ring_after_commit(self, address: str) -> None:
        """Wake the owner listening on `address` (a channel) when the open group commits:
        NOTIFY in the transaction is delivered by PostgreSQL at commit, and dropped with it."""
        self.conn.execute("SELECT pg_notify(?, '')", (address,))

    def _begin_release(self) -> None:
        self._lock_wait_ms = max(self._lock_wait_ms, 5000)
        self._busy = False
        self.conn.execute("BEGIN")
        self.conn.execute(f"SET LOCAL lock_timeout = {self._lock_wait_ms}")
        self.conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITER_LOCK,))

    def hold(self, owner: str, ttl: float, on_lost: Callable[[], None]) -> None:
        """Register `owner` as this process's lease owner (a new row, valid for `ttl` seconds,
        woken through its own NOTIFY channel), renewed at commit time and by a renewal thread."""
        self._on_lost = on_lost
        now = self._now()
        if self.doorbell is None:
            self.doorbell = Listener(self.url)
            weakref.finalize(self, self.doorbell.close)
        self.doorbell.listen(owner)
        self.conn.execute(  # in the open group, or committed at once (autocommit) as on SQLite
            "INSERT INTO owners (owner, expires_at, fenced, wake) VALUES (?, ?, 0, ?)",
            (owner, now + ttl, self.doorbell.channel),
        )
        self._keep_renewed(owner, ttl, now)

    def _renewer_for(self, holding: Holding) -> RenewalThread:
        return Renewer(self.url, holding, self._renew_wait_ms, self._now)


def cause_of(exc: Exception) -> str:
    """`data.reason` of STORAGE_FAILED: full (disk full, 53100), io (58030), or error."""
    if isinstance(exc, errors.DiskFull):
        return "full"
    if isinstance(exc, errors.IoError):
        return "io"
    return "error"
