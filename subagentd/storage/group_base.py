"""What both backends' group commits share: the write lock taken ahead, fencing, request savepoints.

storage/transactions.py (SQLite) and postgres/group.py (PostgreSQL) keep what differs: how the
write lock is taken, what a driver error means, how a group is committed and a process let go.

Longer than ~300 lines on purpose: the group's shared rules, in the order a group applies them.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from subagentd.errors import LeaseLostError, StorageBusyError, StorageFailedError
from subagentd.storage.deferred import DeferredWrites, Pending
from subagentd.storage.leases import Holding
from subagentd.storage.roots import Roots

log = logging.getLogger("subagentd")

_LOST = (
    "this subagentd process lost its leases to another process sharing the database (it was"
    " stalled longer than --lease-ttl); its live agents were let go and the request was not applied"
)


class Statements(Protocol):
    """A connection's statements (sqlite3's, or postgres/connection.py's)."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...
    def close(self) -> None: ...


class Closing(Protocol):
    """A backend's doorbell (storage/signals.py, postgres/doorbell.py), closed with the store."""

    def close(self) -> None: ...


class Unheld(Protocol):
    """The connection's statements without the held rows run first, and its transaction state."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, /) -> Any: ...


class RenewalThread(Protocol):
    """A backend's lease renewal thread (storage/leases.py, postgres/doorbell.py)."""

    stopped: threading.Event

    def start(self) -> None: ...


