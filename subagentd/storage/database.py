"""The SQLite store: one connection, WAL, group commit, prepared SQL on the hot paths."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import get_args

import msgspec
from sqlite_utils import Database

from subagentd.errors import DatabaseLostError, LeaseLostError, StorageBusyError, StorageFailedError
from subagentd.schema.messages import Mode
from subagentd.schema.records import (
    EventRecord,
    IdempotencyRecord,
    InboxRecord,
    LiveRecord,
    SessionRecord,
    TreeRecord,
)
from subagentd.storage.leases import RENEW_EVERY, RENEW_SQL, Holding, Renewer
from subagentd.storage.migrations import migrations
from subagentd.storage.opening import (
    OpenedDatabase,
    applied_migrations,
    open_database,
    refuse_unknown,
)
from subagentd.storage.paths import END, child_path, segment
from subagentd.storage.stats import stats_of

log = logging.getLogger("subagentd")

MIGRATION_WAIT_MS = 60_000  # how long start-up waits for another process's migrations

_SESSION_COLUMNS = (
    "id, parent_id, kind, label, created_at, depth, parked, open_turn_id, last_reason, last_output"
)

# One level of the walk below a root: the children of up to _LEVEL_BATCH parents, through the
# (parent_id, created_at, id) index. Levels instead of a recursive CTE: a CTE that must drop rows it
# has seen (cycles in corrupt data) builds a temporary index and measured ~1.6x slower.
_LEVEL_SQL = """
SELECT b.id, b.parent_id, b.created_at, b.kind, b.label, {mode}, {body} FROM sessions b
WHERE b.parent_id IN ({marks})
"""
_LEVEL_BATCH = 900

_CHILDREN_SQL = """
SELECT b.id, b.parent_id, b.created_at, b.kind, b.label, {mode}, {body} FROM sessions b
WHERE b.parent_id = :root AND b.id != :root
ORDER BY b.created_at, b.id
"""

# The whole subtree below a root in walk order: one range scan of the path index (storage/paths.py).
_SUBTREE_SQL = """
SELECT b.id, b.parent_id, b.depth - ?, b.kind, b.label, {mode}, {body} FROM sessions b
WHERE b.path > ? AND b.path < ? ORDER BY b.path
"""
_PATHLESS_SQL = "SELECT 1 FROM sessions INDEXED BY sessions_without_path WHERE path IS NULL LIMIT 1"

# The mode recorded at spawn (migration m004), when it is one and the label is there too; the
# descriptor is read only for the other sessions.
_RECORDED = "b.mode IN ({}) AND b.label IS NOT NULL".format(
    ", ".join(f"'{mode}'" for mode in get_args(Mode))
)
_WITH_BODY = {
    "mode": f"CASE WHEN {_RECORDED} THEN b.mode END",
    "body": f"CASE WHEN {_RECORDED} THEN NULL"
    " ELSE (SELECT d.body FROM descriptors d WHERE d.session_id = b.id) END",
}
_WITHOUT_BODY = {"mode": _WITH_BODY["mode"], "body": "NULL"}

# Open turns of sessions no valid owner holds: no lease, or one whose owner is fenced, gone or
# expired by the transaction's clock (this process's own leases always count as held).
_ORPHANED_SQL = """
SELECT s.id, s.open_turn_id FROM sessions s
WHERE s.open_turn_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM leases l JOIN owners o ON o.owner = l.owner
    WHERE l.session_id = s.id AND o.fenced = 0 AND (o.owner = :me OR o.expires_at > :clock)
)
"""

# A group that held the write lock this long gives the other owners' leases that time back:
# they could not renew while it held the lock (storage/leases.py).
LONG_HOLD = 0.01
_LOST = (
    "this subagentd process lost its leases to another process sharing the database (it was"
    " stalled longer than --lease-ttl); its live agents were let go and the request was not applied"
)


class SqliteStore:
    """Everything subagentd keeps durably; knows nothing about JSON-RPC or the agent rules."""

    def __init__(
        self,
        source: str | OpenedDatabase,
        *,
        durability: str = "normal",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
    ):
        """`source` is a path (opened and checked here) or a database start-up already opened."""
        opened = (
            source
            if isinstance(source, OpenedDatabase)
            else open_database(source, durability=durability, busy_timeout_ms=busy_timeout_ms)
        )
        self.path = opened.path
        self.conn = opened.conn
        self.db = Database(opened.conn, execute_plugins=False)
        self._identity = opened.identity
        self.lost: str | None = None  # why writes are refused, once the file is gone
        if set(migrations.names) - opened.applied:
            self._migrate()
        self._savepoints = 0
        self._open = False  # a group transaction was begun and not yet committed or rolled back
        self._cause = "error"  # why a group SQLite rolled back by itself was lost
        self._busy = False  # the last BEGIN was refused because another process held the lock
        self._lock_wait_ms = int(busy_timeout_ms)
        self._busy_timeout_ms = int(busy_timeout_ms)  # the renewal thread's wait
        self._holding: Holding | None = None  # this process's owner row (hold)
        self._on_lost: Callable[[], None] = lambda: None
        self._renewer: Renewer | None = None
        self._began = 0.0  # when the open write transaction took the lock
        self._now = clock  # wall-clock seconds, shared by every process on this database

    def _migrate(self) -> None:
        """Apply pending migrations under one write lock, as one transaction: processes starting
        together on a new file take turns, and the later ones find nothing left to do."""
        conn = self.conn
        (patience,) = conn.execute("PRAGMA busy_timeout").fetchone()
        conn.execute(f"PRAGMA busy_timeout = {MIGRATION_WAIT_MS}")  # another's run may be long
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                refuse_unknown(self.path, applied_migrations(conn))  # a newer one came first
                migrations.apply(self.db)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(patience)}")

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
        self._open_group = self._refuse_write
        return False

    def _refuse_write(self) -> None:
        raise DatabaseLostError(self.lost or "database lost")

    # --- transactions -------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self.conn.in_transaction

    def limit_lock_wait(self, milliseconds: int) -> None:
        """From now on wait at most this long for another process's write lock (the event loop
        must not stall); start-up keeps the constructor's longer `busy_timeout_ms`."""
        self._lock_wait_ms = int(milliseconds)
        self.conn.execute(f"PRAGMA busy_timeout = {self._lock_wait_ms}")

    def _begin(self) -> None:
        if not self.conn.in_transaction:
            self._open_group()

    def _open_group(self) -> None:
        """BEGIN IMMEDIATE for the first writer since the last commit.

        Refused with StorageFailedError when the previous group was rolled back behind our back
        (a failed statement) and nobody has taken notice yet; with StorageBusyError when another
        process holds the write lock past the wait: after such a refusal the next attempts do not
        wait at all until one succeeds, so a burst of writes stalls the loop at most once.
        """
        if self._open:
            raise StorageFailedError(self._cause)
        try:
            if self._busy:
                self.conn.execute("PRAGMA busy_timeout = 0")
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                finally:
                    self.conn.execute(f"PRAGMA busy_timeout = {self._lock_wait_ms}")
            else:
                self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                self._busy = True
                raise StorageBusyError() from None
            raise StorageFailedError(_cause(exc)) from exc
        self._busy = False
        self._open = True
        self._cause = "error"
        # fencing: unless this process's lease is known to be valid still, its owner row is read
        # under the lock; fenced or gone, nothing more is written
        self._began = began = self._now()
        holding = self._holding
        if holding is not None and holding.expires <= began:
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
        if not self.conn.in_transaction:  # first writer since the last commit: no savepoint needed
            self._open_group()
            try:
                yield
            except sqlite3.Error as exc:
                raise self._abandon(exc) from exc
            except BaseException:
                self.rollback()
                raise
            return
        self._savepoints += 1
        name = f"r{self._savepoints}"
        try:
            self.conn.execute(f"SAVEPOINT {name}")
            try:
                yield
            except sqlite3.Error:
                raise
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                    self.conn.execute(f"RELEASE SAVEPOINT {name}")
                raise
            else:
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
        if self.conn.in_transaction:
            holding = self._holding
            renew = False
            try:
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
            if renew:
                holding.expires = now + holding.ttl
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

    def rollback(self) -> None:
        """Drop every write since the last commit (the group was lost)."""
        self._open = False
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
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
                    self.conn.execute("BEGIN IMMEDIATE")
                    self.conn.execute("DELETE FROM leases WHERE owner = ?", (holding.owner,))
                    self.conn.execute("DELETE FROM owners WHERE owner = ?", (holding.owner,))
                    self.conn.execute("COMMIT")
                except sqlite3.Error as exc:  # e.g. another process holds the lock past the wait
                    log.warning("could not release the lease owner row at close: %s", exc)
            self.conn.close()

    # --- sessions and descriptors -------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self.conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return _session(row) if row else None

    def insert_session(
        self, record: SessionRecord, descriptor: str | None = None, mode: str | None = None
    ) -> None:
        """A new session; `mode` is its descriptor's mode, given by the caller that built and
        checked the descriptor (listings then need not decode it; see migration m004)."""
        self._begin()
        if descriptor is not None:  # first: its insert trigger clears the mode of an existing row
            self.conn.execute(
                "INSERT INTO descriptors (session_id, body) VALUES (?, ?)", (record.id, descriptor)
            )
        if record.parent_id is None:
            path = segment(record.created_at, record.id)
        else:
            above = self.conn.execute(
                "SELECT path FROM sessions WHERE id = ?", (record.parent_id,)
            ).fetchone()
            path = child_path(above[0] if above else None, record.created_at, record.id)
        self.conn.execute(
            f"INSERT INTO sessions ({_SESSION_COLUMNS}, path, mode)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record.id,
                record.parent_id,
                record.kind,
                record.label,
                record.created_at,
                record.depth,
                int(record.parked),
                record.open_turn_id,
                record.last_reason,
                record.last_output,
                path,
                mode if descriptor is not None else None,
            ),
        )

    def get_descriptor(self, session_id: str) -> str | bytes | None:
        row = self.conn.execute(
            "SELECT body FROM descriptors WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row[0] if row else None

    def set_parked(self, session_id: str, parked: bool) -> None:
        self._begin()
        self.conn.execute("UPDATE sessions SET parked = ? WHERE id = ?", (int(parked), session_id))
        if parked:
            self.conn.execute(
                "UPDATE inbox SET state = 'parked' WHERE session_id = ? AND state = 'queued'",
                (session_id,),
            )
        else:
            self.conn.execute(
                "UPDATE inbox SET state = 'queued' WHERE session_id = ? AND state = 'parked'",
                (session_id,),
            )

    def set_open_turn(self, session_id: str, turn_id: str | None) -> None:
        self._begin()
        self.conn.execute(
            "UPDATE sessions SET open_turn_id = ? WHERE id = ?", (turn_id, session_id)
        )

    def end_turn(self, session_id: str, reason: str, output: str | None) -> None:
        self._begin()
        self.conn.execute(
            "UPDATE sessions SET open_turn_id = NULL, last_reason = ?, last_output = ? WHERE id = ?",
            (reason, output, session_id),
        )

    def open_turns(self) -> list[tuple[str, str]]:
        """Sessions whose turn was open when the process last stopped (crash recovery)."""
        return self.conn.execute(
            "SELECT id, open_turn_id FROM sessions WHERE open_turn_id IS NOT NULL"
        ).fetchall()

    def tree(
        self, root_id: str, descendants: bool, with_descriptors: bool = False
    ) -> list[TreeRecord]:
        """Sessions below a root in pre-order; siblings by created_at, then id (code points)."""
        parts = _WITH_BODY if with_descriptors else _WITHOUT_BODY
        if not descendants:
            return [
                TreeRecord(
                    id=r[0],
                    parent_id=r[1],
                    depth=1,
                    kind=r[3],
                    label=r[4],
                    mode=r[5],
                    descriptor=r[6],
                )
                for r in self.conn.execute(_CHILDREN_SQL.format(**parts), {"root": root_id})
            ]
        ranged = self._subtree(root_id, parts)
        return ranged if ranged is not None else self._walk(root_id, parts)

    def _walk(self, root_id: str, parts: dict[str, str]) -> list[TreeRecord]:
        """The subtree by following parent links level by level (cycle-safe, no paths needed)."""
        children: dict[str, list[tuple]] = {}
        seen = {root_id}
        frontier = [root_id]
        while frontier:  # breadth first, one query per level (per 900 parents)
            below: list[str] = []
            for start in range(0, len(frontier), _LEVEL_BATCH):
                parents = frontier[start : start + _LEVEL_BATCH]
                sql = _LEVEL_SQL.format(marks=",".join("?" * len(parents)), **parts)
                for row in self.conn.execute(sql, parents):
                    if row[0] in seen:
                        continue  # a cycle in corrupt data
                    seen.add(row[0])
                    below.append(row[0])
                    children.setdefault(row[1], []).append((row[2], row[0], *row[3:]))
            frontier = below
        for siblings in children.values():
            siblings.sort()
        walked: list[TreeRecord] = []
        stack = [(root_id, 1, iter(children.get(root_id, ())))]
        while stack:  # iterative pre-order: no recursion limit on deep chains
            parent_id, depth, pending = stack[-1]
            for _, session_id, kind, label, mode, body in pending:
                walked.append(
                    TreeRecord(
                        id=session_id,
                        parent_id=parent_id,
                        depth=depth,
                        kind=kind,
                        label=label,
                        mode=mode,
                        descriptor=body,
                    )
                )
                stack.append((session_id, depth + 1, iter(children.get(session_id, ()))))
                break
            else:
                stack.pop()
        return walked

    def _subtree(self, root_id: str, parts: dict[str, str]) -> list[TreeRecord] | None:
        """The subtree in walk order by one range scan over paths; None when some session has
        no path (written by something else than this version): the caller walks levels then."""
        top = self.conn.execute(
            "SELECT path, depth FROM sessions WHERE id = ?", (root_id,)
        ).fetchone()
        if top is None or top[0] is None or self.conn.execute(_PATHLESS_SQL).fetchone():
            return None
        low, base = top
        rows = self.conn.execute(_SUBTREE_SQL.format(**parts), (base, low, low + END)).fetchall()
        return msgspec.convert(rows, list[TreeRecord])

    def get_descriptors(self, session_ids: list[str]) -> dict[str, str | bytes | None]:
        marks = ",".join("?" * len(session_ids))
        return dict(
            self.conn.execute(
                f"SELECT session_id, body FROM descriptors WHERE session_id IN ({marks})",
                session_ids,
            ).fetchall()
        )

    # --- inbox --------------------------------------------------------------------------

    def insert_message(
        self, message_id: str, session_id: str, content: str, source: str, state: str, at: str
    ) -> int:
        self._begin()
        cursor = self.conn.execute(
            "INSERT INTO inbox (message_id, session_id, content, source, state, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (message_id, session_id, content, source, state, at),
        )
        return cursor.lastrowid or 0

    def next_queued(self, session_id: str) -> InboxRecord | None:
        row = self.conn.execute(
            "SELECT position, message_id, session_id, content, source, state, turn_id FROM inbox"
            " WHERE session_id = ? AND state = 'queued' ORDER BY position LIMIT 1",
            (session_id,),
        ).fetchone()
        return _inbox(row) if row else None

    def claim_message(self, message_id: str, turn_id: str | None) -> None:
        self._begin()
        self.conn.execute(
            "UPDATE inbox SET state = 'claimed', turn_id = ? WHERE message_id = ?",
            (turn_id, message_id),
        )

    def inbox_counts(self, session_id: str) -> tuple[int, int]:
        """(queued, parked) message counts of one inbox."""
        row = self.conn.execute(
            "SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(state = 'parked'), 0)"
            " FROM inbox WHERE session_id = ? AND state IN ('queued', 'parked')",
            (session_id,),
        ).fetchone()
        return int(row[0]), int(row[1])

    def get_message(self, message_id: str) -> InboxRecord | None:
        row = self.conn.execute(
            "SELECT position, message_id, session_id, content, source, state, turn_id FROM inbox"
            " WHERE message_id = ?",
            (message_id,),
        ).fetchone()
        return _inbox(row) if row else None

    # --- events -------------------------------------------------------------------------

    def append_events(
        self,
        session_id: str,
        turn_id: str | None,
        events: Sequence[tuple[str, str | None]],
        at: str,
    ) -> int:
        self._begin()
        cursor = self.conn.cursor()
        seq = 0
        for event_type, data in events:
            cursor.execute(
                "INSERT INTO events (session_id, turn_id, type, data, at) VALUES (?,?,?,?,?)",
                (session_id, turn_id, event_type, data, at),
            )
            seq = cursor.lastrowid or seq
        return seq

    def read_events(
        self, session_id: str, after: int, limit: int, max_bytes: int
    ) -> tuple[list[EventRecord], bool]:
        """Up to `limit` events after `after`, stopping before their data passes `max_bytes` (the
        first always fits); and whether a limit stopped the page (more may follow)."""
        events: list[EventRecord] = []
        size = 0
        for r in self.conn.execute(
            "SELECT seq, turn_id, type, data, at FROM events WHERE session_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (session_id, after, limit),
        ):
            size += len(r[3] or "")
            if events and size > max_bytes:
                return events, True
            events.append(EventRecord(seq=r[0], turn_id=r[1], type=r[2], data=r[3], at=r[4]))
        return events, len(events) == limit

    # --- leases (several processes on one database) --------------------------------------

    def hold(self, owner: str, ttl: float, on_lost: Callable[[], None]) -> None:
        """Register `owner` as this process's lease owner (a new row, valid for `ttl` seconds),
        renewed from now on at commit time and by a renewal thread (storage/leases.py).
        `on_lost` runs when a write transaction finds the row fenced, before LeaseLostError."""
        self._on_lost = on_lost
        now = self._now()
        self.conn.execute(
            "INSERT INTO owners (owner, expires_at, fenced) VALUES (?, ?, 0)", (owner, now + ttl)
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
        return self._began if self.conn.in_transaction else self._now()

    def owners(self) -> list[tuple[str, float, int]]:
        """(owner, expires_at, fenced) of every process registered on this database."""
        return self.conn.execute("SELECT owner, expires_at, fenced FROM owners").fetchall()

    def owner_state(self, owner: str) -> tuple[float, int] | None:
        """(expires_at, fenced) of one owner, None when it has no row (gone, or older)."""
        return self.conn.execute(
            "SELECT expires_at, fenced FROM owners WHERE owner = ?", (owner,)
        ).fetchone()

    def fence(self, owner: str, expired_by: float | None) -> bool:
        """Take an owner's leases away: its row is marked fenced and its leases deleted, in the
        caller's write transaction. With `expired_by`, only if its row (re-read here, under the
        lock) expired by then; returns whether the owner is fenced now."""
        self._begin()
        self.conn.execute(
            "UPDATE owners SET fenced = 1 WHERE owner = ? AND fenced = 0"
            " AND (? IS NULL OR expires_at <= ?)",
            (owner, expired_by, expired_by),
        )
        state = self.owner_state(owner)
        if state is not None and not state[1]:
            return False
        self.conn.execute("DELETE FROM leases WHERE owner = ?", (owner,))
        return True

    def prune_owners(self, before: float) -> None:
        """Forget fenced owners whose rows expired before `before`."""
        if self.conn.execute(
            "SELECT 1 FROM owners WHERE fenced = 1 AND expires_at < ? LIMIT 1", (before,)
        ).fetchone():
            self._begin()
            self.conn.execute("DELETE FROM owners WHERE fenced = 1 AND expires_at < ?", (before,))

    def orphaned_turns(self, owner: str, clock: float) -> list[tuple[str, str]]:
        """(session_id, turn_id) of open turns that no valid owner holds (crash recovery)."""
        return self.conn.execute(_ORPHANED_SQL, {"me": owner, "clock": clock}).fetchall()

    def get_lease(self, session_id: str) -> tuple[str, str, float] | None:
        """(owner, status, expires_at) of the session's lease row, if any (its owner's row
        says whether it is valid)."""
        return self.conn.execute(
            "SELECT owner, status, expires_at FROM leases WHERE session_id = ?", (session_id,)
        ).fetchone()

    def put_lease(
        self,
        session_id: str,
        owner: str,
        status: str,
        expires_at: float,
        *,
        activation_id: str | None = None,
        ancestry: str | None = None,
        kind: str | None = None,
        resume: bool = False,
    ) -> None:
        """Take the session's lease, with what its new activation is (see live_agents)."""
        self._begin()
        self.conn.execute(
            "INSERT INTO leases (session_id, owner, status, expires_at, activation_id, ancestry,"
            " kind, interrupted, disposing, resume) VALUES (?,?,?,?,?,?,?,0,0,?)"
            " ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner,"
            " status = excluded.status, expires_at = excluded.expires_at,"
            " activation_id = excluded.activation_id, ancestry = excluded.ancestry,"
            " kind = excluded.kind, interrupted = 0, disposing = 0, resume = excluded.resume",
            (session_id, owner, status, expires_at, activation_id, ancestry, kind, int(resume)),
        )

    def set_lease_status(
        self,
        session_id: str,
        owner: str,
        status: str,
        *,
        interrupted: bool = False,
        disposing: bool = False,
        resume: bool = False,
    ) -> None:
        """The live agent's status and flags (its open turn interrupted, disposing, resume)."""
        self._begin()
        self.conn.execute(
            "UPDATE leases SET status = ?, interrupted = ?, disposing = ?, resume = ?"
            " WHERE session_id = ? AND owner = ?",
            (status, int(interrupted), int(disposing), int(resume), session_id, owner),
        )

    def live_agents(self, owner: str) -> list[LiveRecord]:
        """Every agent `owner` holds live, as storage has it (registry rebuild)."""
        return msgspec.convert(
            self.conn.execute(
                "SELECT l.session_id, s.parent_id, l.kind, s.depth, l.activation_id, l.ancestry,"
                " s.open_turn_id, l.interrupted, s.parked, l.disposing, l.resume, s.last_reason,"
                " s.last_output, (SELECT count(*) FROM inbox i WHERE i.session_id = l.session_id"
                " AND i.state IN ('queued', 'parked'))"
                " FROM leases l JOIN sessions s ON s.id = l.session_id"
                " WHERE l.owner = ? AND l.activation_id IS NOT NULL",
                (owner,),
            ).fetchall(),
            list[LiveRecord],
            strict=False,
        )

    def drop_lease(self, session_id: str, owner: str) -> None:
        self._begin()
        self.conn.execute(
            "DELETE FROM leases WHERE session_id = ? AND owner = ?", (session_id, owner)
        )

    def foreign_leases(self, owner: str, now: float) -> list[tuple[str, str, str]]:
        """(session_id, owner, status) of leases held by other owners, unfenced and unexpired."""
        return self.conn.execute(
            # from the few owner rows to their leases (leases_by_owner): this process's own
            # leases, usually nearly all of them, are never read
            "SELECT l.session_id, l.owner, l.status FROM owners o CROSS JOIN leases l"
            " ON l.owner = o.owner WHERE o.owner != ? AND o.fenced = 0 AND o.expires_at > ?",
            (owner, now),
        ).fetchall()

    # --- idempotency keys ---------------------------------------------------------------

    def prune_idempotent(self, before: str) -> None:
        """Forget keys recorded before `before` (the documented retention)."""
        if self.conn.execute(
            "SELECT 1 FROM idempotency WHERE created_at < ? LIMIT 1", (before,)
        ).fetchone():
            self._begin()
            self.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (before,))

    def cancel_message(self, message_id: str) -> None:
        self._begin()
        self.conn.execute(
            "UPDATE inbox SET state = 'cancelled' WHERE message_id = ?", (message_id,)
        )

    def get_idempotent(self, caller: str, key: str) -> IdempotencyRecord | None:
        row = self.conn.execute(
            "SELECT method, fingerprint, result FROM idempotency WHERE caller = ? AND key = ?",
            (caller, key),
        ).fetchone()
        return IdempotencyRecord(method=row[0], fingerprint=row[1], result=row[2]) if row else None

    def put_idempotent(self, caller: str, key: str, record: IdempotencyRecord, at: str) -> None:
        self._begin()
        self.conn.execute(
            "INSERT INTO idempotency (caller, key, method, fingerprint, result, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (caller, key, record.method, record.fingerprint, record.result, at),
        )

    # --- size (--max-db-bytes) ----------------------------------------------------------

    def size_bytes(self) -> int:
        """Bytes the database holds in use (its pages but the free ones; WAL not counted)."""
        pages, free, size = (
            self.conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        return (pages - free) * size

    stats = stats_of  # server/stats: the figures read from this connection (storage/stats.py)


def _session(row: tuple) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        parent_id=row[1],
        kind=row[2],
        label=row[3],
        created_at=row[4],
        depth=row[5],
        parked=bool(row[6]),
        open_turn_id=row[7],
        last_reason=row[8],
        last_output=row[9],
    )


def _inbox(row: tuple) -> InboxRecord:
    return InboxRecord(
        position=row[0],
        message_id=row[1],
        session_id=row[2],
        content=row[3],
        source=row[4],
        state=row[5],
        turn_id=row[6],
    )


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
