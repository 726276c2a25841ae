"""The sessions below a root in walk order (list_agents, agents/list): one range scan of paths."""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from subagentd.schema.messages import Mode
from subagentd.schema.records import ChildListing, TreeRecord
from subagentd.storage.paths import END
from subagentd.storage.roots import pick, rooted
from subagentd.storage.table_access import Connected

# One level of the walk below a root: the children of up to _LEVEL_BATCH parents, through the
# (parent_id, created_at, id) index. Levels instead of a recursive CTE: a CTE that must drop rows it
# has seen (cycles in corrupt data) builds a temporary index and measured ~1.6x slower.
_LEVEL_SQL = """
SELECT b.id, b.parent_id, b.created_at, b.kind, b.label, {mode}, {body}, {ended}
FROM sessions b {by_parent}
WHERE {{b.root}}b.parent_id IN ({marks})
"""
_LEVEL_BATCH = 900
_RECORDS = list[TreeRecord]

_CHILDREN_SQL = """
SELECT b.id, b.parent_id, 1, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE {tree}b.parent_id = :root AND b.id != :root
ORDER BY b.created_at, b.id
"""

# The whole subtree below a root in walk order: one range scan of the path index (storage/paths.py).
_SUBTREE_SQL = """
SELECT b.id, b.parent_id, b.depth - ?, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE {{b.root}}b.path > ? AND b.path < ? ORDER BY b.path
"""
_PATHLESS_SQL = rooted(
    "SELECT 1 FROM sessions INDEXED BY sessions_without_path WHERE {root}path IS NULL LIMIT 1"
)
TOP_SQL = rooted("SELECT path, depth FROM sessions WHERE {root}id = ?")
_CHILD_IDS_SQL = rooted("SELECT id FROM sessions WHERE {root}parent_id = ? ORDER BY created_at, id")

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
    " ELSE (SELECT d.body FROM descriptors d WHERE d.root_id = b.root_id"
    " AND d.session_id = b.id) END",
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
 (SELECT count(*) FROM inbox {parked_index} WHERE inbox.root_id = b.root_id
  AND inbox.session_id = b.id AND state = 'parked'),
 o.owner, l.status, {ended}
FROM sessions b
LEFT JOIN leases l ON l.root_id = b.root_id AND l.session_id = b.id AND l.owner != ?
LEFT JOIN owners o ON o.owner = l.owner AND o.fenced = 0 AND o.expires_at > ?
WHERE {{b.root}}b.parent_id = ? AND b.id != b.parent_id AND b.kind = 'subagent'
ORDER BY b.created_at, b.id
"""


class Trees:
    """Listings over the `sessions` tree (read-only)."""

    # named: with the tree's root among its conditions, SQLite would rather read the whole
    # tree (sessions_by_root) than look a level's parents up one by one
    _by_parent = "INDEXED BY sessions_by_parent"
    _children_listing = rooted(
        CHILDREN_LISTING_SQL.format(parked_index="INDEXED BY inbox_parked", **WITH_BODY)
    )
    # (with descriptors, without), each (naming the tree :tree, by the parent alone)
    _children = tuple(
        (
            _CHILDREN_SQL.format(tree="b.root_id = :tree AND ", **parts),
            _CHILDREN_SQL.format(tree="", **parts),
        )
        for parts in (WITH_BODY, WITHOUT_BODY)
    )

    def __init__(self, db: Connected) -> None:
        self._db = db

    def children_listing(self, parent_id: str, owner: str, now: float) -> list[ChildListing]:
        """A session's subagent children in sibling order; the descriptor only where no mode is
        recorded, the owner only for a valid lease of another process (CHILDREN_LISTING_SQL)."""
        roots = self._db.roots
        sql = pick(self._children_listing, roots.root(parent_id), (owner, now, parent_id))
        rows = self._db.conn.execute(*sql).fetchall()
        for row in rows:
            roots.learn(row[0], parent_id)
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
        roots = self._db.roots
        tree = roots.root(root_id)
        rows: list[tuple[Any, ...]]
        if not descendants:
            named, bare = self._children[0 if with_descriptors else 1]
            if tree is None:
                rows = self._db.conn.execute(bare, {"root": root_id}).fetchall()
            else:
                rows = self._db.conn.execute(named, {"root": root_id, "tree": tree}).fetchall()
        else:
            parts = WITH_BODY if with_descriptors else WITHOUT_BODY
            ranged = self.subtree(root_id, parts)
            rows = ranged if ranged is not None else self.walk(root_id, parts)
        for row in rows:
            roots.learn(row[0], row[1])
        return rows

    def children(self, parent_id: str) -> list[str]:
        """The ids of a session's children in sibling order (first-migration columns only)."""
        sql = pick(_CHILD_IDS_SQL, self._db.roots.root(parent_id), (parent_id,))
        return [row[0] for row in self._db.conn.execute(*sql)]

    def walk(self, root_id: str, parts: dict[str, str]) -> list[tuple[Any, ...]]:
        """The subtree by following parent links level by level (cycle-safe, no paths needed)."""
        conn = self._db.conn
        tree = self._db.roots.root(root_id)
        children: dict[str, list[tuple[Any, ...]]] = {}
        seen = {root_id}
        frontier = [root_id]
        while frontier:  # breadth first, one query per level (per 900 parents)
            below: list[str] = []
            for start in range(0, len(frontier), _LEVEL_BATCH):
                parents = frontier[start : start + _LEVEL_BATCH]
                marks = ",".join("?" * len(parents))
                sql = rooted(_LEVEL_SQL.format(marks=marks, by_parent=self._by_parent, **parts))
                for row in conn.execute(*pick(sql, tree, tuple(parents))):
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
        tree = self._db.roots.root(root_id)
        top = conn.execute(*pick(TOP_SQL, tree, (root_id,))).fetchone()
        if top is None or top[0] is None or conn.execute(*pick(_PATHLESS_SQL, tree, ())).fetchone():
            return None
        low, base = top
        rows: list[tuple[Any, ...]]
        sql = rooted(_SUBTREE_SQL.format(**parts))
        rows = conn.execute(*pick(sql, tree, (base, low, low + END))).fetchall()
        return rows
