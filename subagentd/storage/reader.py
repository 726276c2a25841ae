"""A database opened read-only for `subagentd inspect` and `watch`: the store's own queries and
the few whole-table reads the views need, never a write; a SQLite file or a PostgreSQL URL.

It needs only the tables and columns of the first migration, so a database an older subagentd
wrote can be read as it is (nothing here migrates).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable
from urllib.parse import quote

from subagentd.extras import missing
from subagentd.schema.records import SessionRecord
from subagentd.storage.events import Events
from subagentd.storage.inbox import Inbox
from subagentd.storage.roots import NoRoots, Roots
from subagentd.storage.sessions import Sessions
from subagentd.storage.trees import Trees


class UnreadableDatabaseError(Exception):
    """The file cannot be read as a subagentd database; the message says why, in one line."""


class ReadOnly:
    """A connection opened read-only, as the tables see it: any write is refused."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.roots: Roots = NoRoots()  # an older database has no root_id: rows by their keys alone

    def begin(self) -> None:
        raise sqlite3.OperationalError("the database was opened read-only")

    def defer(self, sql: str, row: tuple[object, ...]) -> None:
        raise sqlite3.OperationalError("the database was opened read-only")

    def ring_after_commit(self, address: str) -> None:
        raise sqlite3.OperationalError("the database was opened read-only")

    def reads(self) -> None:
        """No group: every read goes to the database."""
        return None


class StoreReader:
    """The read queries of the store's tables over a read-only connection: `name` is how the
    views show the database (a URL without its password), `errors` what a failed read raises."""

    errors: tuple[type[Exception], ...]
    data_version: Callable[[], int]  # a new number after another connection committed

    def __init__(self, path: str) -> None:
        from subagentd.storage.postgres import is_postgres

        self.name = path
        if is_postgres(path):
            self._open_postgres(path)
            return
        self.conn = open_read_only(path)
        self.errors = (sqlite3.DatabaseError,)
        self.data_version = self._data_version
        self._bind(Sessions, Inbox, Events)

    def _open_postgres(self, url: str) -> None:
        """The same reads over a read-only psycopg connection (the PostgreSQL tables' dialect)."""
        try:
            import psycopg

            from subagentd.storage.postgres.reading import PgOperatorError, Snapshots, connect
            from subagentd.storage.postgres.store import shown
            from subagentd.storage.postgres.tables import PgEvents, PgInbox, PgSessions
        except ImportError:
            raise UnreadableDatabaseError(
                missing("postgres", "a PostgreSQL URL") or "a PostgreSQL URL needs psycopg"
            ) from None
        self.name = shown(url)
        try:
            pg = connect(url, read_only=True)
        except PgOperatorError as exc:
            raise UnreadableDatabaseError(str(exc)) from None
        self.conn = pg  # type: ignore[assignment]  # PgConnection takes the tables' SQL
        self.errors = (psycopg.Error,)
        self.data_version = Snapshots(pg)
        self._bind(PgSessions, PgInbox, PgEvents)

    def _bind(
        self, sessions_of: type[Sessions], inbox_of: type[Inbox], events_of: type[Events]
    ) -> None:
        view = ReadOnly(self.conn)
        sessions, inbox = sessions_of(view), inbox_of(view)
        self.get_session = sessions.get_session
        self.all_sessions = sessions.all_sessions
        self.get_descriptor = sessions.get_descriptor
        self.all_descriptors = sessions.all_descriptors
        self.inbox_counts = inbox.inbox_counts
        self.all_inbox_counts = inbox.all_inbox_counts
        self.transcript = events_of(view).transcript
        self.children = Trees(view).children

    def close(self) -> None:
        self.conn.close()

    def usage_of(self, ids: Iterable[str] | None) -> dict[str, tuple[int, float]]:
        """Own tokens (input + output) and cost by session (all, or those of `ids`); nothing for a
        database no serving process has migrated to usage yet."""
        sql = "SELECT session_id, own_input + own_output, own_cost FROM spending"
        params: list[str] = []
        if ids is not None:
            params = list(ids)
            if not params:
                return {}
            sql += f" WHERE session_id IN ({','.join('?' * len(params))})"
        try:
            rows = self.conn.execute(sql, params).fetchall()
        except self.errors:  # no such table: an older database
            return {}
        return {sid: (int(tokens), int(cost) / 1_000_000) for sid, tokens, cost in rows}

    def _data_version(self) -> int:
        """Changes whenever another connection commits (SQLite's PRAGMA data_version): one
        check of the WAL header, no table read (PostgreSQL: postgres/reading.py `Snapshots`)."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def all_events(self) -> list[EventRow]:
        """Every event of every session, in commit order (the HTML timeline)."""
        return self.events_after(0)

    def events_after(self, seq: int) -> list[EventRow]:
        """The events committed after `seq` (a range of the primary key)."""
        return self.conn.execute(_EVENT_ROWS + " WHERE seq > ? ORDER BY seq", (seq,)).fetchall()

    def last_events(self) -> list[EventRow]:
        """Each session's latest event (one per session)."""
        return self.conn.execute(
            _EVENT_ROWS + " WHERE seq IN (SELECT max(seq) FROM events GROUP BY session_id)"
        ).fetchall()

    def turn_starts(self, ids: Iterable[str]) -> dict[str, str]:
        """When each session's latest turn started: session id -> its turn_start event's time."""
        found: dict[str, str] = {}
        for session_id in ids:
            row = self.conn.execute(
                "SELECT at FROM events WHERE session_id = ? AND type = 'turn_start'"
                " ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            if row is not None:
                found[session_id] = row[0]
        return found

    def all_messages(self) -> list[MessageRow]:
        """Every inbox row with its sender and time, in position order (the HTML timeline)."""
        return self.messages_after(0)

    def messages_after(self, position: int) -> list[MessageRow]:
        """The inbox rows added after `position`."""
        return self.conn.execute(
            "SELECT position, message_id, session_id, content, source, state, turn_id, created_at"
            " FROM inbox WHERE position > ? ORDER BY position",
            (position,),
        ).fetchall()

    def last_seq(self) -> int:
        """The newest event's seq (0 when there is none)."""
        return int(self.conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])

    def last_position(self) -> int:
        """The newest inbox row's position (0 when there is none)."""
        return int(self.conn.execute("SELECT coalesce(max(position), 0) FROM inbox").fetchone()[0])

    def sessions_of(self, ids: Iterable[str]) -> list[SessionRecord]:
        """The rows of these sessions (those that exist)."""
        return [r for r in (self.get_session(i) for i in ids) if r is not None]


