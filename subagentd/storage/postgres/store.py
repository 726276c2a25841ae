"""The PostgreSQL store core/ sees (core/store.py's Store): the SQLite store's table objects over a
psycopg connection, PostgreSQL's own migrations, group commit, leases and doorbell."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg

from subagentd.schema.stats import SessionCounts, StatsResult
from subagentd.storage.connected import Connected
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.opening import DatabaseRefusedError
from subagentd.storage.postgres import migrations
from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.group import PgGroupCommit
from subagentd.storage.postgres.tables import PgEvents, PgInbox, PgLeases, PgSessions, PgTrees
from subagentd.storage.signals import Signals
from subagentd.storage.stats import _age


def shown(url: str) -> str:
    """The URL as logs and errors show it: without its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "a PostgreSQL URL that libpq cannot parse"
    params.pop("password", None)
    user = f"{params.pop('user')}@" if "user" in params else ""
    host = str(params.pop("host", ""))
    if host.startswith("/"):  # a unix socket's directory: shown as libpq takes it, a parameter
        params["host"], host = host, ""
    port = f":{params.pop('port')}" if "port" in params else ""
    name = params.pop("dbname", "")
    rest = "&".join(f"{key}={value}" for key, value in sorted(params.items()))
    return f"postgresql://{user}{host}{port}/{name}" + (f"?{rest}" if rest else "")


@dataclass
class OpenedPostgres:
    """A connected, migrated database, handed from start-up to the store."""

    conn: psycopg.Connection[Any]
    url: str
    durability: str = "normal"
    applied: set[str] = field(default_factory=set)


def connect(url: str, durability: str) -> psycopg.Connection[Any]:
    """A main connection: autocommit (the group commit begins and ends its transactions)."""
    conn = psycopg.connect(url, autocommit=True)
    if durability == "full":  # each COMMIT waits for its WAL flush (also if the default is off)
        conn.execute("SET synchronous_commit = on")
    return conn


def open_postgres(url: str, *, durability: str = "normal") -> OpenedPostgres:
    """Connect and migrate; refused in one line (DatabaseRefusedError) when unusable."""
    try:
        conn = connect(url, durability)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DatabaseRefusedError(f"database {shown(url)} cannot be opened: {reason}") from None
    try:
        before = migrations.migrate(conn)
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseRefusedError(f"database {shown(url)} cannot be migrated: {exc}") from None
    unknown = sorted(before - set(migrations.NAMES))
    if unknown:
        conn.close()
        raise DatabaseRefusedError(
            f"database {shown(url)} was written by a newer subagentd:"
            f" unknown migration {', '.join(unknown)}"
        )
    return OpenedPostgres(conn, url, durability, set(migrations.NAMES))


class PostgresStore:
    """Everything subagentd keeps durably, in PostgreSQL; its methods are its parts' own."""

    def __init__(
        self,
        source: str | OpenedPostgres,
        *,
        durability: str = "normal",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
    ):
        opened = (
            source
            if isinstance(source, OpenedPostgres)
            else open_postgres(source, durability=durability)
        )
        self.url = opened.url
        self.path = shown(opened.url)
        self.conn = PgConnection(opened.conn)
        self.group = group = PgGroupCommit(
            self.conn,
            opened.url,
            busy_timeout_ms,
            clock,
            lambda: connect(opened.url, opened.durability),
        )
        self._now = clock
        self.atomic = group.atomic
        self.commit = group.commit
        self.rollback = group.rollback
        self.close = group.close
        self.check_file = group.check_file
        self.limit_lock_wait = group.limit_lock_wait
        self.hold = group.hold
        self.clock = group.clock
        db = cast(Connected, group)  # the tables' SQL runs unchanged over PgConnection

        sessions = PgSessions(db)
        self.get_session = sessions.get_session
        self.insert_session = sessions.insert_session
        self.get_descriptor = sessions.get_descriptor
        self.get_descriptors = sessions.get_descriptors
        self.set_open_turn = sessions.set_open_turn
        self.end_turn = sessions.end_turn
        self.open_turns = sessions.open_turns
        self.tree = PgTrees(db).tree

        inbox = PgInbox(db)
        self.insert_message = inbox.insert_message
        self.next_queued = inbox.next_queued
        self.claim_message = inbox.claim_message
        self.cancel_message = inbox.cancel_message
        self.set_parked = inbox.set_parked
        self.inbox_counts = inbox.inbox_counts
        self.get_message = inbox.get_message
        self.waiting_messages = inbox.waiting_messages
        self.parked_counts = inbox.parked_counts

        events = PgEvents(db)
        self.append_events = events.append_events
        self.read_events = events.read_events

        leases = PgLeases(db)
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

        signals = Signals(db)  # its ring is a NOTIFY in the group (PgGroupCommit.ring_after_commit)
        self.put_signal = signals.put_signal
        self.take_signals = signals.take_signals

        keys = IdempotencyKeys(db)
        self.get_idempotent = keys.get_idempotent
        self.put_idempotent = keys.put_idempotent
        self.prune_idempotent = keys.prune_idempotent

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self.conn.in_transaction

    def size_bytes(self) -> int:
        """Bytes the database holds (pg_database_size: its files, indexes and TOAST included)."""
        (size,) = self.conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(size)

    def doorbell(self) -> int | None:
        """The fd a NOTIFY on this process's channel makes readable (None before `hold`)."""
        bell = self.group.doorbell
        return None if bell is None else bell.fileno()

    def drain_doorbell(self) -> None:
        if self.group.doorbell is not None:
            self.group.doorbell.drain()

    def stats(self) -> StatsResult:
        """The figures of server/stats, read in one snapshot (REPEATABLE READ) unless a group is
        open (then through it, as on SQLite)."""
        conn, clock = self.conn, self._now()
        began = not conn.in_transaction
        if began:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            live = dict(conn.execute(_LIVE_SQL, (clock,)).fetchall())
            (total,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
            queued, parked, oldest = conn.execute(_WAITING_SQL).fetchone()
            (size,) = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        finally:
            if began:
                conn.execute("COMMIT")
        running = int(live.get("running", 0))
        idle = sum(int(n) for status, n in live.items() if status != "running")
        return StatsResult(
            sessions=SessionCounts(
                running=running, idle=idle, ready=max(0, int(total) - running - idle)
            ),
            live_agents=running + idle,
            queued_messages=int(queued),
            parked_messages=int(parked),
            oldest_queued_age_s=None if oldest is None else _age(oldest, clock),
            database_bytes=int(size),
            free_bytes=0,  # PostgreSQL reuses dead space itself (VACUUM); no free-page count
        )


_LIVE_SQL = """
SELECT l.status, count(*) FROM leases l JOIN owners o ON o.owner = l.owner
WHERE o.fenced = 0 AND o.expires_at > ? GROUP BY l.status
"""
_WAITING_SQL = """
SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'parked'),
       min(created_at) FILTER (WHERE state = 'queued')
FROM inbox WHERE state IN ('queued', 'parked')
"""
