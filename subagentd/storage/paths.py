"""Materialized tree paths: one sortable key per session, so a subtree is one index range scan.

A session's path is its parent's path followed by its own segment, `created_at 0x01 id 0x00`
(UTF-8). Bytewise order of paths is then exactly the listing's walk order: pre-order, siblings by
`created_at`, then id in code-point order (a shorter id first, because 0x00 sorts lowest). Every
descendant of a session sorts after its path and before its path + 0xFF (0xFF never occurs in
UTF-8). A session gets no path (NULL) when its parent has none or when its id or timestamp holds
0x00 or 0x01; listings then fall back to walking the parent links level by level.
"""

from __future__ import annotations

from collections.abc import Iterable

END = b"\xff"  # greater than any byte of a path: [path, path + END) holds exactly the subtree


def segment(created_at: str, session_id: str) -> bytes | None:
    """This session's own part of its path, or None when its text cannot be encoded safely."""
    if "\x00" in session_id or "\x01" in session_id or "\x00" in created_at:
        return None
    if "\x01" in created_at:
        return None
    return created_at.encode() + b"\x01" + session_id.encode() + b"\x00"


def child_path(parent_path: bytes | None, created_at: str, session_id: str) -> bytes | None:
    own = segment(created_at, session_id)
    if own is None or parent_path is None:
        return None
    return parent_path + own


def backfill(rows: Iterable[tuple[str, str | None, str]]) -> dict[str, bytes]:
    """Paths for (id, parent_id, created_at) rows: top-level sessions first, then level by level.

    Rows whose parent is missing or that sit on a parent cycle get no path (they are reachable
    from no top-level session), and neither does anything below them.
    """
    children: dict[str | None, list[tuple[str, str]]] = {}
    for session_id, parent_id, created_at in rows:
        children.setdefault(parent_id, []).append((session_id, created_at))
    paths: dict[str, bytes] = {}
    frontier: list[tuple[str, bytes | None]] = [
        (session_id, segment(created_at, session_id))
        for session_id, created_at in children.get(None, ())
    ]
    while frontier:
        below: list[tuple[str, bytes | None]] = []
        for session_id, path in frontier:
            if path is None or session_id in paths:
                continue
            paths[session_id] = path
            for child_id, created_at in children.get(session_id, ()):
                below.append((child_id, child_path(path, created_at, child_id)))
        frontier = below
    return paths