# (session_id, seq, turn_id, type, data, at)
EventRow = tuple[str, int, str | None, str, str | None, str]
# (position, message_id, session_id, content, source, state, turn_id, created_at)
MessageRow = tuple[int, str, str, str, str, str, str | None, str]
_EVENT_ROWS = "SELECT session_id, seq, turn_id, type, data, at FROM events"


def open_read_only(path: str) -> sqlite3.Connection:
    """Open `path` with mode=ro (immutable when its directory cannot hold the -shm of a WAL
    database); UnreadableDatabaseError when it is missing or not a subagentd database."""
    if not os.path.isfile(path):
        raise UnreadableDatabaseError(f"no database file at {path}")
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    try:
        return _probe(sqlite3.connect(uri, uri=True))
    except sqlite3.OperationalError:
        # a WAL database in a directory we cannot write (no -shm can be made): read it as a file
        pass
    except sqlite3.DatabaseError as exc:
        raise UnreadableDatabaseError(f"{path} is not a subagentd database ({exc})") from None
    try:
        return _probe(sqlite3.connect(uri + "&immutable=1", uri=True))
    except sqlite3.DatabaseError as exc:
        raise UnreadableDatabaseError(f"{path} is not a subagentd database ({exc})") from None


def _probe(conn: sqlite3.Connection) -> sqlite3.Connection:
    try:
        conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()
    except BaseException:
        conn.close()
        raise
    return conn
