"""The operator commands' connection to a PostgreSQL database (`inspect`, `watch`, `stats`,
`prune`): connected on its own, never migrating, and a change signal for `watch`.

The change signal is the server's transaction snapshot (`pg_current_snapshot()`): its text moves
whenever a transaction that wrote anything ends (its id leaves the in-progress list or xmax
passes it), and read-only transactions never change it. One query, no table read, and nothing
added to the writers' commits (no trigger, no NOTIFY): a look that finds it unchanged costs one
round trip, and one that finds it moved reads only the rows added since the last look, as on
SQLite with `PRAGMA data_version`. A move for some other database of the same server, or for a
lease renewal, costs a look that finds no new rows.
"""

from __future__ import annotations

from typing import Any

import psycopg

from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.store import shown


class PgOperatorError(Exception):
    """The database cannot be reached or is not a subagentd database; one line says why."""


def connect(url: str, *, read_only: bool) -> PgConnection:
    """A connection of an operator command: autocommit, no JIT (every query is short), and for
    the read-only commands every transaction READ ONLY (the server refuses any write)."""
    try:
        raw: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise PgOperatorError(f"database {shown(url)} cannot be opened: {reason}") from None
    try:
        raw.execute("SET jit = off")
        if read_only:
            raw.execute("SET default_transaction_read_only = on")
        if raw.execute("SELECT to_regclass('sessions')").fetchone() == (None,):
            raise PgOperatorError(f"{shown(url)} is not a subagentd database (no sessions table)")
    except BaseException:
        raw.close()
        raise
    return PgConnection(raw)


class Snapshots:
    """`watch`'s change signal on PostgreSQL: a new number whenever the snapshot moved."""

    def __init__(self, conn: PgConnection) -> None:
        self.conn = conn
        self.seen: str | None = None
        self.version = 0

    def __call__(self) -> int:
        (text,) = self.conn.execute("SELECT pg_current_snapshot()::text").fetchone()
        if text != self.seen:
            self.seen = text
            self.version += 1
        return self.version


class PgTarget:
    """A PostgreSQL connection as prune's target (storage/prune.py): a write transaction takes
    the lock of the tree it deletes from, as a serving group writing it does (postgres/group.py),
    or every tree's, waiting up to
    `lock_wait_ms`; the bytes are those of the rows deleted (PostgreSQL reuses their space after
    VACUUM, which autovacuum runs by itself)."""

    def __init__(self, conn: PgConnection, lock_wait_ms: int) -> None:
        self.conn = conn
        self.lock_wait_ms = int(lock_wait_ms)

    def begin_read(self) -> None:
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def begin_write(self, root: str | None = None) -> None:
        """BEGIN and the locks of the tree at `root` (None: every tree's), as a serving group
        writing it takes them (postgres/group.py)."""
        from subagentd.storage.postgres.group import locks_sql, tree_key

        self.conn.execute("BEGIN")
        self.conn.execute(f"SET LOCAL lock_timeout = {self.lock_wait_ms}")
        key = None if root is None else tree_key(root)
        self.conn.execute(f"SELECT {locks_sql(key, True)}")

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def bytes_in_use(self) -> int:
        (size,) = self.conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(size)

    def returning(self, table: str) -> str:
        return f" RETURNING pg_column_size({table}.*)"

    def deleted_bytes(self, cursor: Any) -> int:
        return sum(int(size) for (size,) in cursor.fetchall())
