"""The PostgreSQL store core/ sees (core/store.py's Store): the SQLite store's table objects over a
psycopg connection, PostgreSQL's own migrations, group commit, leases and doorbell."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg

from subagentd.schema.stats import StatsResult
from subagentd.storage.connected import Connected
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.opening import DatabaseRefusedError
from subagentd.storage.parts import BoundParts
from subagentd.storage.postgres import migrations
from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.postgres.group import PgGroupCommit
from subagentd.storage.postgres.stats import read_stats
from subagentd.storage.postgres.tables import PgEvents, PgInbox, PgLeases, PgSessions, PgTrees
from subagentd.storage.signals import Signals
from subagentd.storage.spending import Spending
from subagentd.storage.traces import TraceContexts


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
    """A main connection: autocommit (the group commit begins and ends its transactions), and
    no JIT: every query here is short, and a listing's cost estimate (a descriptor subquery per
    row) made PostgreSQL 15 compile one over 10k sessions for ~220 ms before running it in ~5."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET jit = off")
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


class PostgresStore(BoundParts):
    """Everything subagentd keeps durably, in PostgreSQL; its methods are its parts' own."""

    group: PgGroupCommit

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
        self._reads = itertools.count()
        db = cast(Connected, group)  # the tables' SQL runs unchanged over PgConnection
        self.bind_parts(
            group,
            PgSessions(db),
            PgTrees(db),
            PgInbox(db),
            PgEvents(db),
            PgLeases(db),
            Signals(db),  # its ring is a NOTIFY in the group (PgGroupCommit.ring_after_commit)
            IdempotencyKeys(db),
        )
        traces = TraceContexts(db)
        self.put_trace, self.get_traces = traces.put_trace, traces.get_traces
        self.bind_spending(Spending(db))

    def changes(self) -> int:
        """A new number each call: psycopg counts no changes, so core reuses nothing it read
        (SqliteStore.changes)."""
        return next(self._reads)

    @property
    def dirty(self) -> bool:
        """True while writes are waiting for the next commit."""
        return self.conn.in_transaction

    def size_bytes(self) -> int:
        """Bytes the database holds (pg_database_size: its files, indexes and TOAST included)."""
        (size,) = self.conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(size)

    def stats(self) -> StatsResult:
        """The figures of server/stats (postgres/stats.py), through the open group when there is
        one (as on SQLite)."""
        return read_stats(self.conn, self._now())