class GroupCommitBase:
    """The group commit's rules both backends keep alike. A backend's subclass provides `conn`
    (statements that run the held rows first), `_conn` (statements that do not), `_deferred`,
    `_error` (its driver's error), `doorbell`, and the methods below that raise
    NotImplementedError here."""

    _error: ClassVar[type[Exception]]
    _conn: Unheld
    _deferred: DeferredWrites
    doorbell: Closing | None
    lost: str | None = None  # why writes are refused for good (only a SQLite file can be lost)
    stale = False  # memory could not be read back after a lost group: writes wait for it
    per_tree = False  # writers lock per tree (set_scope matters), not the whole database

    def __init__(self, lock_wait_ms: int, clock: Callable[[], float]) -> None:
        self._savepoints = 0
        self._open = False  # a group transaction was begun and not yet committed or rolled back
        self._cause = "error"  # why a group the database rolled back by itself was lost
        self._busy = False  # the last BEGIN was refused because another process held the lock
        self._checked = True  # the open group's fencing check was done (see _check_fence)
        self._lock_wait_ms = int(lock_wait_ms)  # a write not taken ahead waits this long
        self._holding: Holding | None = None  # this process's owner row (hold)
        self._on_lost: Callable[[], None] = lambda: None
        self._renewer: RenewalThread | None = None
        self._began = 0.0  # when the open write transaction took the lock
        self._began_held = 0.0  # the same moment by the clock lock-hold time is counted in
        self._hold_clock = clock  # a backend may count it in real time (a test's manual clock)
        self._now = clock  # wall-clock seconds, shared by every process on this database
        self._reads: dict[Hashable, Any] = {}  # what the open group read under the lock (reads)
        self.roots = Roots()  # each row's tree, as this process knows it (the statements name it)

    if TYPE_CHECKING:  # an attribute or a property of the backend's

        @property
        def conn(self) -> Statements: ...

    def _reason(self, exc: Exception) -> str:
        """`data.reason` of STORAGE_FAILED for a driver error: full, io or error."""
        raise NotImplementedError

    def _begin_locked(self, wait: bool) -> None:
        """Begin a transaction holding the write lock, waiting for another process's up to the
        lock wait (`wait`) or not at all; StorageBusyError or StorageFailedError when refused."""
        raise NotImplementedError

    def _renewer_for(self, holding: Holding) -> RenewalThread:
        """The thread that renews `holding` on its own connection (not started yet)."""
        raise NotImplementedError

    def _begin_release(self) -> None:
        """Begin the transaction that deletes this process's rows at close, under the write lock
        (waited for)."""
        raise NotImplementedError

    def take_lock(self, tree: str | None = None) -> bool:
        """Take the write lock for the next group now, without waiting: the server waits for it
        with its event loop running and asks again (wire/lockwait.py). False only while another
        process holds it; True once held, after a given-up wait (the write is then refused busy
        without waiting), or when the write will fail its own way (a lost file or group)."""
        if self._conn.in_transaction or self._open or self.lost is not None or self.stale:
            return True
        try:
            self._lock(wait=False)
        except StorageBusyError:
            return self._busy
        except StorageFailedError:
            return True
        return True

    # before a writing frame (its tree: None for any); a backend may let a long-held lock go
    # between frames, and one that locks per tree (PostgreSQL) takes that tree's
    take_lock_for_frame = take_lock

    def aim(self, tree: str | None) -> None:
        """The next lock taken ahead (take_lock, lend_lock) is for work on the tree rooted at
        `tree` (None: any tree): work outside a request (a runner's turn end) names its tree
        here, as a frame does through take_lock_for_frame. The single writer ignores it."""

    def set_scope(self, tree: str | None) -> None:
        """The tree rooted at `tree` is the only one the next request writes (None: any tree, or
        none known): a backend that locks per tree takes that tree's lock for it (atomic). A
        single-writer backend (SQLite) holds everything at once and ignores it."""

    def _enter_scope(self) -> None:
        """At a request's start: make the open group hold what the request's scope needs
        (a backend that locks per tree; nothing here: the one write lock covers everything)."""

    def give_up_lock(self) -> None:
        """The server waited its patience (--lock-wait-ms) for the lock: until one write gets it,
        writes are refused busy without waiting."""
        self._busy = True

    def lend_lock(self, seconds: float) -> Callable[[], None] | None:
        """A wait for the write lock in the database's own queue, at most `seconds`, to run in a
        worker thread (wire/lockwait.py); None where there is no queue to wait in (SQLite's
        busy handler has none: the server tries again after short sleeps) or nothing to wait
        for. A backend with one lends its connection to the wait until `settle_lent`."""
        return None

    def settle_lent(self, keep: bool) -> None:
        """Take the connection back from the lent wait (ending it first if it still waits); the
        lock it took opens the group, as take_lock's would (`keep`), or is let go."""

    def _open_group(self) -> None:
        """Begin under the write lock for the first writer since the last commit, then the
        fencing check.

        Refused with StorageFailedError when the previous group was rolled back behind our back
        (a failed statement) and nobody has taken notice yet; with StorageBusyError when another
        process holds the write lock past the wait: after such a refusal the next attempts do not
        wait at all until one succeeds, so a burst of writes stalls the loop at most once.
        """
        if self._open:
            raise StorageFailedError(self._cause)
        if self.stale:  # memory may not agree with storage until it is read back (refuse_writes)
            raise StorageFailedError("error")
        try:
            self._lock(wait=True)
        except StorageBusyError:
            self._busy = True
            raise
        self._check_fence()

    def refuse_writes(self, refused: bool) -> None:
        """Every write is refused 1012 while memory could not be read back after a lost group."""
        self.stale = refused

    def transient(self, exc: BaseException) -> bool:
        """Whether failing to read the live state back may pass (the database not answering)."""
        return False

    def give_up_after(self, seconds: float) -> None:
        """Shutdown: from now on no call waits for the database past `seconds` from now."""

    def lapse_seen(self, expires_at: float, clock: float) -> bool:
        """Whether another owner expired at `expires_at` lapsed by `clock` through no stall of
        the database (storage/leases.py Holding.lapse_seen); True before this process holds."""
        return self._holding is None or self._holding.lapse_seen(expires_at, clock)

    def reads(self) -> dict[Hashable, Any] | None:
        """Rows the open group read, by table and key, for its later requests to use again
        (None outside a group). While the group holds the write lock nobody else writes, so a
        row read once stays what this process last read or wrote: a table drops the keys it
        writes, and everything is dropped when a request fails (its savepoint undid what it
        wrote) and when the group ends."""
        return self._reads if self._open and self._conn.in_transaction else None

    def _lock(self, wait: bool) -> None:
        """The write lock of a new group, waiting (`wait`, unless a refusal since the last
        success said not to) or not at all."""
        self._reads.clear()
        self._begin_locked(wait and not self._busy)
        self._busy = False
        self._open = True
        self._cause = "error"
        self._checked = False
        self._began = self._now()
        self._began_held = self._hold_clock()

    def _check_fence(self) -> None:
        """Fencing, once per group before its first write: unless this process's lease is known
        to be valid still, its owner row is read under the lock; fenced or gone, nothing more is
        written (the group is rolled back, the process lets go, LeaseLostError)."""
        self._checked = True
        holding = self._holding
        if holding is not None and holding.expires <= self._began:
            try:
                row = self.conn.execute(
                    "SELECT fenced FROM owners WHERE owner = ?", (holding.owner,)
                ).fetchone()
            except self._error as exc:  # the group's first statement: lost as any failed write
                raise self._abandon(exc) from exc
            if row is None or row[0]:
                self.rollback()
                self._on_lost()
                raise LeaseLostError(_LOST)

    def atomic(self) -> RequestWrites:
        """One request's writes: all or nothing, inside the shared group-commit transaction.

        A storage error (the driver's) inside abandons the whole group, not only this request:
        the database may already have rolled all of it back (SQLITE_FULL, SQLITE_IOERR, an
        aborted PostgreSQL transaction), and the caller rebuilds its memory from what is
        committed. It surfaces as StorageFailedError. What a request's start needs is done here,
        its end in `RequestWrites.__exit__`: a plain context manager, not a generator one (three
        Python calls a request instead of eight).
        """
        if self.per_tree:
            self._enter_scope()
        bracket = RequestWrites()
        bracket.group = self
        if not (self._conn.in_transaction and self._checked):  # the group's first writer
            # no savepoint needed: nothing else is in the group
            bracket.taken_ahead = self._conn.in_transaction  # by take_lock, before the frame ran
            if bracket.taken_ahead:
                self._check_fence()
            else:
                self._open_group()
            bracket.name = None
            return bracket
        # Later requests of the group: a savepoint, opened at the request's first statement
        # (storage/deferred.py); one that only deferred rows, or wrote nothing, never opens it.
        self._savepoints += 1
        bracket.name = name = f"r{self._savepoints}"
        bracket.pending = self._deferred.begin_request(name)
        return bracket

    def _abandon(self, exc: Exception) -> StorageFailedError:
        """Roll the whole group back after a storage error; the error to raise instead."""
        self.rollback()
        return StorageFailedError(self._reason(exc))

    def rollback(self) -> None:
        """Drop every write since the last commit (the group was lost)."""
        self._open = False
        self._rollback_quietly()

    def _rollback_quietly(self) -> None:
        """Drop the held rows and roll the open transaction back, if the database has not."""
        self._deferred.clear()
        self._reads.clear()
        conn = self._conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except self._error:  # rolled back already, or the connection is gone: nothing is left
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
                    self._begin_release()
                    for table in ("leases", "signals", "owners"):
                        self.conn.execute(f"DELETE FROM {table} WHERE owner = ?", (holding.owner,))
                    self.conn.execute("COMMIT")
                except self._error as exc:  # e.g. another process holds the lock past the wait
                    self._rollback_quietly()
                    log.warning("could not release the lease owner row at close: %s", exc)
            if self.doorbell is not None:
                self.doorbell.close()
            self.conn.close()

    def commit(self) -> None:
        """Make every write so far durable (one group commit)."""
        raise NotImplementedError

    def _keep_renewed(self, owner: str, ttl: float, now: float) -> None:
        """From now on `owner`'s row (valid until now + ttl) is renewed at commit time and by a
        renewal thread: the one started here, or the running one, which takes the new owner."""
        self._reads.pop(("owner", owner), None)  # its row is new
        if self._holding is None:
            self._holding = Holding(owner, ttl, now + ttl, answered_since=now)
            self._renewer = renewer = self._renewer_for(self._holding)
            weakref.finalize(self, renewer.stopped.set)
            renewer.start()
        else:
            self._holding.owner, self._holding.ttl = owner, ttl
            self._holding.expires = now + ttl

    def clock(self) -> float:
        """The time leases are judged by: when the open write transaction took the lock (other
        owners could not renew after that), else now."""
        return self._began if self._conn.in_transaction else self._now()


