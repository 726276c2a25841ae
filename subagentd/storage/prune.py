"""Retention: the events and messages of trees settled and untouched for a while are deleted.

A tree is a root session (no parent) and every session below it. It is pruned only when none of
its sessions is live (no lease row, whatever its owner's state), has an open turn, or has a
queued or parked message, and nothing in it (a session created, an event, a message) is newer
than the cutoff. Its session rows and descriptors stay: the tree can still be listed, inspected
and opened again; only its transcripts and its delivered or cancelled messages go.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

_MEMBERS_SQL = """
CREATE TEMP TABLE prune_members AS
WITH RECURSIVE tree(id, root) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
    UNION SELECT s.id, t.root FROM sessions s JOIN tree t ON s.parent_id = t.id
)
SELECT id, root FROM tree
"""
# Roots of trees with nothing live, running or waiting, no activity since the cutoff, and
# something left to delete.
_SETTLED_SQL = """
SELECT m.root FROM prune_members m JOIN sessions s ON s.id = m.id
GROUP BY m.root
HAVING max(
    s.open_turn_id IS NOT NULL
    OR s.created_at >= :cutoff
    OR EXISTS (SELECT 1 FROM leases l WHERE l.session_id = m.id)
    OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = m.id
               AND (i.state IN ('queued', 'parked') OR i.created_at >= :cutoff))
    OR EXISTS (SELECT 1 FROM events e WHERE e.session_id = m.id AND e.at >= :cutoff)
) = 0 AND max(
    EXISTS (SELECT 1 FROM events e WHERE e.session_id = m.id)
    OR EXISTS (SELECT 1 FROM inbox i WHERE i.session_id = m.id)
) = 1
"""
# Each tree that goes: its root, its sessions, and the events and messages it holds.
_TREES_SQL = """
SELECT r.root, count(*),
    (SELECT count(*) FROM events e JOIN prune_members x ON x.id = e.session_id
     WHERE x.root = r.root),
    (SELECT count(*) FROM inbox i JOIN prune_members x ON x.id = i.session_id
     WHERE x.root = r.root)
FROM prune_roots r JOIN prune_members m ON m.root = r.root
GROUP BY r.root ORDER BY r.root
"""
_DELETE_SQL = (
    "DELETE FROM {table} WHERE session_id IN"
    " (SELECT m.id FROM prune_members m JOIN prune_roots r ON r.root = m.root)"
)


@dataclass(frozen=True)
class PrunedTree:
    """One tree a prune deletes from: its root, its sessions, its events and messages."""

    root: str
    sessions: int
    events: int
    messages: int


@dataclass(frozen=True)
class Pruned:
    """What one prune deleted, and the bytes the database holds in use before and after."""

    trees: int
    events: int
    messages: int
    bytes_before: int
    bytes_after: int
    each: tuple[PrunedTree, ...] = ()  # filled for a dry run: what each tree holds

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
    conn: sqlite3.Connection,
    older_than: float,
    clock: float | None = None,
    *,
    dry_run: bool = False,
) -> Pruned:
    """Delete the events and inbox rows of the settled trees untouched for `older_than` seconds,
    in one write transaction (BEGIN IMMEDIATE: it waits for a serving process's group commit).
    `dry_run`: the same deletes, measured tree by tree, then rolled back."""
    cutoff = cutoff_stamp(older_than, clock)
    conn.execute("BEGIN IMMEDIATE")
    try:
        before = _bytes_in_use(conn)
        conn.execute("DROP TABLE IF EXISTS temp.prune_members")
        conn.execute("DROP TABLE IF EXISTS temp.prune_roots")
        conn.execute(_MEMBERS_SQL)
        conn.execute("CREATE INDEX temp.prune_members_by_root ON prune_members (root)")
        conn.execute(f"CREATE TEMP TABLE prune_roots AS {_SETTLED_SQL}", {"cutoff": cutoff})
        trees = conn.execute("SELECT count(*) FROM prune_roots").fetchone()[0]
        each = tuple(PrunedTree(*row) for row in conn.execute(_TREES_SQL)) if dry_run else ()
        events = conn.execute(_DELETE_SQL.format(table="events")).rowcount
        messages = conn.execute(_DELETE_SQL.format(table="inbox")).rowcount
        conn.execute("DROP TABLE temp.prune_members")
        conn.execute("DROP TABLE temp.prune_roots")
        after = _bytes_in_use(conn)
        conn.execute("ROLLBACK" if dry_run else "COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return Pruned(int(trees), int(events), int(messages), before, after, each)


def _bytes_in_use(conn: sqlite3.Connection) -> int:
    """The database's pages but the free ones, in bytes."""
    pages, free, size = (
        conn.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("page_count", "freelist_count", "page_size")
    )
    return (int(pages) - int(free)) * int(size)
