"""The sessions below a root in walk order (list_agents, agents/list): one range scan of paths."""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from subagentd.schema.messages import Mode
from subagentd.schema.records import ChildListing, TreeRecord
from subagentd.storage.paths import END
from subagentd.storage.table_access import Connected

# One level of the walk below a root: the children of up to _LEVEL_BATCH parents, through the
# (parent_id, created_at, id) index. Levels instead of a recursive CTE: a CTE that must drop rows it
# has seen (cycles in corrupt data) builds a temporary index and measured ~1.6x slower.
_LEVEL_SQL = """
SELECT b.id, b.parent_id, b.created_at, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE b.parent_id IN ({marks})
"""
_LEVEL_BATCH = 900
_RECORDS = list[TreeRecord]

_CHILDREN_SQL = """
SELECT b.id, b.parent_id, 1, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE b.parent_id = :root AND b.id != :root
ORDER BY b.created_at, b.id
"""

# The whole subtree below a root in walk order: one range scan of the path index (storage/paths.py).
_SUBTREE_SQL = """
SELECT b.id, b.parent_id, b.depth - ?, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE b.path > ? AND b.path < ? ORDER BY b.path
"""
_PATHLESS_SQL = "SELECT 1 FROM sessions INDEXED BY sessions_without_path WHERE path IS NULL LIMIT 1"

# The mode recorded at spawn (migration m004), when it is one and the label is there too; the
# descriptor is read only for the other sessions.
_RECORDED = "b.mode IN ({}) AND b.label IS NOT NULL".format(
    ", ".join(f"'{mode}'" for mode in get_args(Mode))
)
# How the session's last turn ended, as an activation would find it when it is live nowhere: a turn
# still open then was left so by a process that died, and is recovered as `error` (SEMANTICS.md
# section 6). Only the rows list_agents shows as ready use it.
ENDED = "CASE WHEN b.open_turn_id IS NOT NULL THEN 'error' ELSE b.last_reason END"
WITH_BODY = {
    "mode": f"CASE WHEN {_RECORDED} THEN b.mode END",
    "body": f"CASE WHEN {_RECORDED} THEN NULL"
    " ELSE (SELECT d.body FROM descriptors d WHERE d.session_id = b.id) END",
    "ended": ENDED,
}
WITHOUT_BODY = {"mode": WITH_BODY["mode"], "body": "NULL", "ended": ENDED}

# list_agents {scope: children} in one statement: the subagent children, each with its parked
# messages, the lease another process holds on it (its owner only while that owner's row is
# valid) and how its last turn ended, so a listing reads the database once (the lease join finds
# nothing for the rows of this process or of none: `owner != ?` and the owners' validity are
# checked per row).
CHILDREN_LISTING_SQL = """
SELECT b.id, b.label, {mode}, {body},
 (SELECT count(*) FROM inbox {parked_index} WHERE inbox.session_id = b.id AND state = 'parked'),
 o.owner, l.status, {ended}
FROM sessions b
LEFT JOIN leases l ON l.session_id = b.id AND l.owner != ?
LEFT JOIN owners o ON o.owner = l.owner AND o.fenced = 0 AND o.expires_at > ?
WHERE b.parent_id = ? AND b.id != b.parent_id AND b.kind = 'subagent'
ORDER BY b.created_at, b.id
"""


class Trees:
    """Listings over the `sessions` tree (read-only)."""

    _children_listing = CHILDREN_LISTING_SQL.format(
        parked_index="INDEXED BY inbox_parked", **WITH_BODY
    )
    _children = _CHILDREN_SQL.format(**WITH_BODY), _CHILDREN_SQL.format(**WITHOUT_BODY)

    def __init__(self, db: Connected) -> None:
        self._db = db

    def children_listing(self, parent_id: str, owner: str, now: float) -> list[ChildListing]:
        """A session's subagent children in sibling order; the descriptor only where no mode is
        recorded, the owner only for a valid lease of another process (CHILDREN_LISTING_SQL)."""
        rows = self._db.conn.execute(self._children_listing, (owner, now, parent_id)).fetchall()
        return [ChildListing._make(row) for row in rows]

    def tree(
        self, root_id: str, descendants: bool, with_descriptors: bool = False
    ) -> list[TreeRecord]:
        """Sessions below a root in pre-order; siblings by created_at, then id (code points)."""
        return msgspec.convert(self.tree_rows(root_id, descendants, with_descriptors), _RECORDS)

    def tree_rows(
        self, root_id: str, descendants: bool, with_descriptors: bool = False
    ) -> list[tuple[Any, ...]]:
        """`tree` as plain rows (id, parent_id, depth, kind, label, mode, descriptor, ended): a
        listing of 10k sessions builds no record per row."""
        if not descendants:
            sql = self._children[0 if with_descriptors else 1]
            rows: list[tuple[Any, ...]] = self._db.conn.execute(sql, {"root": root_id}).fetchall()
            return rows
        parts = WITH_BODY if with_descriptors else WITHOUT_BODY
        ranged = self.subtree(root_id, parts)
        return ranged if ranged is not None else self.walk(root_id, parts)

    def children(self, parent_id: str) -> list[str]:
        """The ids of a session's children in sibling order (first-migration columns only)."""
        return [
            row[0]
            for row in self._db.conn.execute(
                "SELECT id FROM sessions WHERE parent_id = ? ORDER BY created_at, id", (parent_id,)
            )
        ]

    def walk(self, root_id: str, parts: dict[str, str]) -> list[tuple[Any, ...]]:
        """The subtree by following parent links level by level (cycle-safe, no paths needed)."""
        conn = self._db.conn
        children: dict[str, list[tuple[Any, ...]]] = {}
        seen = {root_id}
        frontier = [root_id]
        while frontier:  # breadth first, one query per level (per 900 parents)
            below: list[str] = []
            for start in range(0, len(frontier), _LEVEL_BATCH):
                parents = frontier[start : start + _LEVEL_BATCH]
                sql = _LEVEL_SQL.format(marks=",".join("?" * len(parents)), **parts)
                for row in conn.execute(sql, parents):
                    if row[0] in seen:
                        continue  # a cycle in corrupt data
                    seen.add(row[0])
                    below.append(row[0])
                    children.setdefault(row[1], []).append((row[2], row[0], *row[3:]))
            frontier = below
        for siblings in children.values():
            siblings.sort()
        walked: list[tuple[Any, ...]] = []
        stack = [(root_id, 1, iter(children.get(root_id, ())))]
        while stack:  # iterative pre-order: no recursion limit on deep chains
            parent_id, depth, pending = stack[-1]
            for _, session_id, kind, label, mode, body, ended in pending:
                walked.append((session_id, parent_id, depth, kind, label, mode, body, ended))
                stack.append((session_id, depth + 1, iter(children.get(session_id, ()))))
                break
            else:
                stack.pop()
        return walked

    def subtree(self, root_id: str, parts: dict[str, str]) -> list[tuple[Any, ...]] | None:
        """The subtree in walk order by one range scan over paths; None when some session has
        no path (written by something else than this version): the caller walks levels then."""
        conn = self._db.conn
        top = conn.execute("SELECT path, depth FROM sessions WHERE id = ?", (root_id,)).fetchone()
        if top is None or top[0] is None or conn.execute(_PATHLESS_SQL).fetchone():
            return None
        low, base = top
        rows: list[tuple[Any, ...]]
        rows = conn.execute(_SUBTREE_SQL.format(**parts), (base, low, low + END)).fetchall()
        return rows
