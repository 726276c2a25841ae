"""Inbox rows: FIFO by position, and their states (queued, parked, claimed, cancelled)."""

from __future__ import annotations

from typing import Any

from subagentd.schema.records import InboxCounts, InboxRecord
from subagentd.storage.roots import inserting, pick, pick_insert, rooted
from subagentd.storage.table_access import Connected

_INSERT_SQL = inserting(
    "INSERT INTO inbox (root_id, message_id, session_id, content, source, state, created_at)"
    " VALUES ({root},?,?,?,?,?,?)"
)
_MESSAGE = "SELECT position, message_id, session_id, content, source, state, turn_id FROM inbox"
_NEXT_QUEUED_SQL = rooted(
    _MESSAGE + " WHERE {root}session_id = ? AND state = 'queued' ORDER BY position LIMIT 1"
)
_MESSAGE_SQL = rooted(_MESSAGE + " WHERE {root}message_id = ?")
_WAITING_SQL = rooted(
    _MESSAGE + " WHERE {root}session_id = ? AND state IN ('queued', 'parked') ORDER BY position"
)
_CLAIM_SQL = rooted("UPDATE inbox SET state = 'claimed', turn_id = ? WHERE {root}message_id = ?")
_CANCEL_SQL = rooted("UPDATE inbox SET state = 'cancelled' WHERE {root}message_id = ?")
_PARK_SQL = rooted("UPDATE sessions SET parked = ? WHERE {root}id = ?")
_PARKING_SQL = rooted(
    "UPDATE inbox SET state = 'parked' WHERE {root}session_id = ? AND state = 'queued'"
)
_UNPARKED_SQL = rooted(
    "UPDATE inbox SET state = 'queued' WHERE {root}session_id = ? AND state = 'parked'"
)
COUNTS_SQL = rooted(
    "SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(state = 'parked'), 0)"
    " FROM inbox WHERE {root}session_id = ? AND state IN ('queued', 'parked')"
)
_PARKED_SQL = (
    "SELECT session_id, count(*) FROM inbox INDEXED BY inbox_parked"
    " WHERE state = 'parked' GROUP BY session_id"
)


class Inbox:
    """The `inbox` table: each message's state, and a session's parking of its queue."""

    _counts = COUNTS_SQL

    def __init__(self, db: Connected) -> None:
        self._db = db

    def insert_message(
        self, message_id: str, session_id: str, content: str, source: str, state: str, at: str
    ) -> None:
        """Deferred (storage/transactions.py): the burst of a group runs as one executemany."""
        db = self._db
        db.roots.tie(f"m:{message_id}", session_id)
        row = (message_id, session_id, content, source, state, at)
        db.defer(*pick_insert(_INSERT_SQL, db.roots.root(session_id), session_id, row))

    def next_queued(self, session_id: str) -> InboxRecord | None:
        db = self._db
        row = db.conn.execute(*pick(_NEXT_QUEUED_SQL, db.roots.root(session_id), (session_id,)))
        return self._tied(row.fetchone())

    def claim_message(self, message_id: str, turn_id: str | None) -> None:
        """Held with the group's next statement (storage/deferred.py): nothing reads its answer."""
        db = self._db
        root = db.roots.root_of(f"m:{message_id}")
        db.defer(*pick(_CLAIM_SQL, root, (turn_id, message_id)))

    def cancel_message(self, message_id: str) -> None:
        db = self._db
        db.begin()
        root = db.roots.root_of(f"m:{message_id}")
        db.conn.execute(*pick(_CANCEL_SQL, root, (message_id,)))

    def set_parked(self, session_id: str, parked: bool) -> None:
        """Park a session's queued messages (or put its parked ones back in the queue)."""
        db = self._db
        db.begin()
        conn = db.conn
        root = db.roots.root(session_id)
        conn.execute(*pick(_PARK_SQL, root, (int(parked), session_id)))
        conn.execute(*pick(_PARKING_SQL if parked else _UNPARKED_SQL, root, (session_id,)))

    def inbox_counts(self, session_id: str) -> InboxCounts:
        """The queued and parked message counts of one inbox."""
        db = self._db
        row = db.conn.execute(*pick(self._counts, db.roots.root(session_id), (session_id,)))
        found = row.fetchone()
        return InboxCounts(int(found[0]), int(found[1]))

    def waiting_messages(self, session_id: str) -> list[InboxRecord]:
        """A session's queued and parked messages, in FIFO order (wait_agents collects some)."""
        db = self._db
        sql = pick(_WAITING_SQL, db.roots.root(session_id), (session_id,))
        rows = db.conn.execute(*sql).fetchall()
        for row in rows:
            db.roots.tie(f"m:{row[1]}", session_id)
        return [inbox_record(row) for row in rows]

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
        db = self._db
        row = db.conn.execute(
            *pick(_MESSAGE_SQL, db.roots.root_of(f"m:{message_id}"), (message_id,))
        )
        return self._tied(row.fetchone())

    def _tied(self, row: tuple[Any, ...] | None) -> InboxRecord | None:
        """The record of an inbox row, its message known to be of its session from now on."""
        if not row:
            return None
        self._db.roots.tie(f"m:{row[1]}", row[2])
        return inbox_record(row)


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
