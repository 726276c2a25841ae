"""The SQLite store core/ sees (core/store.py's Store): one connection, its tables composed."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from subagentd.storage.events import Events
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.inbox import Inbox
from subagentd.storage.leases import LeaseTables
from subagentd.storage.migrations import migrations, sqlite_utils_database
from subagentd.storage.opening import (
    OpenedDatabase,
    applied_migrations,
    open_database,
    refuse_unknown,
)
from subagentd.storage.sessions import Sessions
from subagentd.storage.signals import Signals
from subagentd.storage.spending import Spending
from subagentd.storage.stats import stats_of
from subagentd.storage.store_binding import BoundParts
from subagentd.storage.tasks import Tasks
from subagentd.storage.traces import TraceContexts
from subagentd.storage.transactions import GroupCommit
from subagentd.storage.trees import Trees

MIGRATION_WAIT_MS = 60_000  # how long start-up waits for another process's migrations


class SqliteStore(BoundParts):
    """Everything subagentd keeps durably; knows nothing about JSON-RPC or the agent rules.

    Its methods are its parts' own, bound once here (no call in between on the hot paths):
    the group commit (storage/transactions.py) and one object per table.
    """

    group: GroupCommit

    def __init__(
        self,
        source: str | OpenedDatabase,
        *,
        durability: str = "normal",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
        hold_clock: Callable[[], float] | None = None,
    ):
        """`source` is a path (opened and checked here) or a database start-up already opened."""
        opened = (
            source
            if isinstance(source, OpenedDatabase)
            else open_database(source, durability=durability, busy_timeout_ms=busy_timeout_ms)
        )
        self.path = opened.path
        if set(migrations.names) - opened.applied:  # sqlite-utils is imported only then
            _migrate(opened.conn, opened.path)
        self.group = group = GroupCommit(opened, busy_timeout_ms, clock, hold_clock)
        self._now = clock  # wall-clock seconds (storage/stats.py reads by it)
        self.bind_parts(
            group,
            Sessions(group),
            Trees(group),
            Inbox(group),
            Events(group),
            LeaseTables(group),
            Signals(group),
            IdempotencyKeys(group),
        )
        traces = TraceContexts(group)
        self.put_trace, self.get_traces = traces.put_trace, traces.get_traces
        self.bind_spending(Spending(group))
        self.bind_tasks(Tasks(group))

    @property
    def conn(self) -> sqlite3.Connection:
        """The one connection (a test may replace it: every part reads it at each call)."""
        return self.group.conn

    @conn.setter
    def conn(self, conn: sqlite3.Connection) -> None:
        self.group.conn = conn

    def changes(self) -> int:
        """Moves with every row this process writes, committed or rolled back (SQLite's
        total_changes of the connection): core keeps what it read only while it stays put."""
        return self.group.conn.total_changes

    def outside_commits(self) -> tuple[object, int]:
        """Moves whenever another connection commits to the database (SQLite's `PRAGMA
        data_version` on this connection, with the connection itself): with `changes()` still
        put, what core read before is what it would read now."""
        conn = self.group.conn
        return conn, conn.execute("PRAGMA data_version").fetchone()[0]

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self.group.dirty

    def size_bytes(self) -> int:
        """Bytes the database holds in use (its pages but the free ones; WAL not counted)."""
        pages, free, size = (
            self.group.conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        return int((pages - free) * size)

    stats = stats_of  # server/stats: the figures read from this connection (storage/stats.py)


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Apply pending migrations under one write lock, as one transaction: processes starting
    together on a new file take turns, and the later ones find nothing left to do.

    sqlite-utils is imported here only: serving an up-to-date database never needs it (its
    import, with click, costs ~60 ms of start-up and ~3 MiB; docs/architecture.md)."""
    db = sqlite_utils_database(conn)
    (patience,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute(f"PRAGMA busy_timeout = {MIGRATION_WAIT_MS}")  # another's run may be long
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            refuse_unknown(path, applied_migrations(conn))  # a newer one came first
            migrations.apply(db)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(patience)}")
