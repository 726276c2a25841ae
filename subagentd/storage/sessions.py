"""Session rows and their descriptors: created once, then only their turn and parking change."""

from __future__ import annotations

from typing import Any

from subagentd.schema.records import OpenTurn, SessionRecord
from subagentd.storage.paths import child_path, segment
from subagentd.storage.roots import pick, rooted
from subagentd.storage.table_access import Connected

_SESSION_COLUMNS = (
    "id, parent_id, kind, label, created_at, depth, parked, open_turn_id, last_reason, last_output"
)
_SESSIONS_SQL = f"SELECT {_SESSION_COLUMNS} FROM sessions"
_SESSION_SQL = rooted(_SESSIONS_SQL + " WHERE {root}id = ?")
_INSERT_SQL = (
    f"INSERT INTO sessions (root_id, {_SESSION_COLUMNS}, path, mode)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_PARENT_SQL = rooted("SELECT path, root_id FROM sessions WHERE {root}id = ?")
_DESCRIPTOR_SQL = rooted("SELECT body FROM descriptors WHERE {root}session_id = ?")
_OPEN_TURN_SQL = rooted("UPDATE sessions SET open_turn_id = ? WHERE {root}id = ?")
_END_TURN_SQL = rooted(
    "UPDATE sessions SET open_turn_id = NULL, last_reason = ?, last_output = ? WHERE {root}id = ?"
)
_OPEN_CHILDREN_SQL = rooted(
    "SELECT id, open_turn_id FROM sessions WHERE {root}parent_id = ? AND open_turn_id IS NOT NULL"
)


class Sessions:
    """The `sessions` and `descriptors` tables."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def get_session(self, session_id: str) -> SessionRecord | None:
        roots = self._db.roots
        row = self._db.conn.execute(*pick(_SESSION_SQL, roots.root(session_id), (session_id,)))
        found = row.fetchone()
        if not found:
            return None
        record = _session(found)
        roots.learn(record.id, record.parent_id)
        return record

    def all_sessions(self) -> list[SessionRecord]:
        """Every session, in no particular order (`subagentd inspect` draws the whole forest)."""
        return [_session(row) for row in self._db.conn.execute(_SESSIONS_SQL)]

    def insert_session(
        self, record: SessionRecord, descriptor: str | None = None, mode: str | None = None
    ) -> None:
        """A new session; `mode` is its descriptor's mode, given by the caller that built and
        checked the descriptor (listings then need not decode it; see migration m004)."""
        db = self._db
        db.begin()
        conn = db.conn
        roots = db.roots
        root = record.id
        if record.parent_id is None:
            path = segment(record.created_at, record.id)
        else:
            known = roots.root(record.parent_id)
            above = conn.execute(*pick(_PARENT_SQL, known, (record.parent_id,))).fetchone()
            path = child_path(above[0] if above else None, record.created_at, record.id)
            root = known or (above[1] if above else None) or record.id
        roots.place(record.id, root)
        if descriptor is not None:  # first: its insert trigger clears the mode of an existing row
            conn.execute(
                "INSERT INTO descriptors (root_id, session_id, body) VALUES (?, ?, ?)",
                (root, record.id, descriptor),
            )
        conn.execute(
            _INSERT_SQL,
            (
                root,
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
        root = self._db.roots.root(session_id)
        row = self._db.conn.execute(*pick(_DESCRIPTOR_SQL, root, (session_id,))).fetchone()
        return row[0] if row else None

    def get_descriptors(self, session_ids: list[str]) -> dict[str, str | bytes | None]:
        marks = ",".join("?" * len(session_ids))
        sql = rooted(
            f"SELECT session_id, body FROM descriptors WHERE {{root}}session_id IN ({marks})"
        )
        root = self._db.roots.common(session_ids)
        return dict(self._db.conn.execute(*pick(sql, root, tuple(session_ids))).fetchall())

    def all_descriptors(self) -> dict[str, str | bytes | None]:
        """Every stored descriptor body by session id (`subagentd inspect`)."""
        return dict(self._db.conn.execute("SELECT session_id, body FROM descriptors").fetchall())

    def set_open_turn(self, session_id: str, turn_id: str | None) -> None:
        """Held with the group's next statement (storage/deferred.py): nothing reads its answer."""
        db = self._db
        root = db.roots.root(session_id)
        if turn_id is not None:
            db.roots.tie(f"t:{turn_id}", session_id)
        db.defer(*pick(_OPEN_TURN_SQL, root, (turn_id, session_id)))

    def end_turn(self, session_id: str, reason: str, output: str | None) -> None:
        db = self._db
        db.begin()
        root = db.roots.root(session_id)
        db.conn.execute(*pick(_END_TURN_SQL, root, (reason, output, session_id)))

    def open_turns(self) -> list[OpenTurn]:
        """Sessions whose turn was open when the process last stopped (crash recovery)."""
        rows = self._db.conn.execute(
            "SELECT id, open_turn_id FROM sessions WHERE open_turn_id IS NOT NULL"
        ).fetchall()
        return [OpenTurn._make(row) for row in rows]

    def open_children(self, parent_id: str) -> list[OpenTurn]:
        """The parent's children whose turn is open (sessions_by_parent)."""
        roots = self._db.roots
        sql = pick(_OPEN_CHILDREN_SQL, roots.root(parent_id), (parent_id,))
        rows = self._db.conn.execute(*sql).fetchall()
        for child_id, _ in rows:
            roots.learn(child_id, parent_id)
        return [OpenTurn._make(row) for row in rows]


def _session(row: tuple[Any, ...]) -> SessionRecord:
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
