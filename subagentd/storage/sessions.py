"""Session rows and their descriptors: created once, then only their turn and parking change."""

from __future__ import annotations

from typing import Any

from subagentd.schema.records import OpenTurn, SessionRecord
from subagentd.storage.paths import child_path, segment
from subagentd.storage.table_access import Connected

_SESSION_COLUMNS = (
    "id, parent_id, kind, label, created_at, depth, parked, open_turn_id, last_reason, last_output"
)
_SESSIONS_SQL = f"SELECT {_SESSION_COLUMNS} FROM sessions"
_SESSION_SQL = _SESSIONS_SQL + " WHERE id = ?"
_INSERT_SQL = (
    f"INSERT INTO sessions ({_SESSION_COLUMNS}, path, mode) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


class Sessions:
    """The `sessions` and `descriptors` tables."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._db.conn.execute(_SESSION_SQL, (session_id,)).fetchone()
        return _session(row) if row else None

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
        if descriptor is not None:  # first: its insert trigger clears the mode of an existing row
            conn.execute(
                "INSERT INTO descriptors (session_id, body) VALUES (?, ?)", (record.id, descriptor)
            )
        if record.parent_id is None:
            path = segment(record.created_at, record.id)
        else:
            above = conn.execute(
                "SELECT path FROM sessions WHERE id = ?", (record.parent_id,)
            ).fetchone()
            path = child_path(above[0] if above else None, record.created_at, record.id)
        conn.execute(
            _INSERT_SQL,
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
        row = self._db.conn.execute(
            "SELECT body FROM descriptors WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row[0] if row else None

    def get_descriptors(self, session_ids: list[str]) -> dict[str, str | bytes | None]:
        marks = ",".join("?" * len(session_ids))
        return dict(
            self._db.conn.execute(
                f"SELECT session_id, body FROM descriptors WHERE session_id IN ({marks})",
                session_ids,
            ).fetchall()
        )

    def all_descriptors(self) -> dict[str, str | bytes | None]:
        """Every stored descriptor body by session id (`subagentd inspect`)."""
        return dict(self._db.conn.execute("SELECT session_id, body FROM descriptors").fetchall())

    def set_open_turn(self, session_id: str, turn_id: str | None) -> None:
        """Held with the group's next statement (storage/deferred.py): nothing reads its answer."""
        self._db.defer("UPDATE sessions SET open_turn_id = ? WHERE id = ?", (turn_id, session_id))

    def end_turn(self, session_id: str, reason: str, output: str | None) -> None:
        db = self._db
        db.begin()
        db.conn.execute(
            "UPDATE sessions SET open_turn_id = NULL, last_reason = ?, last_output = ? WHERE id = ?",
            (reason, output, session_id),
        )

    def open_turns(self) -> list[OpenTurn]:
        """Sessions whose turn was open when the process last stopped (crash recovery)."""
        rows = self._db.conn.execute(
            "SELECT id, open_turn_id FROM sessions WHERE open_turn_id IS NOT NULL"
        ).fetchall()
        return [OpenTurn._make(row) for row in rows]

    def open_children(self, parent_id: str) -> list[OpenTurn]:
        """The parent's children whose turn is open (sessions_by_parent)."""
        rows = self._db.conn.execute(
            "SELECT id, open_turn_id FROM sessions WHERE parent_id = ?"
            " AND open_turn_id IS NOT NULL",
            (parent_id,),
        ).fetchall()
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
