"""Inbox rows: FIFO by position, and their states (queued, parked, claimed, cancelled)."""

from __future__ import annotations

from typing import Any

from subagentd.schema.records import InboxCounts, InboxRecord
from subagentd.storage.table_access import Connected

_INSERT_SQL = (
    "INSERT INTO inbox (message_id, session_id, content, source, state, created_at)"
    " VALUES (?,?,?,?,?,?)"
)
_MESSAGE = "SELECT position, message_id, session_id, content, source, state, turn_id FROM inbox"
_NEXT_QUEUED_SQL = _MESSAGE + " WHERE session_id = ? AND state = 'queued' ORDER BY position LIMIT 1"
_MESSAGE_SQL = _MESSAGE + " WHERE message_id = ?"
_PARKED_SQL = (
    "SELECT session_id, count(*) FROM inbox INDEXED BY inbox_parked"
    " WHERE state = 'parked' GROUP BY session_id"
)


class Inbox:
    """The `inbox` table: each message's state, and a session's parking of its queue."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def insert_message(
        self, message_id: str, session_id: str, content: str, source: str, state: str, at: str
    ) -> None:
        """Deferred (storage/transactions.py): the burst of a group runs as one executemany."""
        self._db.defer(_INSERT_SQL, (message_id, session_id, content, source, state, at))

    def next_queued(self, session_id: str) -> InboxRecord | None:
        row = self._db.conn.execute(_NEXT_QUEUED_SQL, (session_id,)).fetchone()
        return inbox_record(row) if row else None

    def claim_message(self, message_id: str, turn_id: str | None) -> None:
        """Held with the group's next statement (storage/deferred.py): nothing reads its answer."""
        self._db.defer(
            "UPDATE inbox SET state = 'claimed', turn_id = ? WHERE message_id = ?",
            (turn_id, message_id),
        )

    def cancel_message(self, message_id: str) -> None:
        db = self._db
        db.begin()
        db.conn.execute("UPDATE inbox SET state = 'cancelled' WHERE message_id = ?", (message_id,))

    def set_parked(self, session_id: str, parked: bool) -> None:
        """Park a session's queued messages (or put its parked ones back in the queue)."""
        db = self._db
        db.begin()
        conn = db.conn
        conn.execute("UPDATE sessions SET parked = ? WHERE id = ?", (int(parked), session_id))
        if parked:
            conn.execute(
                "UPDATE inbox SET state = 'parked' WHERE session_id = ? AND state = 'queued'",
                (session_id,),
            )
        else:
            conn.execute(
                "UPDATE inbox SET state = 'queued' WHERE session_id = ? AND state = 'parked'",
                (session_id,),
            )

    def inbox_counts(self, session_id: str) -> InboxCounts:
        """The queued and parked message counts of one inbox."""
        row = self._db.conn.execute(
            "SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(state = 'parked'), 0)"
            " FROM inbox WHERE session_id = ? AND state IN ('queued', 'parked')",
            (session_id,),
        ).fetchone()
        return InboxCounts(int(row[0]), int(row[1]))

    def waiting_messages(self, session_id: str) -> list[InboxRecord]:
        """A session's queued and parked messages, in FIFO order (wait_agents collects some)."""
        return [
            inbox_record(row)
            for row in self._db.conn.execute(
                _MESSAGE + " WHERE session_id = ? AND state IN ('queued', 'parked')"
                " ORDER BY position",
                (session_id,),
            )
        ]

    def parked_counts(self) -> dict[str, int]:
        """Parked messages per session holding any, through the partial index of m010 (named:
        for the GROUP BY, SQLite would rather scan all of inbox_by_session)."""
        return dict(self._db.conn.execute(_PARKED_SQL))

    def all_inbox_counts(self) -> dict[str, tuple[int, int]]:
        """(queued, parked) of every inbox that has any (`subagentd inspect`)."""
        return {
            row[0]: (int(row[1]), int(row[2]))
            for row in self._db.conn.execute(
                "SELECT session_id, sum(state = 'queued'), sum(state = 'parked') FROM inbox"
                " WHERE state IN ('queued', 'parked') GROUP BY session_id"
            )
        }

    def get_message(self, message_id: str) -> InboxRecord | None:
        row = self._db.conn.execute(_MESSAGE_SQL, (message_id,)).fetchone()
        return inbox_record(row) if row else None


def inbox_record(row: tuple[Any, ...]) -> InboxRecord:
    return InboxRecord(
        position=row[0],
        message_id=row[1],
        session_id=row[2],
        content=row[3],
        source=row[4],
        state=row[5],
        turn_id=row[6],
    )
