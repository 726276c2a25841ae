"""Each session's transcript: events appended in `seq` order, read back a page at a time."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from subagentd.schema.records import EventRecord, EventsPage
from subagentd.storage.roots import inserting, pick, pick_insert, rooted
from subagentd.storage.table_access import Connected

EVENTS_SQL = rooted(
    "SELECT seq, turn_id, type, data, at FROM events WHERE {root}session_id = ? AND seq > ?"
    " ORDER BY seq LIMIT ?"
)
_INSERT_SQL = inserting(
    "INSERT INTO events (root_id, session_id, turn_id, type, data, at) VALUES ({root},?,?,?,?,?)"
)
_QUESTION_SQL = rooted(
    "SELECT type FROM events WHERE {root}session_id = ? AND turn_id = ?"
    " AND type IN ('question', 'question_end') ORDER BY seq DESC LIMIT 1"
)
_INTERRUPT_SQL = rooted(
    "SELECT data FROM events WHERE {root}session_id = ? AND turn_id = ? AND type = 'interrupt'"
    " ORDER BY seq DESC LIMIT 1"
)


class Events:
    """The `events` table."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def add_event(
        self, session_id: str, turn_id: str | None, event_type: str, data: str, at: str
    ) -> None:
        """One event, held with the group's next statement (storage/deferred.py): nothing reads
        its answer, and every later statement runs it first, so it keeps its place in `seq`."""
        db = self._db
        row = (session_id, turn_id, event_type, data, at)
        db.defer(*pick_insert(_INSERT_SQL, db.roots.root(session_id), session_id, row))

    def append_events(
        self,
        session_id: str,
        turn_id: str | None,
        events: Sequence[tuple[str, str | None]],
        at: str,
    ) -> int:
        db = self._db
        db.begin()
        cursor = db.conn.cursor()
        seq = 0
        root = db.roots.root(session_id)
        for event_type, data in events:
            row = (session_id, turn_id, event_type, data, at)
            cursor.execute(*pick_insert(_INSERT_SQL, root, session_id, row))
            seq = cursor.lastrowid or seq
        return seq

    def read_events(self, session_id: str, after: int, limit: int, max_bytes: int) -> EventsPage:
        """Up to `limit` events after `after`, stopping before their data passes `max_bytes` (the
        first always fits); and whether a limit stopped the page (more may follow)."""
        events: list[EventRecord] = []
        size = 0
        root = self._db.roots.root(session_id)
        for r in self._db.conn.execute(*pick(EVENTS_SQL, root, (session_id, after, limit))):
            size += len(r[3] or "")
            if events and size > max_bytes:
                return EventsPage(events, True)
            events.append(EventRecord(seq=r[0], turn_id=r[1], type=r[2], data=r[3], at=r[4]))
        return EventsPage(events, len(events) == limit)

    def transcript(self, session_id: str) -> list[EventRecord]:
        """Every event of a session in order (`subagentd inspect`)."""
        return [
            EventRecord(seq=r[0], turn_id=r[1], type=r[2], data=r[3], at=r[4])
            for r in self._db.conn.execute(
                *pick(EVENTS_SQL, self._db.roots.root(session_id), (session_id, 0, -1))
            )
        ]

    def question_open(self, session_id: str, turn_id: str) -> bool:
        """Whether the turn's last `question` event has no `question_end` after it (a question
        open when its process died: the parent is told it was cancelled)."""
        root = self._db.roots.root(session_id)
        row = self._db.conn.execute(*pick(_QUESTION_SQL, root, (session_id, turn_id))).fetchone()
        return row is not None and row[0] == "question"

    def interrupt_cause(self, session_id: str, turn_id: str) -> str | None:
        """The cause recorded by the last `interrupt` event of a turn (a rebuilt registry reads
        whether a deadline stopped it); None when there is none."""
        root = self._db.roots.root(session_id)
        row = self._db.conn.execute(*pick(_INTERRUPT_SQL, root, (session_id, turn_id))).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            cause = msgspec.json.decode(row[0]).get("cause")
        except (msgspec.DecodeError, AttributeError):
            return None
        return cause if isinstance(cause, str) else None
