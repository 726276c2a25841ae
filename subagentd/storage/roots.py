"""Each row's tree: the root id a statement names, known in memory from the lineage.

Every table a tree's rows live in carries `root_id`, the id of the top session of the tree the
row belongs to (migration m014/p007), so a distributed PostgreSQL can place a tree's rows on one
node and route each statement by it (docs/architecture.md, "Sharding by root id"). A statement
names its tree (`root_id = ? AND …`) with the root this process knows from the lineage: a
session's parent link, learned as its row is read or written (a root is its own root), and the
messages, turns and tasks of a session, learned as they are written or read. A root is a
parameter, never looked up: a row whose tree is not known here (a session first read by its id
alone, a message named only by its id) is read or written by its key alone, the one statement a
distribution sends to every node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

# ids remembered before the memory is let go and learned again (a root is never wrong, only
# unknown: a statement then names the row by its key alone)
LIMIT = 200_000

ROOT_FIRST = "root_id = ? AND "  # the condition a statement's `{root}` becomes


class Roots:
    """What this process knows of which tree each session, message, turn and task is in."""

    def __init__(self) -> None:
        self._up: dict[str, str] = {}  # session -> its parent (a root: itself), or its root
        self._of: dict[str, str] = {}  # "m:" message, "t:" turn, "k:" task id -> its session

    def learn(self, session_id: str, parent_id: str | None) -> None:
        """A session's parent (None: a root)."""
        if len(self._up) >= LIMIT:
            self._up.clear()
        self._up[session_id] = session_id if parent_id is None else parent_id

    def place(self, session_id: str, root: str) -> None:
        """A session is in the tree rooted at `root` (read from its row)."""
        if len(self._up) >= LIMIT:
            self._up.clear()
        self._up[session_id] = root
        self._up.setdefault(root, root)

    def common(self, session_ids: Iterable[str]) -> str | None:
        """The root of sessions that are all of one tree (a lineage, a parent's children, a
        tree's running agents), from whichever of them is known here (a new child's is not
        yet); None when none is, or when, against that contract, two trees are named."""
        found = {root for root in map(self.root, session_ids) if root is not None}
        return found.pop() if len(found) == 1 else None

    def lineage(self, lineage: Iterable[str]) -> None:
        """A session's lineage, itself first and its root last."""
        below: str | None = None
        for session_id in lineage:
            if below is not None:
                self.learn(below, session_id)
            below = session_id
        if below is not None:
            self.learn(below, None)

    def root(self, session_id: str | None) -> str | None:
        """The root of a session's tree, or None: not known here."""
        if session_id is None:
            return None
        up = self._up
        seen = session_id
        for _ in range(64):  # trees are shallow; a deeper chain is shortened as it is walked
            parent = up.get(seen)
            if parent is None:
                return None
            if parent == seen:
                if seen != session_id:
                    up[session_id] = seen
                return seen
            seen = parent
        return None

    def tie(self, key: str, session_id: str) -> None:
        """A message ("m:<id>"), turn ("t:<id>") or task ("k:<id>") of a session."""
        if len(self._of) >= LIMIT:
            self._of.clear()
        self._of[key] = session_id

    def root_of(self, key: str) -> str | None:
        """The root of the tree a message, turn or task is in, or None: not known here."""
        return self.root(self._of.get(key))


_CONDITION = re.compile(r"\{(\w+\.)?root\}")
_ROOT_OF_SESSION = "(SELECT root_id FROM sessions WHERE id = ?)"

Params = tuple[object, ...]


class Texts(NamedTuple):
    """A statement's text naming its tree, its text without, and where the root goes among its
    parameters (how many come before it)."""

    named: str
    bare: str
    at: int


def _at(sql: str) -> int:
    found = _CONDITION.search(sql)
    if found is None:
        raise ValueError(f"no {{root}} in {sql!r}")
    return sql.count("?", 0, found.start())


def rooted(sql: str) -> Texts:
    """A statement's two texts: naming its tree (each `{root}`, or `{alias.root}`, made
    `root_id = ? AND `) and by its key alone (no root known)."""
    return Texts(_CONDITION.sub(r"\1" + ROOT_FIRST, sql), _CONDITION.sub("", sql), _at(sql))


def pick(texts: Texts, root: str | None, params: Params) -> tuple[str, Params]:
    """The text and parameters of a `rooted` statement for rows whose root is `root`."""
    if root is None:
        return texts.bare, params
    at = texts.at
    return texts.named, (*params[:at], root, *params[at:])


def inserting(sql: str) -> Texts:
    """An insert's two texts: `{root}` (a value) the root given, or, not known here, the root
    of the session given instead (read in the same statement)."""
    return Texts(sql.replace("{root}", "?"), sql.replace("{root}", _ROOT_OF_SESSION), _at(sql))


def pick_insert(
    texts: Texts, root: str | None, session_id: str, params: Params
) -> tuple[str, Params]:
    """The text and parameters of an `inserting` statement for a row of `session_id`."""
    at = texts.at
    if root is None:
        return texts.bare, (*params[:at], session_id, *params[at:])
    return texts.named, (*params[:at], root, *params[at:])


class NoRoots(Roots):
    """Knows no tree: every statement names its rows by key alone (a read-only view of a
    database an older version may have written, without `root_id`)."""

    def root(self, session_id: str | None) -> str | None:
        return None
