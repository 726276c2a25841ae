"""The one connection's write transactions: group commit, request savepoints, lock waits, fencing.

Every table (storage/sessions.py, inbox.py, events.py, leases.py, idempotency.py) writes through
`begin()` (or `defer()`, storage/deferred.py) and reads `conn` here at each call, so a test may swap
the connection for a faulty one. The rules both backends share (the lock taken ahead, fencing,
request savepoints) are storage/group_base.py's; SQLite's lock waits, lost file and commit are here.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from subagentd.errors import DatabaseLostError, StorageBusyError, StorageFailedError
from subagentd.storage.deferred import DeferredWrites
from subagentd.storage.group_base import GroupCommitBase, RenewalThread
from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding, Renewer
from subagentd.storage.opening import OpenedDatabase
from subagentd.storage.signals import Doorbell, ring

log = logging.getLogger("subagentd")

# A group that held the write lock this long gives the other owners' leases that time back:
# they could not renew while it held the lock (storage/leases.py).
LONG_HOLD = 0.01


class GroupCommit(GroupCommitBase):
    """One connection whose writes gather into one transaction until `commit` (group commit)."""

    _error = sqlite3.Error
    _conn: sqlite3.Connection

    def __init__(
        self,
        opened: OpenedDatabase,
        busy_timeout_ms: int,
        clock: Callable[[], float],
        hold_clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(busy_timeout_ms, clock)
        if hold_clock is not None:  # the lock-hold time given back to other owners (_renew)
            self._hold_clock = hold_clock
        self.path = opened.path
        self._conn = opened.conn
        self._deferred = DeferredWrites()  # rows held for one executemany, savepoints opened late
        self._identity = opened.identity
        self._rest_ms = int(busy_timeout_ms)  # the connection's busy_timeout between statements
        self._busy_timeout_ms = int(busy_timeout_ms)  # the renewal thread's wait
        self._rings: set[str] = set()  # doorbells to ring once the open group is committed
        self.doorbell: Doorbell | None = None  # this process's, once it holds an owner row

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, once the deferred rows ran: every statement sees every write."""
        if self._deferred:
            self._materialize()
        return self._conn

    @conn.setter
    def conn(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def defer(self, sql: str, row: tuple[object, ...]) -> None:
        """Write `sql` with parameters `row` (a write nothing reads the answer of) in the open
        group: it runs with the next statement, consecutive rows of one statement in one
        executemany. A request that only holds writes needs no savepoint: its failure drops
        them from the list."""
        if not self._conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()
        self._deferred.add(sql, row)

    def _materialize(self) -> None:
        """Run the deferred rows (storage/deferred.py). A failure abandons the whole group:
        earlier requests' rows were in it, so it is never committed without them (commit
        reports it)."""
        try:
            self._deferred.run(self._conn)
        except sqlite3.Error as exc:
            self._lose_deferred(exc)
            raise

    def _lose_deferred(self, exc: sqlite3.Error) -> None:
        """Deferred rows failed to run: the whole group is rolled back; _open stays set, so the
        next writer and the commit learn it was lost."""
        conn = self._conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        self._cause = _cause(exc)

    def check_file(self) -> bool:
        """Whether the file at our path is still the one we opened (called with the heartbeat).

        Once it was deleted or replaced, every write is refused (DatabaseLostError): acknowledged
        writes must not vanish with an unlinked file.
        """
        if self._identity is None or self.lost is not None:
            return self.lost is None
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._identity:
                return True
            what = "replaced by another file"
        except OSError:
            what = "deleted"
        self.lost = (
            f"database {self.path} was {what} while subagentd was running;"
            " writes are refused until subagentd is restarted"
        )
        log.error("%s", self.lost)
        # every write transaction starts in _open_group: this costs nothing until now
        self._open_group = self._refuse_write  # type: ignore[method-assign]
        return False

    def _refuse_write(self) -> None:
        raise DatabaseLostError(self.lost or "database lost")

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self._conn.in_transaction  # deferred rows are only ever held in an open group

    def limit_lock_wait(self, milliseconds: int) -> None:
        """Serving: the event loop must not stall. The lock is taken without waiting (take_lock,
        the connection's busy_timeout 0, so the common path flips nothing) and only a write not
        taken ahead waits, at most this long; start-up keeps the constructor's longer wait."""
        self._lock_wait_ms = int(milliseconds)
        self._rest_ms = 0
        self.conn.execute("PRAGMA busy_timeout = 0")

    @contextmanager
    def _waiting(self, milliseconds: int) -> Iterator[None]:
        """SQLite's busy handler waits up to `milliseconds` for the statements inside."""
        if milliseconds == self._rest_ms:
            yield
            return
        conn = self._conn  # a pragma needs no held rows run first; the statements inside do
        conn.execute(f"PRAGMA busy_timeout = {milliseconds}")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._rest_ms}")

    def begin(self) -> None:
        """Join the open group transaction, or open one for the first writer since the commit;
        a statement of the caller's follows (the deferred rows and savepoints are run first)."""
        if self._deferred:
            self._materialize()
        if not self._conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()

    def _begin_locked(self, wait: bool) -> None:
        """BEGIN IMMEDIATE: the write lock of a new group, waiting up to busy_timeout for another
        process's (`wait`) or not at all."""
        patience = self._lock_wait_ms if wait else 0
        conn = self._conn  # no group is open: no rows are held (they are only within a group)
        try:
            if patience == self._rest_ms:  # serving, taken ahead: nothing to switch
                conn.execute("BEGIN IMMEDIATE")
            else:
                with self._waiting(patience):
                    conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise StorageBusyError() from None
            raise StorageFailedError(_cause(exc)) from exc

    def _reason(self, exc: Exception) -> str:
        return _cause(exc)

    def commit(self) -> None:
        """Make every write so far durable (one group commit), renewing this process's lease
        first when a third of it is spent or the group held the lock long (see _renew);
        StorageFailedError when that fails or the group was already rolled back by a failed
        statement (then nothing of it was kept)."""
        self._reads.clear()
        if self._conn.in_transaction:
            holding = self._holding
            renew = False
            try:
                if self._deferred:
                    self._materialize()
                if holding is not None:
                    now = self._now()
                    held = self._hold_clock() - self._began_held
                    renew = (
                        holding.expires - now < holding.ttl * (1 - RENEW_EVERY) or held >= LONG_HOLD
                    )
                    if renew:
                        self._renew(holding, now, held)
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._abandon(exc) from exc
            if renew and holding is not None:
                holding.expires = now + holding.ttl
            if self._rings:
                for address in self._rings:
                    ring(address)
                self._rings.clear()
        elif self._open:
            cause, self._open = self._cause, False
            raise StorageFailedError(cause)
        self._open = False

    def _renew(self, holding: Holding, now: float, held: float) -> None:
        """Expiry counted from commit time; every other unfenced owner gets the time this group
        held the lock back (it could not renew meanwhile: lock time never counts against it)."""
        self.conn.execute(RENEW_SQL, (now + holding.ttl, holding.owner))
        if held >= LONG_HOLD:
            self.conn.execute(
                "UPDATE owners SET expires_at = expires_at + ? WHERE owner != ? AND fenced = 0",
                (held, holding.owner),
            )

    def ring_after_commit(self, address: str) -> None:
        """Ring another process's doorbell once the open group is committed (storage/signals.py)."""
        self._rings.add(address)

    def rollback(self) -> None:
        """Drop every write since the last commit (the group was lost), and its rings."""
        self._rings.clear()
        super().rollback()

    def _begin_release(self) -> None:
        with self._waiting(self._lock_wait_ms):
            self.conn.execute("BEGIN IMMEDIATE")

    def hold(self, owner: str, ttl: float, on_lost: Callable[[], None]) -> None:
        """Register `owner` as this process's lease owner (a new row, valid for `ttl` seconds),
        renewed from now on at commit time and by a renewal thread (storage/leases.py).
        `on_lost` runs when a write transaction finds the row fenced, before LeaseLostError."""
        self._on_lost = on_lost
        now = self._now()
        if self.path != ":memory:" and self.doorbell is None:  # others may signal this process
            self.doorbell = Doorbell()
            weakref.finalize(self, self.doorbell.close)  # a store dropped without close()
        wake = None if self.doorbell is None else self.doorbell.address
        with self._waiting(self._lock_wait_ms):  # a write outside any group (autocommit)
            self.conn.execute(
                "INSERT INTO owners (owner, expires_at, fenced, wake) VALUES (?, ?, 0, ?)",
                (owner, now + ttl, wake),
            )
        if self.path != ":memory:":  # in memory (one connection, one process) nobody can fence it
            self._keep_renewed(owner, ttl, now)

    def _renewer_for(self, holding: Holding) -> RenewalThread:
        return Renewer(self.path, holding, self._busy_timeout_ms, self._now)


def _code(exc: Exception) -> int:
    """The primary SQLite result code of an error (extended codes folded), or -1."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else -1


def _cause(exc: Exception) -> str:
    """`data.reason` of STORAGE_FAILED: full (disk or database full), io (an I/O error, e.g. a
    file-size limit: EFBIG), or error (anything else)."""
    code = _code(exc)
    if code == sqlite3.SQLITE_FULL:
        return "full"
    if code == sqlite3.SQLITE_IOERR:
        return "io"
    return "error"
