"""The sessions below a root in walk order (list_agents, agents/list): one range scan of paths."""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from subagentd.schema.messages import Mode
from subagentd.schema.records import TreeRecord
from subagentd.storage.connected import Connected
from subagentd.storage.paths import END

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
WITH_BODY = {
    "mode": f"CASE WHEN {_RECORDED} THEN b.mode END",
    "body": f"CASE WHEN {_RECORDED} THEN NULL"
    " ELSE (SELECT d.body FROM descriptors d WHERE d.session_id = b.id) END",
}
WITHOUT_BODY = {"mode": WITH_BODY["mode"], "body": "NULL"}


class Trees:
    """Listings over the `sessions` tree (read-only)."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def tree(
        self, root_id: str, descendants: bool, with_descriptors: bool = False
    ) -> list[TreeRecord]:
        """Sessions below a root in pre-order; siblings by created_at, then id (code points)."""
        parts = WITH_BODY if with_descriptors else WITHOUT_BODY
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
                for r in self._db.conn.execute(_CHILDREN_SQL.format(**parts), {"root": root_id})
            ]
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

    def walk(self, root_id: str, parts: dict[str, str]) -> list[TreeRecord]:
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

    def subtree(self, root_id: str, parts: dict[str, str]) -> list[TreeRecord] | None:
        """The subtree in walk order by one range scan over paths; None when some session has
        no path (written by something else than this version): the caller walks levels then."""
        conn = self._db.conn
        top = conn.execute("SELECT path, depth FROM sessions WHERE id = ?", (root_id,)).fetchone()
        if top is None or top[0] is None or conn.execute(_PATHLESS_SQL).fetchone():
            return None
        low, base = top
        rows = conn.execute(_SUBTREE_SQL.format(**parts), (base, low, low + END)).fetchall()
        return msgspec.convert(rows, list[TreeRecord])
