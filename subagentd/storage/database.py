"""The SQLite store core/ sees (core/store.py's Store): one connection, its tables composed."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from subagentd.storage.events import Events
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.inbox import Inbox
from subagentd.storage.leases import Leases
from subagentd.storage.migrations import migrations
from subagentd.storage.opening import (
    OpenedDatabase,
    applied_migrations,
    open_database,
    refuse_unknown,
)
from subagentd.storage.sessions import Sessions
from subagentd.storage.signals import Signals
from subagentd.storage.stats import stats_of
from subagentd.storage.transactions import GroupCommit
from subagentd.storage.trees import Trees

MIGRATION_WAIT_MS = 60_000  # how long start-up waits for another process's migrations


class SqliteStore:
    """Everything subagentd keeps durably; knows nothing about JSON-RPC or the agent rules.

    Its methods are its parts' own, bound once here (no call in between on the hot paths):
    the group commit (storage/transactions.py) and one object per table.
    """

    def __init__(
        self,
        source: str | OpenedDatabase,
        *,
        durability: str = "normal",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
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
        self.group = group = GroupCommit(opened, busy_timeout_ms, clock)
        self._now = clock  # wall-clock seconds (storage/stats.py reads by it)
        self.atomic = group.atomic
        self.commit = group.commit
        self.rollback = group.rollback
        self.close = group.close
        self.check_file = group.check_file
        self.limit_lock_wait = group.limit_lock_wait
        self.hold = group.hold
        self.clock = group.clock

        sessions = Sessions(group)
        self.get_session = sessions.get_session
        self.insert_session = sessions.insert_session
        self.get_descriptor = sessions.get_descriptor
        self.get_descriptors = sessions.get_descriptors
        self.set_open_turn = sessions.set_open_turn
        self.end_turn = sessions.end_turn
        self.open_turns = sessions.open_turns
        self.tree = Trees(group).tree

        inbox = Inbox(group)
        self.insert_message = inbox.insert_message
        self.next_queued = inbox.next_queued
        self.claim_message = inbox.claim_message
        self.cancel_message = inbox.cancel_message
        self.set_parked = inbox.set_parked
        self.inbox_counts = inbox.inbox_counts
        self.get_message = inbox.get_message
        self.waiting_messages = inbox.waiting_messages
        self.parked_counts = inbox.parked_counts

        events = Events(group)
        self.append_events = events.append_events
        self.read_events = events.read_events

        leases = Leases(group)
        self.owners = leases.owners
        self.owner_state = leases.owner_state
        self.fence = leases.fence
        self.prune_owners = leases.prune_owners
        self.orphaned_turns = leases.orphaned_turns
        self.get_lease = leases.get_lease
        self.put_lease = leases.put_lease
        self.set_lease_status = leases.set_lease_status
        self.live_agents = leases.live_agents
        self.live_record = leases.live_record
        self.drop_lease = leases.drop_lease
        self.foreign_leases = leases.foreign_leases

        signals = Signals(group)
        self.put_signal = signals.put_signal
        self.take_signals = signals.take_signals

        keys = IdempotencyKeys(group)
        self.get_idempotent = keys.get_idempotent
        self.put_idempotent = keys.put_idempotent
        self.prune_idempotent = keys.prune_idempotent

    @property
    def conn(self) -> sqlite3.Connection:
        """The one connection (a test may replace it: every part reads it at each call)."""
        return self.group.conn

    @conn.setter
    def conn(self, conn: sqlite3.Connection) -> None:
        self.group.conn = conn

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self.group.conn.in_transaction

    def size_bytes(self) -> int:
        """Bytes the database holds in use (its pages but the free ones; WAL not counted)."""
        pages, free, size = (
            self.group.conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        return int((pages - free) * size)

    def doorbell(self) -> int | None:
        """The fd another process's signal makes readable (None: nobody else can signal)."""
        bell = self.group.doorbell
        return None if bell is None else bell.fileno()

    def drain_doorbell(self) -> None:
        """Read the rings waiting (they only say: look at your signals)."""
        if self.group.doorbell is not None:
            self.group.doorbell.drain()

    stats = stats_of  # server/stats: the figures read from this connection (storage/stats.py)


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Apply pending migrations under one write lock, as one transaction: processes starting
    together on a new file take turns, and the later ones find nothing left to do.

    sqlite-utils is imported here only: serving an up-to-date database never needs it (its
    import, with click, costs ~60 ms of start-up and ~3 MiB; docs/architecture.md)."""
    from sqlite_utils import Database

    db = Database(conn, execute_plugins=False)
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
