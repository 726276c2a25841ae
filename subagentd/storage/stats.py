"""The database's figures for server/stats and `subagentd stats`: counts, queue age, size."""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime
from typing import Protocol

from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX, Spent
from subagentd.schema.stats import SessionCounts, StatsResult

# A lease counts while its owner's row is unfenced and unexpired (storage/leases.py).
_LIVE_SQL = """
SELECT l.status, count(*) FROM leases l JOIN owners o ON o.owner = l.owner
WHERE o.fenced = 0 AND o.expires_at > ? GROUP BY l.status
"""
# summed as doubles (exact below 2^53), then saturated as each row's sums are
# (storage/spending.py): an integer sum would fail on SQLite and turn NUMERIC on PostgreSQL
USAGE_SQL = (
    "SELECT "
    + ", ".join(
        f"coalesce(sum(CAST(own_{c} AS DOUBLE PRECISION)), 0)"
        for c in ("turns", "spawns", "input", "output", "cost")
    )
    + " FROM spending"
)
_WAITING_SQL = """
SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(state = 'parked'), 0),
       min(CASE WHEN state = 'queued' THEN created_at END)
FROM inbox WHERE state IN ('queued', 'parked')
"""


def read_stats(conn: sqlite3.Connection, clock: float | None = None) -> StatsResult:
    """One consistent read (a single read transaction) of what the database holds now."""
    clock = time.time() if clock is None else clock
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")
    try:
        live = dict(conn.execute(_LIVE_SQL, (clock,)).fetchall())
        (total,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
        waiting = conn.execute(_WAITING_SQL).fetchone()
        pages, free, size = (
            conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
        try:
            usage = conn.execute(USAGE_SQL).fetchone()
        except sqlite3.OperationalError:  # a database no serving process has migrated yet
            usage = None
    finally:
        if began:
            conn.execute("COMMIT")
    return figures(
        live,
        total,
        waiting,
        clock,
        database_bytes=int(pages) * int(size),
        free_bytes=int(free) * int(size),
        usage=usage,
    )


def figures(
    live: dict[str, int],
    total: int,
    waiting: tuple[int, int, str | None],
    clock: float,
    *,
    database_bytes: int,
    free_bytes: int,
    usage: tuple[float, float, float, float, float] | None = None,
) -> StatsResult:
    """The figures from what either backend read in one snapshot: live leases by status, the
    sessions, and the waiting inbox (queued, parked, the oldest queued row's stamp)."""
    running = int(live.get("running", 0))
    idle = sum(int(n) for status, n in live.items() if status != "running")
    queued, parked, oldest = waiting
    return StatsResult(
        sessions=SessionCounts(
            running=running, idle=idle, ready=max(0, int(total) - running - idle)
        ),
        live_agents=running + idle,
        queued_messages=int(queued),
        parked_messages=int(parked),
        oldest_queued_age_s=None if oldest is None else _age(oldest, clock),
        database_bytes=database_bytes,
        free_bytes=free_bytes,
        usage=None if usage is None else _usage(*usage),
    )


def _usage(turns: float, spawns: float, tokens_in: float, tokens_out: float, cost: float) -> Spent:
    """The summed usage (cost stored in millionths of the currency, core/budgets.py)."""
    return Spent(
        turns=int(min(turns, COUNT_MAX)),
        spawns=int(min(spawns, COUNT_MAX)),
        input_tokens=int(min(tokens_in, COUNT_MAX)),
        output_tokens=int(min(tokens_out, COUNT_MAX)),
        cost=min(float(cost) / 1_000_000, MONEY_MAX),
    )


def _age(stamp: str, clock: float) -> float:
    """Seconds since a stored `YYYY-MM-DDTHH:MM:SS.ffffffZ` stamp (0 for one in the future)."""
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:  # written by hand or by an older version: not a figure to guess
        return 0.0
    return round(max(0.0, clock - at), 3)


class _ConnectedStore(Protocol):
    conn: sqlite3.Connection

    def _now(self) -> float: ...


def stats_of(store: _ConnectedStore) -> StatsResult:
    """SqliteStore.stats: read through the store's own connection, by its clock."""
    return read_stats(store.conn, store._now())
