"""PostgreSQL write transactions: group commit, request savepoints, one writer at a time, fencing.

The same promises as storage/transactions.py (SQLite). Each group transaction takes a
transaction-scoped advisory lock (`pg_advisory_xact_lock(WRITER_LOCK)`) right after BEGIN, so the
processes sharing a database write one group at a time, exactly as under SQLite's single write
lock: every rule's read-then-write inside a group sees the latest committed state (READ COMMITTED
reads what committed before each statement, and nobody else commits meanwhile). A wait for that
lock past `lock_timeout` is the busy refusal (StorageBusyError, 1011); the server takes the lock
ahead of a write without waiting (`take_lock`) and waits for it itself, its event loop running.

Longer than ~300 lines on purpose: as in storage/transactions.py, the group, its savepoints, the
writer lock, fencing and the lease renewal at commit act on one open transaction and decide
together what a failure loses.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors

from subagentd.errors import LeaseLostError, StorageBusyError, StorageFailedError
from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding
from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.doorbell import Listener, Renewer

log = logging.getLogger("subagentd")

WRITER_LOCK = 0x5342_4144  # the advisory lock key every group transaction takes ("SBAD")
_LOST = (
    "this subagentd process lost its leases to another process sharing the database (it was"
    " stalled longer than --lease-ttl); its live agents were let go and the request was not applied"
)


class PgGroupCommit:
    """One connection whose writes gather into one transaction until `commit` (group commit)."""

    def __init__(
        self,
        conn: PgConnection,
        url: str,
        lock_wait_ms: int,
        clock: Callable[[], float],
        connect: Callable[[], psycopg.Connection[Any]],
    ) -> None:
        self.conn = conn
        self.url = url
        self._connect = connect  # a new main connection, set up as the first one
        self._savepoints = 0
        self._open = False  # a group was begun and not yet committed or rolled back
        self._busy = False  # the last BEGIN waited past the limit for the writer lock
        self._checked = True  # the open group's fencing check was done (see _check_fence)
        self._lock_wait_ms = self._renew_wait_ms = int(lock_wait_ms)
        self._holding: Holding | None = None
        self._on_lost: Callable[[], None] = lambda: None
        self._renewer: Renewer | None = None
        self._began = 0.0
        self._now = clock
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

    def take_lock(self) -> bool:
        """Take the writer lock for the next group now, without waiting (as on SQLite: the
        server waits with its event loop running and asks again). False only while another
        process holds it; True once held, after a given-up wait, or when the write will fail
        its own way."""
        if self.conn.in_transaction or self._open:
            return True
        try:
            self._lock(wait=False)
        except StorageBusyError:
            return self._busy
        except StorageFailedError:
            return True
        return True

    def give_up_lock(self) -> None:
        """The server waited its patience for the lock: until one group gets it, writes are
        refused busy without waiting."""
        self._busy = True

    def _open_group(self) -> None:
        """BEGIN, then the writer lock (after a busy refusal, tried without waiting until one
        succeeds), then the fencing check of this process's owner row."""
        if self._open:
            raise StorageFailedError("error")
        try:
            self._lock(wait=True)
        except StorageBusyError:
            self._busy = True
            raise
        self._check_fence()

    def _lock(self, wait: bool) -> None:
        """BEGIN and the writer lock, waiting up to `lock_timeout` (`wait`, unless a refusal since
        the last success said not to) or not at all (pg_try_advisory_xact_lock)."""
        conn = self.conn
        try:
            if wait and not self._busy:  # one round trip (several statements in one query)
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
        self._busy = False
        self._open = True
        self._checked = False
        self._began = self._now()

    def _check_fence(self) -> None:
        """Once per group before its first write: this process's owner row, read under the
        writer lock unless its lease is known valid; fenced or gone, LeaseLostError."""
        self._checked = True
        holding = self._holding
        if holding is not None and holding.expires <= self._began:
            row = self.conn.execute(
                "SELECT fenced FROM owners WHERE owner = ?", (holding.owner,)
            ).fetchone()
            if row is None or row[0]:
                self.rollback()
                self._on_lost()
                raise LeaseLostError(_LOST)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One request's writes: all or nothing, inside the shared group transaction; a storage
        error abandons the whole group (StorageFailedError), as on SQLite."""
        conn = self.conn
        if not (conn.in_transaction and self._checked):  # the group's first writer
            taken_ahead = conn.in_transaction  # by take_lock, before the frame ran
            if taken_ahead:
                self._check_fence()
            else:
                self._open_group()
            try:  # no savepoint needed (two round trips saved): nothing else is in the group
                yield
            except psycopg.Error as exc:
                raise self._abandon(exc) from exc
            except BaseException:
                self.rollback()
                if taken_ahead:  # frames after it were let in under the lock: keep it
                    self.take_lock()
                raise
            return
        # Later requests: a savepoint opened at the request's first statement (storage/deferred.py);
        # one that only deferred rows, or wrote nothing, never opens it (two round trips saved).
        self._savepoints += 1
        name = f"r{self._savepoints}"
        held = conn.held
        pending = held.begin_request(name)
        try:
            try:
                yield
            except psycopg.Error:
                raise
            except BaseException:
                if not held.end_request(pending, failed=True) and conn.in_transaction:
                    conn.unheld.execute(f"ROLLBACK TO SAVEPOINT {name}")
                    conn.unheld.execute(f"RELEASE SAVEPOINT {name}")
                raise
            else:
                if not held.end_request(pending, failed=False):
                    conn.execute(f"RELEASE SAVEPOINT {name}")
        except psycopg.Error as exc:
            raise self._abandon(exc) from exc
        finally:
            self._savepoints -= 1

    def _abandon(self, exc: psycopg.Error) -> StorageFailedError:
        self.rollback()
        return StorageFailedError(cause_of(exc))

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

    def rollback(self) -> None:
        self._open = False
        self._rollback_quietly()

    def _rollback_quietly(self) -> None:
        self.conn.held.clear()
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:  # the connection is gone: nothing of the group is left
                pass

    def close(self) -> None:
        """Commit, and release this process's owner row (and any lease still under it)."""
        try:
            self.commit()
        finally:
            holding = self._holding
            if self._renewer is not None:
                self._renewer.stop()
            if holding is not None:
                try:
                    self._lock_wait_ms = max(self._lock_wait_ms, 5000)
                    self._open_group_for_close()
                    for table in ("leases", "signals", "owners"):
                        self.conn.execute(f"DELETE FROM {table} WHERE owner = ?", (holding.owner,))
                    self.conn.execute("COMMIT")
                except (psycopg.Error, StorageBusyError) as exc:
                    self._rollback_quietly()
                    log.warning("could not release the lease owner row at close: %s", exc)
            if self.doorbell is not None:
                self.doorbell.close()
            self.conn.close()

    def _open_group_for_close(self) -> None:
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
        if self._holding is None:
            self._holding = Holding(owner, ttl, now + ttl)
            self._renewer = Renewer(self.url, self._holding, self._renew_wait_ms, self._now)
            weakref.finalize(self, self._renewer.stop)
            self._renewer.start()
        else:
            self._holding.owner, self._holding.ttl = owner, ttl
            self._holding.expires = now + ttl

    def clock(self) -> float:
        """The time leases are judged by: when the open group took the writer lock, else now."""
        return self._began if self.conn.in_transaction else self._now()


def cause_of(exc: psycopg.Error) -> str:
    """`data.reason` of STORAGE_FAILED: full (disk full, 53100), io (58030), or error."""
    if isinstance(exc, errors.DiskFull):
        return "full"
    if isinstance(exc, errors.IoError):
        return "io"
    return "error"
