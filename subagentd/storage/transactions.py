"""The one connection's write transactions: group commit, request savepoints, lock waits, fencing.

Every table (storage/sessions.py, inbox.py, events.py, leases.py, idempotency.py) writes through
`begin()` (or `defer()`, storage/deferred.py) and reads `conn` here at each call, so a test may swap
the connection for a faulty one.

Longer than ~300 lines on purpose: the group, its savepoints, the write lock, the fencing check
and the lease renewal at commit all act on one open transaction's state and decide together what
a failure loses; split apart, each would reach into the others' fields.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from subagentd.errors import DatabaseLostError, LeaseLostError, StorageBusyError, StorageFailedError
from subagentd.storage.deferred import Deferred
from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding, Renewer
from subagentd.storage.opening import OpenedDatabase
from subagentd.storage.signals import Doorbell, ring

log = logging.getLogger("subagentd")

# A group that held the write lock this long gives the other owners' leases that time back:
# they could not renew while it held the lock (storage/leases.py).
LONG_HOLD = 0.01
_LOST = (
    "this subagentd process lost its leases to another process sharing the database (it was"
    " stalled longer than --lease-ttl); its live agents were let go and the request was not applied"
)


class GroupCommit:
    """One connection whose writes gather into one transaction until `commit` (group commit)."""

    def __init__(
        self, opened: OpenedDatabase, busy_timeout_ms: int, clock: Callable[[], float]
    ) -> None:
        self.path = opened.path
        self._conn = opened.conn
        self._deferred = Deferred()  # rows held for one executemany, savepoints opened late
        self._identity = opened.identity
        self.lost: str | None = None  # why writes are refused, once the file is gone
        self._savepoints = 0
        self._open = False  # a group transaction was begun and not yet committed or rolled back
        self._cause = "error"  # why a group SQLite rolled back by itself was lost
        self._busy = False  # the last BEGIN was refused because another process held the lock
        self._checked = True  # the open group's fencing check was done (see _check_fence)
        self._lock_wait_ms = int(busy_timeout_ms)  # a write not taken ahead waits this long
        self._rest_ms = int(busy_timeout_ms)  # the connection's busy_timeout between statements
        self._busy_timeout_ms = int(busy_timeout_ms)  # the renewal thread's wait
        self._holding: Holding | None = None  # this process's owner row (hold)
        self._on_lost: Callable[[], None] = lambda: None
        self._renewer: Renewer | None = None
        self._began = 0.0  # when the open write transaction took the lock
        self._now = clock  # wall-clock seconds, shared by every process on this database
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
        """Write one row of `sql` (an INSERT nothing reads back at once) in the open group: it
        runs with the next statement, the rows since the last one in one executemany. A request
        that writes only such rows needs no savepoint: its failure drops them from the list."""
        if not self._conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()
        try:
            self._deferred.add(self._conn, sql, row)
        except sqlite3.Error as exc:
            self._lose_deferred(exc)
            raise

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
        self.conn.execute(f"PRAGMA busy_timeout = {milliseconds}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {self._rest_ms}")

    def begin(self) -> None:
        """Join the open group transaction, or open one for the first writer since the commit;
        a statement of the caller's follows (the deferred rows and savepoints are run first)."""
        if self._deferred:
            self._materialize()
        if not self._conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()

    def take_lock(self) -> bool:
        """Take the write lock for the next group now, without waiting: the server waits for it
        with its event loop running and asks again (server/lockwait.py). False only while another
        process holds it; True once held, after a given-up wait (the write is then refused busy
        without waiting), or when the write will fail its own way (a lost file or group)."""
        if self._conn.in_transaction or self._open or self.lost is not None:
            return True
        try:
            self._lock(wait=False)
        except StorageBusyError:
            return self._busy
        except StorageFailedError:
            return True
        return True

    def give_up_lock(self) -> None:
        """The server waited its patience (--lock-wait-ms) for the lock: until one write gets it,
        writes are refused busy without waiting."""
        self._busy = True

    def _open_group(self) -> None:
        """BEGIN IMMEDIATE for the first writer since the last commit, then the fencing check.

        Refused with StorageFailedError when the previous group was rolled back behind our back
        (a failed statement) and nobody has taken notice yet; with StorageBusyError when another
        process holds the write lock past the wait: after such a refusal the next attempts do not
        wait at all until one succeeds, so a burst of writes stalls the loop at most once.
        """
        if self._open:
            raise StorageFailedError(self._cause)
        try:
            self._lock(wait=True)
        except StorageBusyError:
            self._busy = True
            raise
        self._check_fence()

    def _lock(self, wait: bool) -> None:
        """BEGIN IMMEDIATE: the write lock of a new group, waiting up to busy_timeout for another
        process's (`wait`, unless a refusal since the last success said not to) or not at all."""
        patience = self._lock_wait_ms if wait and not self._busy else 0
        try:
            if patience == self._rest_ms:  # serving, taken ahead: nothing to switch
                self.conn.execute("BEGIN IMMEDIATE")
            else:
                with self._waiting(patience):
                    self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise StorageBusyError() from None
            raise StorageFailedError(_cause(exc)) from exc
        self._busy = False
        self._open = True
        self._cause = "error"
        self._checked = False
        self._began = self._now()

    def _check_fence(self) -> None:
        """Fencing, once per group before its first write: unless this process's lease is known
        to be valid still, its owner row is read under the lock; fenced or gone, nothing more is
        written (the group is rolled back, the process lets go, LeaseLostError)."""
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
        """One request's writes: all or nothing, inside the shared group-commit transaction.

        A storage error (any sqlite3.Error) inside abandons the whole group, not only this
        request: SQLite may already have rolled all of it back (SQLITE_FULL, SQLITE_IOERR), and
        the caller rebuilds its memory from what is committed. It surfaces as StorageFailedError.
        """
        if not (self._conn.in_transaction and self._checked):  # the group's first writer
            taken_ahead = self._conn.in_transaction  # by take_lock, before the frame ran
            if taken_ahead:
                self._check_fence()
            else:
                self._open_group()
            try:  # no savepoint needed: nothing else is in the group
                yield
            except sqlite3.Error as exc:
                raise self._abandon(exc) from exc
            except BaseException:
                self.rollback()
                if taken_ahead:  # frames after it were let in under the lock: keep it
                    self.take_lock()
                raise
            return
        # Later requests of the group: a savepoint, opened at the request's first statement
        # (_materialize); one that only deferred rows, or wrote nothing, never opens it.
        self._savepoints += 1
        name = f"r{self._savepoints}"
        pending = self._deferred.begin_request(name)
        try:
            try:
                yield
            except sqlite3.Error:
                raise
            except BaseException:
                if not self._deferred.end_request(pending, failed=True):
                    conn = self._conn
                    if conn.in_transaction:
                        conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                        conn.execute(f"RELEASE SAVEPOINT {name}")
                raise
            else:
                if not self._deferred.end_request(pending, failed=False):
                    self.conn.execute(f"RELEASE SAVEPOINT {name}")
        except sqlite3.Error as exc:
            raise self._abandon(exc) from exc
        finally:
            self._savepoints -= 1

    def _abandon(self, exc: sqlite3.Error) -> StorageFailedError:
        """Roll the whole group back after a storage error; the error to raise instead."""
        self.rollback()
        return StorageFailedError(_cause(exc))

    def commit(self) -> None:
        """Make every write so far durable (one group commit), renewing this process's lease
        first when a third of it is spent or the group held the lock long (see _renew);
        StorageFailedError when that fails or the group was already rolled back by a failed
        statement (then nothing of it was kept)."""
        if self._conn.in_transaction:
            holding = self._holding
            renew = False
            try:
                if self._deferred:
                    self._materialize()
                if holding is not None:
                    now = self._now()
                    held = now - self._began
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
        """Drop every write since the last commit (the group was lost)."""
        self._open = False
        self._rings.clear()
        self._deferred.clear()
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:  # SQLite may have rolled back already; nothing is left of it
                pass

    def close(self) -> None:
        """Commit, and release this process's owner row (and any lease still under it)."""
        try:
            self.commit()
        finally:
            holding = self._holding
            if self._renewer is not None:
                self._renewer.stopped.set()
            if holding is not None:
                try:
                    with self._waiting(self._lock_wait_ms):
                        self.conn.execute("BEGIN IMMEDIATE")
                    self.conn.execute("DELETE FROM leases WHERE owner = ?", (holding.owner,))
                    self.conn.execute("DELETE FROM signals WHERE owner = ?", (holding.owner,))
                    self.conn.execute("DELETE FROM owners WHERE owner = ?", (holding.owner,))
                    self.conn.execute("COMMIT")
                except sqlite3.Error as exc:  # e.g. another process holds the lock past the wait
                    log.warning("could not release the lease owner row at close: %s", exc)
            if self.doorbell is not None:
                self.doorbell.close()
            self.conn.close()

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
        if self.path == ":memory:":  # one connection, one process: nobody else can fence it
            return
        if self._holding is None:
            self._holding = Holding(owner, ttl, now + ttl)
            self._renewer = Renewer(self.path, self._holding, self._busy_timeout_ms, self._now)
            weakref.finalize(self, self._renewer.stopped.set)
            self._renewer.start()
        else:  # the same thread renews the new owner from now on
            self._holding.owner, self._holding.ttl = owner, ttl
            self._holding.expires = now + ttl

    def clock(self) -> float:
        """The time leases are judged by: when the open write transaction took the lock (other
        owners could not renew after that), else now."""
        return self._began if self._conn.in_transaction else self._now()


def _code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of an error (extended codes folded), or -1."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else -1


def _cause(exc: sqlite3.Error) -> str:
    """`data.reason` of STORAGE_FAILED: full (disk or database full), io (an I/O error, e.g. a
    file-size limit: EFBIG), or error (anything else)."""
    code = _code(exc)
    if code == sqlite3.SQLITE_FULL:
        return "full"
    if code == sqlite3.SQLITE_IOERR:
        return "io"
    return "error"
