"""Retention: the events and messages of trees settled and untouched for a while are deleted.

A tree is a root session (no parent) and every session below it. It is pruned only when none of
its sessions is live (no lease row, whatever its owner's state), has an open turn, or has a
queued or parked message, and nothing in it (a session created, an event, a message) is newer
than the cutoff. Its session rows and descriptors stay: the tree can still be listed, inspected
and opened again; only its transcripts and its delivered or cancelled messages go.

The same code prunes SQLite and PostgreSQL (the same SQL; a `Target` says how a write takes the
writer lock: on PostgreSQL a batch takes its tree's only, never holding up another tree). The
trees to prune are found in one read, which takes no write lock; then the rows go in batches of
at most `batch_rows`, each its own short write transaction that checks again, under the lock,
that its tree is still settled and has seen no new event or message since the read. Between
batches the lock is free for `pause` seconds, so a serving process writes in between: a prune
never holds the lock longer than one batch, nor long enough to let a lease lapse.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

BATCH_ROWS = 1000  # rows deleted per write transaction (a few milliseconds of work)
_NO_LIMIT = 2**62  # a dry run's batch: the whole tree (PostgreSQL refuses LIMIT -1)
PAUSE = 0.02  # seconds the lock is left free between batches (a server polls every <= 4 ms)

# Roots of trees with nothing live, running or waiting, no activity since the cutoff, and
# something left to delete; with the newest event and message when they were read.
_SETTLED_SQL = """
WITH RECURSIVE tree(id, root) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
    UNION SELECT s.id, t.root FROM sessions s JOIN tree t ON s.parent_id = t.id
)
SELECT m.root FROM tree m JOIN sessions s ON s.id = m.id
GROUP BY m.root
HAVING max(CASE WHEN
    s.open_turn_id IS NOT NULL
    OR s.created_at >= :cutoff
    OR EXISTS (SELECT 1 FROM leases l WHERE l.session_id = m.id)
    OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = m.id
               AND (i.state IN ('queued', 'parked') OR i.created_at >= :cutoff))
    OR EXISTS (SELECT 1 FROM events e WHERE e.session_id = m.id AND e.at >= :cutoff)
THEN 1 ELSE 0 END) = 0 AND max(CASE WHEN
    EXISTS (SELECT 1 FROM events e WHERE e.session_id = m.id)
    OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = m.id)
THEN 1 ELSE 0 END) = 1
ORDER BY m.root
"""
_MARKS_SQL = (
    "SELECT coalesce(max(seq), 0), (SELECT coalesce(max(position), 0) FROM inbox) FROM events"
)
# Under the lock, before each batch: the tree's sessions (its root id's), each with whether it
# woke up since the read (a lease, an open turn, a waiting message, a new child, event or
# message).
_MEMBERS_SQL = """
SELECT s.id, CASE WHEN
    s.open_turn_id IS NOT NULL
    OR s.created_at >= :cutoff
    OR EXISTS (SELECT 1 FROM leases l WHERE l.root_id = s.root_id AND l.session_id = s.id)
    OR EXISTS (SELECT 1 FROM inbox i WHERE i.root_id = s.root_id AND i.session_id = s.id
               AND (i.state IN ('queued', 'parked') OR i.position > :position))
    OR EXISTS (SELECT 1 FROM events e WHERE e.root_id = s.root_id AND e.session_id = s.id
               AND e.seq > :seq)
THEN 1 ELSE 0 END FROM sessions s WHERE s.root_id = :root ORDER BY s.id
"""
_DELETE_EVENTS_SQL = (
    "DELETE FROM events WHERE root_id = ? AND seq IN"
    " (SELECT seq FROM events WHERE root_id = ? AND session_id = ? ORDER BY seq LIMIT ?)"
)
_DELETE_MESSAGES_SQL = (
    "DELETE FROM inbox WHERE root_id = ? AND position IN (SELECT position FROM inbox"
    " WHERE root_id = ? AND session_id = ? AND state NOT IN ('queued', 'parked')"
    " ORDER BY position LIMIT ?)"
)

_DELETES = (("events", _DELETE_EVENTS_SQL), ("inbox", _DELETE_MESSAGES_SQL))


class Target(Protocol):
    """A database prune writes to: its connection (sqlite3, or postgres/connection.py's, which
    takes the same `?` and `:name` SQL) and how its transactions begin and end."""

    conn: Any

    def begin_read(self) -> None: ...
    def begin_write(self, root: str | None = None) -> None: ...  # `root`'s lock (None: all)
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def bytes_in_use(self) -> int: ...
    def returning(self, table: str) -> str: ...  # a RETURNING clause for deleted_bytes, or ""
    def deleted_bytes(self, cursor: Any) -> int: ...  # 0 where bytes_in_use tells


@dataclass(frozen=True)
class PrunedTree:
    """One tree a dry run would prune: its root, its sessions, its events and messages."""

    root: str
    sessions: int
    events: int
    messages: int


@dataclass(frozen=True)
class Pruned:
    """What one prune deleted, in how many write transactions, and the bytes the database holds
    in use before and after (SQLite) or the bytes of the rows deleted (PostgreSQL)."""

    trees: int
    events: int
    messages: int
    bytes_before: int
    bytes_after: int
    batches: int = 0
    row_bytes: int = 0
    each: tuple[PrunedTree, ...] = ()  # filled by a dry run: what each tree holds
    tasks: int = 0  # MCP tasks whose lifetime (ttl) had ended: deleted, or would be

    @property
    def freed_bytes(self) -> int:
        return max(0, self.bytes_before - self.bytes_after)


def cutoff_stamp(older_than: float, clock: float | None = None) -> str:
    """The stored-timestamp text (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) `older_than` seconds ago."""
    t = (time.time() if clock is None else clock) - older_than
    whole = int(t)
    micros = int(round((t - whole) * 1_000_000)) % 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"


def prune(
    target: Target,
    older_than: float,
    clock: float | None = None,
    *,
    batch_rows: int = BATCH_ROWS,
    pause: float = PAUSE,
    after_batch: Callable[[int], None] | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Delete the events and inbox rows of the settled trees untouched for `older_than` seconds,
    at most `batch_rows` per write transaction; `after_batch(n)` runs after the n-th commit, with
    the lock free. `dry_run`: every tree's deletes in one write transaction, measured tree by
    tree, then rolled back (the writer lock is held while it measures; nothing is deleted)."""
    cutoff = cutoff_stamp(older_than, clock)
    conn = target.conn
    target.begin_read()
    try:
        before = target.bytes_in_use()
        roots = [row[0] for row in conn.execute(_SETTLED_SQL, {"cutoff": cutoff}).fetchall()]
        seq, position = conn.execute(_MARKS_SQL).fetchone()
    finally:
        target.commit()
    marks = {"cutoff": cutoff, "seq": seq, "position": position}
    if dry_run:
        expired = _expired_tasks(target, clock, False)
        return replace(_measure(target, roots, marks, before), tasks=expired)
    trees = events = messages = batches = row_bytes = 0
    for root in roots:
        touched = False
        while True:
            if batches:
                time.sleep(pause)
            target.begin_write(root)  # that tree's lock only: the others write on
            try:
                done = _delete_batch(target, root, marks, batch_rows)
            except BaseException:
                target.rollback()
                raise
            target.commit()
            batches += 1
            events, messages = events + done.events, messages + done.messages
            row_bytes += done.row_bytes
            touched = touched or done.events + done.messages > 0
            if after_batch is not None:
                after_batch(batches)
            if not done.full:  # the tree is done (or woke up): the next one
                break
        trees += touched
    tasks, after = _expired_tasks(target, clock, True), _bytes_now(target)
    return Pruned(trees, events, messages, before, after, batches, row_bytes, tasks=tasks)