class RequestWrites:
    """The end of one request's writes (GroupCommitBase.atomic made it): the group's first
    writer rolls the group back on any failure (a storage error abandons it); a later request
    releases its savepoint, or rolls back to it, or drops the rows it only held."""

    __slots__ = ("group", "name", "pending", "taken_ahead")

    group: GroupCommitBase
    name: str | None  # the savepoint's; None: the group's first writer
    pending: Pending
    taken_ahead: bool

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        group = self.group
        name = self.name
        if name is None:  # the group's first writer
            if kind is None:
                return
            if issubclass(kind, group._error):
                raise group._abandon(exc) from exc  # type: ignore[arg-type]
            group.rollback()
            if self.taken_ahead:  # frames after it were let in under the lock: keep it
                group.take_lock()
            return
        try:
            if kind is None:
                if not group._deferred.end_request(self.pending, failed=False):
                    group.conn.execute(f"RELEASE SAVEPOINT {name}")
                return
            if issubclass(kind, group._error):
                lost = group._abandon(exc)  # type: ignore[arg-type]
            else:
                group._reads.clear()
                if not group._deferred.end_request(self.pending, failed=True):
                    conn = group._conn
                    if conn.in_transaction:
                        conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                        conn.execute(f"RELEASE SAVEPOINT {name}")
                return
        except group._error as failed:
            raise group._abandon(failed) from failed
        finally:
            group._savepoints -= 1
        raise lost from exc
