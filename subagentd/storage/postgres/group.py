"""PostgreSQL write transactions: group commit, request savepoints, one writer at a time, fencing.

The same promises as storage/transactions.py (SQLite). Each group transaction takes a
transaction-scoped advisory lock (`pg_advisory_xact_lock(WRITER_LOCK)`) right after BEGIN, so the
processes sharing a database write one group at a time, exactly as under SQLite's single write
lock: every rule's read-then-write inside a group sees the latest committed state (READ COMMITTED
reads what committed before each statement, and nobody else commits meanwhile). A wait for that
lock past `lock_timeout` is the busy refusal (StorageBusyError, 1011); the server takes the lock
ahead of a write without waiting (`take_lock`) and, when another process holds it, waits for it in
PostgreSQL's lock queue in a worker thread, its event loop running (`lend_lock`, lockqueue.py).

The rules both backends share (the lock taken ahead, fencing, request savepoints) are
storage/group_base.py's; how the writer lock is taken and a group committed are here.

Longer than ~300 lines on purpose: a group's whole life on its one connection (the writer lock
taken at once or waited for in the lock queue, the connection lent to that wait and taken back,
the commit and a lost COMMIT's answer, a lost connection replaced) acts on the same state.
"""

from __future__ import annotations

import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import psycopg
from psycopg import errors

from subagentd.errors import StorageBusyError, StorageFailedError
from subagentd.storage.group_base import GroupCommitBase, RenewalThread
from subagentd.storage.leases import RENEW_EVERY, SLOW_ANSWER, Holding
from subagentd.storage.postgres.connection import PgConnection, Timeouts, Watchdog
from subagentd.storage.postgres.doorbell import RENEW_UNLOCKED, Listener, PgRenewer
from subagentd.storage.postgres.lockqueue import LentWait
from subagentd.storage.postgres.reconnect import IDENTIFIED, Reconnect, outcome_of

log = logging.getLogger("subagentd")

WRITER_LOCK = 0x5342_4144  # every group takes it: shared for one tree, exclusive for any ("SBAD")
TREE_LOCKS = 0x5342_4154  # the first key of each tree's lock (two int4 keys, "SBAT")
HOLD_LIMIT = 0.1  # seconds a group holds its locks before its next writing frame lets them go


