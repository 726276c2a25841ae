"""server/stats' and `subagentd stats`' figures from a PostgreSQL database (storage/stats.py holds
SQLite's and the figures both build)."""

from __future__ import annotations

from subagentd.schema.stats import StatsResult
from subagentd.storage.postgres.connection import PgConnection
from subagentd.storage.stats import USAGE_SQL, figures


def read_stats(conn: PgConnection, clock: float) -> StatsResult:
    """server/stats' and `subagentd stats`' figures, read in one snapshot (REPEATABLE READ) unless
    a transaction is open (then through it)."""
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        live = dict(conn.execute(_LIVE_SQL, (clock,)).fetchall())
        (total,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
        waiting = conn.execute(_WAITING_SQL).fetchone()
        (size,) = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        usage = conn.execute(USAGE_SQL).fetchone()
    finally:
        if began:
            conn.execute("COMMIT")
    # free_bytes 0: PostgreSQL reuses dead space itself (VACUUM); no free-page count
    return figures(live, total, waiting, clock, database_bytes=int(size), free_bytes=0, usage=usage)


_LIVE_SQL = """
SELECT l.status, count(*) FROM leases l JOIN owners o ON o.owner = l.owner
WHERE o.fenced = 0 AND o.expires_at > ? GROUP BY l.status
"""
_WAITING_SQL = """
SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'parked'),
       min(created_at) FILTER (WHERE state = 'queued')
FROM inbox WHERE state IN ('queued', 'parked')
"""