def _expired_tasks(target: Target, clock: float | None, delete: bool) -> int:
    """Expired MCP tasks: counted with no lock, then, if any, deleted under every tree's."""
    now = time.time() if clock is None else clock
    where = "FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= ?"
    target.begin_read()
    try:
        found = int(target.conn.execute(f"SELECT count(*) {where}", (now,)).fetchone()[0])
    finally:
        target.commit()
    if not delete or not found:
        return found
    target.begin_write()
    try:
        count = max(0, int(target.conn.execute(f"DELETE {where}", (now,)).rowcount))
    except BaseException:
        target.rollback()
        raise
    target.commit()
    return count


@dataclass(frozen=True)
class _Batch:
    sessions: int
    events: int
    messages: int
    row_bytes: int
    full: bool  # it deleted as many rows as it could: there may be more


def _delete_batch(target: Target, root: str, marks: dict[str, Any], limit: int) -> _Batch:
    """Under the writer lock: delete at most `limit` rows of the tree at `root`, none if it woke
    up since the read."""
    conn = target.conn
    members = conn.execute(_MEMBERS_SQL, {"root": root, **marks}).fetchall()
    if any(woke for _, woke in members):
        return _Batch(len(members), 0, 0, 0, False)
    counts = {"events": 0, "inbox": 0}
    row_bytes = 0
    left = limit
    for session_id, _ in members:
        for table, sql in _DELETES:
            cursor = conn.execute(sql + target.returning(table), (root, root, session_id, left))
            count = max(0, cursor.rowcount)
            row_bytes += target.deleted_bytes(cursor)
            counts[table] += count
            left -= count
            if left == 0:
                return _Batch(len(members), counts["events"], counts["inbox"], row_bytes, True)
    return _Batch(len(members), counts["events"], counts["inbox"], row_bytes, False)


def _measure(target: Target, roots: list[str], marks: dict[str, Any], before: int) -> Pruned:
    """A dry run: every tree's deletes in one write transaction, then rolled back."""
    each: list[PrunedTree] = []
    row_bytes = 0
    target.begin_write()
    try:
        for root in roots:
            done = _delete_batch(target, root, marks, _NO_LIMIT)
            row_bytes += done.row_bytes
            if done.events + done.messages:
                each.append(PrunedTree(root, done.sessions, done.events, done.messages))
        after = target.bytes_in_use()
    finally:
        target.rollback()
    events = sum(tree.events for tree in each)
    messages = sum(tree.messages for tree in each)
    return Pruned(len(each), events, messages, before, after, 0, row_bytes, tuple(each))


def _bytes_now(target: Target) -> int:
    target.begin_read()
    try:
        return target.bytes_in_use()
    finally:
        target.commit()


class SqliteTarget:
    """A SQLite connection (autocommit: isolation_level None) as prune's target: the writer lock
    is BEGIN IMMEDIATE, waiting as long as the connection's busy_timeout."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def begin_read(self) -> None:
        self.conn.execute("BEGIN")

    def begin_write(self, root: str | None = None) -> None:
        self.conn.execute("BEGIN IMMEDIATE")  # SQLite's one write lock: every tree's

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def bytes_in_use(self) -> int:
        """The database's pages but the free ones, in bytes."""
        pages, free, size = (
            self.conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        return (int(pages) - int(free)) * int(size)

    def returning(self, table: str) -> str:
        return ""  # the freed pages tell (bytes_in_use)

    def deleted_bytes(self, cursor: Any) -> int:
        return 0
