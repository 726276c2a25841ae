"""The `trace_context` table: the W3C traceparent kept with a message ("m:<message id>"), a
session ("s:<session id>") or a turn ("t:<turn id>"), written only while tracing is on
(core/tracing.py), so a turn in another process, or one recovered after its process died, joins
the trace it belongs to. `at`: epoch seconds when it was written (a message's send time, a
turn's start)."""

from __future__ import annotations

from collections.abc import Iterable

from subagentd.schema.records import KeptTrace
from subagentd.storage.roots import pick, rooted
from subagentd.storage.table_access import Connected

_PUT_SQL = (
    "INSERT INTO trace_context (root_id, key, traceparent, at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET traceparent = excluded.traceparent, at = excluded.at"
)


class TraceContexts:
    def __init__(self, db: Connected) -> None:
        self._db = db

    def put_trace(self, key: str, traceparent: str, at: float) -> None:
        db = self._db
        db.begin()
        db.conn.execute(_PUT_SQL, (self._root(key), key, traceparent, at))

    def _root(self, key: str) -> str | None:
        """The tree of a session ("s:"), message ("m:") or turn ("t:") as this process knows
        it (None: not known here, a row no statement reads by its tree)."""
        roots = self._db.roots
        return roots.root(key[2:]) if key.startswith("s:") else roots.root_of(key)

    def get_traces(self, keys: Iterable[str]) -> dict[str, KeptTrace]:
        """key -> its kept trace context, for those of `keys` that have one."""
        wanted = list(keys)
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        sql = rooted(
            f"SELECT key, traceparent, at FROM trace_context WHERE {{root}}key IN ({marks})"
        )
        found = {self._root(key) for key in wanted}
        root = found.pop() if len(found) == 1 else None
        rows = self._db.conn.execute(*pick(sql, root, tuple(wanted))).fetchall()
        return {key: KeptTrace(parent, float(at)) for key, parent, at in rows}