def tree_key(root: str) -> int:
    """The second key of the tree rooted at `root`'s advisory lock (a 32-bit hash of its id:
    two trees that share one only wait for each other)."""
    digest = hashlib.blake2b(root.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def locks_sql(tree: int | None, wait: bool) -> str:
    """The select list that takes a group's locks, left to right (one fixed order: WRITER_LOCK,
    then the tree's): the tree's (WRITER_LOCK shared, then the tree's own) or every tree's
    (WRITER_LOCK exclusive); waited for (`wait`) or tried (one boolean: all taken)."""
    if tree is None:
        return (
            f"pg_advisory_xact_lock({WRITER_LOCK})"
            if wait
            else (f"pg_try_advisory_xact_lock({WRITER_LOCK})")
        )
    if wait:
        return (
            f"pg_advisory_xact_lock_shared({WRITER_LOCK}),"
            f" pg_advisory_xact_lock({TREE_LOCKS}, {tree})"
        )
    return (
        f"pg_try_advisory_xact_lock_shared({WRITER_LOCK})"
        f" AND pg_try_advisory_xact_lock({TREE_LOCKS}, {tree})"
    )


class PgGroupCommit(GroupCommitBase):
    """One connection whose writes gather into one transaction until `commit` (group commit)."""

    _error = psycopg.Error
    conn: PgConnection
    per_tree = True

    def __init__(
        self,
        conn: PgConnection,
        url: str,
        lock_wait_ms: int,
        clock: Callable[[], float],
        connect: Callable[[], psycopg.Connection[Any]],
        timeouts: Timeouts | None = None,
    ) -> None:
        super().__init__(lock_wait_ms, clock)
        self.conn = conn
        self._conn = conn.unheld  # the savepoint and rollback statements, past the held rows
        self._deferred = conn.held
        self.url = url
        self._connect = connect  # a new main connection, set up as the first one
        self.timeouts = timeouts or Timeouts()
        self._renew_wait_ms = int(lock_wait_ms)
        self.doorbell: Listener | None = None
        self._xid: str | None = None  # the open group transaction's id (pg_current_xact_id)
        self._backend = 0  # the server process of the main connection (its pid)
        self._started = ""  # when that server started (pg_postmaster_start_time)
        self._reconnect: Reconnect | None = None  # a thread connecting anew, once one was lost
        self._watchdog: Watchdog | None = None  # bounds each statement while serving
        self._until = float("inf")  # time.monotonic() after which nothing waits (shutdown)
        self._lent: LentWait | None = None  # the wait for the writer lock the connection is lent to
        self._granted: str | None = None  # the transaction a lent wait took the lock in
        self._held_since = 0.0  # time.monotonic() when the open group took the writer lock
        self._every = False  # the open group holds WRITER_LOCK exclusive: every tree
        self._trees: set[int] = set()  # else the trees (tree_key) whose locks it holds
        self._ahead: int | None = None  # the tree the next frame writes (take_lock_for_frame)
        self._scope: int | None = None  # the tree the running request writes (set_scope)
        self._taking: int | None = None  # the tree a group being opened locks (None: every)

    def check_file(self) -> bool:
        """Called with every heartbeat. There is no file to lose; a main connection the server
        dropped is replaced here by the one a thread made meanwhile (outside a group: the lost
        group already failed), so writes work again once the server is back. True: writes are
        not refused for good."""
        if self._fresh(0.5) and self.doorbell is not None:
            self.doorbell.revive()
        return True

    def _fresh(self, wait: float) -> bool:
        """Whether the main connection works; a lost one is replaced by a new one once a thread
        made it (waiting up to `wait` seconds for that: the event loop never waits for a whole
        connection attempt)."""
        if not self.conn.lost or self.conn.in_transaction or self._lent is not None:
            return True
        maker = self._reconnect
        if maker is None:
            if time.monotonic() >= self._until:
                return False
            self._reconnect = maker = Reconnect(self._connect)
            maker.start()
        # waited for only while the loss is new (a server that is back answers at once)
        fresh = maker.take(maker.began + wait - time.monotonic())
        if fresh is None:
            return False
        self._reconnect = None
        self._swap(fresh)
        log.warning("reconnected to the database after a lost connection")
        return True

    def _swap(self, fresh: psycopg.Connection[Any]) -> None:
        try:
            self.conn.raw.close()
        except psycopg.Error:
            pass
        self.conn.raw = fresh
        self.conn.held.clear()
        self.conn.ahead.clear()
        self._reads.clear()
        self._open = False

    def rollback(self) -> None:
        """Drop every write since the last commit; a lost connection is replaced if a new one
        can be made at once (the live state is read back next, recovery.rebuild)."""
        super().rollback()
        self._fresh(0.5)

    def transient(self, exc: BaseException) -> bool:
        """A driver error reading the live state back: the server may answer again (retried
        at each heartbeat while writes are refused)."""
        return isinstance(exc, psycopg.Error)

    def give_up_after(self, seconds: float) -> None:
        """Shutdown: no statement waits for the server past `seconds` from now (the watchdog
        shuts its socket), and no connection is attempted after that."""
        self._until = time.monotonic() + seconds
        if self._watchdog is not None:
            self._watchdog.deadline = self._until

    def hold_watch(self) -> None:
        """Serving: each statement is bounded on this side too (connection.py Watchdog)."""
        if self._watchdog is None:
            self._watchdog = Watchdog(self.conn, self.timeouts.statement + 1.0)
            self._watchdog.deadline = self._until
            weakref.finalize(self, self._watchdog.stopped.set)
            self._watchdog.start()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._watchdog is not None:
                self._watchdog.stopped.set()
            if self._reconnect is not None:
                self._reconnect.stop()

    def limit_lock_wait(self, milliseconds: int) -> None:
        """From now on wait at most this long for another process's group (the event loop must
        not stall), and bound every statement (hold_watch); start-up keeps the constructor's
        longer wait."""
        self._lock_wait_ms = int(milliseconds)
        self.hold_watch()

    def take_lock(self, tree: str | None = None) -> bool:
        """GroupCommitBase.take_lock, for the tree the next frame writes (take_lock_for_frame);
        False while a wait in the lock queue has the connection (the task waiting for it takes
        the lock it gets: settle_lent)."""
        if self._lent is not None:
            return False
        self._taking = self._ahead
        return super().take_lock()

    def take_lock_for_frame(self, tree: str | None = None) -> bool:
        """take_lock, before a writing frame read with others (server/connection.py) that writes
        the tree rooted at `tree` (None: any): an open group that holds the tree's lock, or can
        take it at once, goes on; one that cannot is committed first (False: the connection
        commits it and waits for the lock with no lock held, so two groups never wait for each
        other). A group that has held its locks for HOLD_LIMIT lets them go first, so a process
        waiting in the lock queue is served between two long groups of a busy sibling, whose
        pipelined reads would otherwise each hold the lock past the waiter's patience."""
        self._ahead = None if tree is None else tree_key(tree)
        if self._open and self._conn.in_transaction and self._lent is None:
            if time.monotonic() - self._held_since > HOLD_LIMIT:
                return False
            try:
                return self._cover(self._ahead)
            except StorageFailedError:  # the group is lost: its frames are answered so
                return True
        return self.take_lock()

    def aim(self, tree: str | None) -> None:
        self._ahead = None if tree is None else tree_key(tree)

    def set_scope(self, tree: str | None) -> None:
        self._scope = None if tree is None else tree_key(tree)

    def _holds(self, tree: int | None) -> None:
        """The group just opened holds the locks of `tree` (None: every tree's)."""
        self._every = tree is None
        self._trees = set() if tree is None else {tree}

    def _cover(self, tree: int | None) -> bool:
        """Whether the open group holds the locks a write to `tree` needs (None: every tree's),
        taking them now if they are free; never waits (a group that waited while holding a lock
        could wait for a group waiting for it)."""
        if self._every or (tree is not None and tree in self._trees):
            return True
        sql = (
            f"SELECT pg_try_advisory_xact_lock({WRITER_LOCK})"
            if tree is None
            else f"SELECT pg_try_advisory_xact_lock({TREE_LOCKS}, {tree})"
        )
        try:
            got = self.conn.execute(sql).fetchone()[0]
        except psycopg.Error as exc:
            raise self._abandon(exc) from exc
        if not got:
            return False
        if tree is None:  # every tree from now on: the reads kept per tree are kept as one
            self._every = True
            self._reads.clear()
        else:
            self._trees.add(tree)
        return True

    def _enter_scope(self) -> None:
        """At a request's start, in an open group: it takes the request's tree's lock (or every
        tree's) if free; else the group is committed, and the request opens a new one that waits
        for that lock holding none (no two groups wait for each other)."""
        if self._lent is not None or not (self._open and self._conn.in_transaction):
            return
        if not self._cover(self._scope):
            self.commit()

    def reads(self) -> dict[Hashable, Any] | None:
        """GroupCommitBase.reads, kept per tree: a group holding one tree's lock keeps only
        that tree's rows read by requests of that tree (set_scope); other writers may change any
        other tree meanwhile. Holding every tree's lock, one set for all."""
        if not (self._open and self._conn.in_transaction):
            return None
        if self._every:
            kept: dict[Hashable, Any] = self._reads.setdefault(None, {})
            return kept
        if self._scope is not None and self._scope in self._trees:
            kept = self._reads.setdefault(self._scope, {})
            return kept
        return None

    def _keep_renewed(self, owner: str, ttl: float, now: float) -> None:
        self._reads.clear()  # the owner row is new: no tree's reads keep the old one
        super()._keep_renewed(owner, ttl, now)

    def lend_lock(self, seconds: float) -> Callable[[], None] | None:
        """Serving, once take_lock found the writer lock held: a wait for it in PostgreSQL's
        lock queue (lockqueue.py) of at most `seconds`, to run in a worker thread; the connection
        is lent to it until settle_lent. None when a wait is lent already (the other tasks that
        need the lock try it again after short sleeps) or there is nothing to wait for."""
        conn = self.conn
        if self._lent is not None or conn.in_transaction or self._open or conn.lost:
            return None
        if self.lost is not None or self.stale or self._busy:
            return None
        self._lent = wait = LentWait(
            conn, self._ahead, locks_sql(self._ahead, True), int(seconds * 1000)
        )
        conn.reclaim = self._reclaim
        return wait.run

    def _reclaim(self) -> None:
        """A statement needs the connection while a lock wait has it: the wait ends, not taken
        (its waiter queues again)."""
        self.settle_lent(keep=False)

    def settle_lent(self, keep: bool) -> None:
        """Take the connection back from the lent wait (ended first if it still waits: its
        waiter was cancelled, or a statement needs the connection). The lock it took opens the
        group as take_lock's would (`keep`) or is let go; a lost connection is made anew."""
        wait = self._lent
        if wait is None:
            return
        wait.stop()
        self._lent = None
        self.conn.reclaim = None
        if keep and wait.taken:
            self._granted, self._taking = wait.xid, wait.tree
            self._backend, self._started = wait.backend, wait.started
            self._lock(wait=False)  # the group opens as take_lock's does, the lock taken already
            return
        self._rollback_quietly()
        if self.conn.lost:
            self._fresh(0.0)

    def _open_group(self) -> None:
        if self._lent is not None:  # a wait in the lock queue has the connection: not now
            raise StorageBusyError()
        self._taking = self._scope
        super()._open_group()

    def begin(self) -> None:
        """Join the open group transaction, or open one for the first writer since the commit."""
        if not self.conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()

    def defer(self, sql: str, row: tuple[object, ...]) -> None:
        """Write `sql` with parameters `row` in the open group: it runs with the connection's next
        statement, in its round trip, or just before the COMMIT (storage/deferred.py, as on
        SQLite). A failure to run it aborts the transaction: its COMMIT is refused."""
        conn = self.conn
        if not conn.in_transaction:
            self._open_group()
        elif not self._checked:
            self._check_fence()
        conn.held.add(sql, row)

    def _begin_locked(self, wait: bool) -> None:
        """BEGIN and the writer lock, waiting up to `lock_timeout` (`wait`) or not at all
        (pg_try_advisory_xact_lock)."""
        conn = self.conn
        if self._granted is not None:  # taken by the lent wait (settle_lent): nothing to send
            self._xid, self._granted = self._granted, None
            self._holds(self._taking)
            self._held_since = time.monotonic()
            return
        try:
            # one round trip (several statements in one query), which also reads the
            # transaction's id, its server process (pg_backend_pid: behind a pooler libpq's
            # backend_pid is the pooler's own) and that server's start: a COMMIT whose answer is
            # lost is looked up by them (reconnect.py IDENTIFIED)
            tree = self._taking
            if wait:
                cursor = conn.execute(
                    f"BEGIN; SET LOCAL lock_timeout = {int(self._lock_wait_ms)};"
                    f" SELECT {locks_sql(tree, True)}, {IDENTIFIED}"
                )
                cursor.nextset()
                cursor.nextset()
                self._xid, self._backend, self._started = cursor.fetchone()[-3:]
            else:  # the locks' answer is the second result
                cursor = conn.execute(f"BEGIN; SELECT {locks_sql(tree, False)}, {IDENTIFIED}")
                cursor.nextset()
                got, self._xid, self._backend, self._started = cursor.fetchone()
                if not got:
                    raise errors.LockNotAvailable("writer lock held")
            self._holds(tree)
            self._held_since = time.monotonic()
        except errors.LockNotAvailable:
            self._rollback_quietly()
            raise StorageBusyError() from None
        except psycopg.Error as exc:
            self._rollback_quietly()
            if self.conn.lost:  # a new connection is made meanwhile (taken by _fresh)
                self._fresh(0.0)
            raise StorageFailedError(cause_of(exc)) from exc

    def _reason(self, exc: Exception) -> str:
        return cause_of(exc)

    def commit(self) -> None:
        """Make every write so far durable (one COMMIT), renewing this process's lease first when
        a third of it is spent; a group a failed statement aborted is rolled back and refused
        (PostgreSQL would turn its COMMIT into a rollback without an error)."""
        conn = self.conn
        self._reads.clear()
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
                    if renew:  # skipped while the renewal thread is renewing the row itself
                        renewed = conn.execute(RENEW_UNLOCKED, (now + holding.ttl, holding.owner))
                        renew = renewed.rowcount == 1
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                if not conn.lost or self._xid is None:
                    raise self._abandon(exc) from exc
                outcome = self._outcome(self._xid)  # the answer was lost with the connection
                if outcome != "committed":
                    self.rollback()
                    raise StorageFailedError(
                        "unknown" if outcome is None else cause_of(exc)
                    ) from exc
                log.warning("the answer to a COMMIT was lost; the transaction did commit")
                self._deferred.clear()
            if renew and holding is not None:
                holding.expires = now + holding.ttl
        elif self._open:
            self._open = False
            raise StorageFailedError("error")
        self._open = False

    def _outcome(self, xid: str) -> str | None:
        """Whether the transaction `xid`, whose COMMIT's answer was lost with the connection,
        committed (postgres/reconnect.py outcome_of); a new connection it opened becomes the
        main one."""
        status, fresh = outcome_of(self._connect, xid, self._backend, self._started)
        if fresh is not None:
            self._swap(fresh)
        return status

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
            self.doorbell = Listener(self.url, self.timeouts)
            weakref.finalize(self, self.doorbell.close)
        self.doorbell.listen(owner)
        self.conn.execute(  # in the open group, or committed at once (autocommit) as on SQLite
            "INSERT INTO owners (owner, expires_at, fenced, wake) VALUES (?, ?, 0, ?)",
            (owner, now + ttl, self.doorbell.channel),
        )
        self._keep_renewed(owner, ttl, now)

    def stalled(self) -> None:
        """A statement took long to answer, or failed to: judging starts afresh from now."""
        holding = self._holding
        if holding is not None:
            holding.answered_since = self._now()

    def _renewer_for(self, holding: Holding) -> RenewalThread:
        self.conn.slow = holding.ttl * SLOW_ANSWER
        self.conn.stalled = self.stalled
        return PgRenewer(self.url, holding, self._renew_wait_ms, self._now, self.timeouts)


def cause_of(exc: Exception) -> str:
    """`data.reason` of STORAGE_FAILED: full (disk full, 53100), io (58030), or error."""
    if isinstance(exc, errors.DiskFull):
        return "full"
    if isinstance(exc, errors.IoError):
        return "io"
    return "error"
