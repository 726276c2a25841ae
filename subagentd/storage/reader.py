"""A database opened read-only for `subagentd inspect`: the store's own queries, never a write.

It needs only the tables and columns of the first migration, so a database an older subagentd
wrote can be read as it is (nothing here migrates).
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from subagentd.storage.events import Events
from subagentd.storage.inbox import Inbox
from subagentd.storage.sessions import Sessions
from subagentd.storage.trees import Trees


class UnreadableDatabaseError(Exception):
    """The file cannot be read as a subagentd database; the message says why, in one line."""


class ReadOnly:
    """A connection opened read-only, as the tables see it: any write is refused."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def begin(self) -> None:
        raise sqlite3.OperationalError("the database was opened read-only")

    def ring_after_commit(self, address: str) -> None:
        raise sqlite3.OperationalError("the database was opened read-only")


class StoreReader:
    """The read queries of the store's tables over a read-only connection."""

    def __init__(self, path: str) -> None:
        self.conn = open_read_only(path)
        view = ReadOnly(self.conn)
        sessions, inbox = Sessions(view), Inbox(view)
        self.get_session = sessions.get_session
        self.all_sessions = sessions.all_sessions
        self.get_descriptor = sessions.get_descriptor
        self.all_descriptors = sessions.all_descriptors
        self.inbox_counts = inbox.inbox_counts
        self.all_inbox_counts = inbox.all_inbox_counts
        self.transcript = Events(view).transcript
        self.children = Trees(view).children

    def close(self) -> None:
        self.conn.close()


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
