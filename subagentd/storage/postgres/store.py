"""The PostgreSQL store core/ sees (core/store.py's Store): the SQLite store's table objects over a
psycopg connection, PostgreSQL's own migrations, group commit, leases and doorbell."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg

from subagentd.schema.stats import StatsResult, Traffic
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.opening import DatabaseRefusedError
from subagentd.storage.postgres import migrations
from subagentd.storage.postgres.connection import PgConnection, Timeouts, nul_safe
from subagentd.storage.postgres.group import PgGroupCommit
from subagentd.storage.postgres.pooling import shares_sessions
from subagentd.storage.postgres.stats import read_stats
from subagentd.storage.postgres.tables import (
    PgEvents,
    PgInbox,
    PgLeases,
    PgSessions,
    PgSignals,
    PgTrees,
)
from subagentd.storage.spending import Spending
from subagentd.storage.store_binding import BoundParts
from subagentd.storage.table_access import Connected
from subagentd.storage.tasks import Tasks
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
    timeouts: Timeouts = field(default_factory=lambda: Timeouts())


def connect(url: str, durability: str, timeouts: Timeouts | None = None) -> psycopg.Connection[Any]:
    """A main connection: autocommit (the group commit begins and ends its transactions), the
    timeouts' bounds (connection.py Timeouts), and no JIT: every query here is short, and a
    listing's cost estimate (a descriptor subquery per row) made PostgreSQL 15 compile one over
    10k sessions for ~220 ms before running it in ~5."""
    timeouts = timeouts or Timeouts()
    conn = psycopg.connect(url, autocommit=True, **timeouts.libpq())
    nul_safe(conn)
    conn.execute(_BOUND_STATEMENTS, {"ms": int(timeouts.statement * 1000)})
    if durability == "full":  # each COMMIT waits for its WAL flush (also if the default is off)
        conn.execute("SET synchronous_commit = on")
    return conn


# jit off; statement_timeout the smaller of the server's own (if any) and ours
_BOUND_STATEMENTS = """
SELECT set_config('jit', 'off', false), set_config('statement_timeout', (
    SELECT CASE WHEN s.setting::bigint BETWEEN 1 AND %(ms)s THEN s.setting ELSE %(ms)s::text END
    FROM pg_settings s WHERE s.name = 'statement_timeout'), false)
"""


def one_line(exc: BaseException) -> str:
    """A driver error as one line: libpq's lines (the address, "Connection refused", its hint)
    joined, PostgreSQL's DETAIL and HINT left out."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, psycopg.errors.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    return "; ".join(lines) if lines else type(exc).__name__


def open_postgres(
    url: str, *, durability: str = "normal", timeouts: Timeouts | None = None
) -> OpenedPostgres:
    """Connect and migrate; refused in one line (DatabaseRefusedError) when unusable."""
    timeouts = timeouts or Timeouts()
    try:
        conn = connect(url, durability, timeouts)
        pooled = shares_sessions(lambda: connect(url, durability, timeouts))
    except psycopg.Error as exc:
        raise DatabaseRefusedError(
            f"database {shown(url)} cannot be opened: {one_line(exc)}"
        ) from None
    if pooled:
        conn.close()
        raise DatabaseRefusedError(
            f"database {shown(url)} is reached through a pooler that does not keep one server"
            " session per connection (transaction or statement pooling): subagentd needs"
            " session pooling (PgBouncer pool_mode = session) or a direct connection"
        )
    try:
        before = migrations.migrate(conn)
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseRefusedError(
            f"database {shown(url)} cannot be migrated: {one_line(exc)}"
        ) from None
    unknown = sorted(before - set(migrations.NAMES))
    if unknown:
        conn.close()
        raise DatabaseRefusedError(
            f"database {shown(url)} was written by a newer subagentd:"
            f" unknown migration {', '.join(unknown)}"
        )
    return OpenedPostgres(conn, url, durability, set(migrations.NAMES), timeouts)


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
            lambda: connect(opened.url, opened.durability, opened.timeouts),
            opened.timeouts,
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
            PgSignals(db),  # its ring a NOTIFY in the signal's own statement
            IdempotencyKeys(db),
        )
        traces = TraceContexts(db)
        self.put_trace, self.get_traces = traces.put_trace, traces.get_traces
        self.bind_spending(Spending(db))
        self.bind_tasks(Tasks(db))

    def changes(self) -> int:
        """A new number each call: psycopg counts no changes, so core reuses nothing it read
        (SqliteStore.changes)."""
        return next(self._reads)

    def outside_commits(self) -> None:
        """None: the other connections' commits cannot be told apart here (SqliteStore's)."""
        return None

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
        one (as on SQLite), and this process's traffic with the database until now (counted
        before these reads)."""
        bell = self.group.doorbell
        traffic = Traffic(
            round_trips=self.conn.round_trips,
            wakeups=0 if bell is None else bell.wakeups,
            rings=0 if bell is None else bell.rings,
        )
        figures = read_stats(self.conn, self._now())
        figures.traffic = traffic
        return figures
