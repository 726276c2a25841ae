"""The `trace_context` table: the W3C traceparent kept with a message ("m:<message id>"), a
session ("s:<session id>") or a turn ("t:<turn id>"), written only while tracing is on
(core/tracing.py), so a turn in another process, or one recovered after its process died, joins
the trace it belongs to. `at`: epoch seconds when it was written (a message's send time, a
turn's start)."""

from __future__ import annotations

from collections.abc import Iterable

from subagentd.schema.records import KeptTrace
from subagentd.storage.table_access import Connected

_PUT_SQL = (
    "INSERT INTO trace_context (key, traceparent, at) VALUES (?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET traceparent = excluded.traceparent, at = excluded.at"
)


class TraceContexts:
    def __init__(self, db: Connected) -> None:
        self._db = db

    def put_trace(self, key: str, traceparent: str, at: float) -> None:
        db = self._db
        db.begin()
        db.conn.execute(_PUT_SQL, (key, traceparent, at))

    def get_traces(self, keys: Iterable[str]) -> dict[str, KeptTrace]:
        """key -> its kept trace context, for those of `keys` that have one."""
        wanted = list(keys)
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        rows = self._db.conn.execute(
            f"SELECT key, traceparent, at FROM trace_context WHERE key IN ({marks})", wanted
        ).fetchall()
        return {key: KeptTrace(parent, float(at)) for key, parent, at in rows}
