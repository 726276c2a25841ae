"""The table objects where PostgreSQL's SQL differs from SQLite's: generated keys come back through
RETURNING, booleans are counted with FILTER, NULL parameters need a type, `IN ()` is `= ANY`."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from subagentd.schema.records import EventRecord, ForeignLease, InboxCounts, SignalRow
from subagentd.storage.events import EVENTS_SQL, Events
from subagentd.storage.inbox import Inbox, inbox_record
from subagentd.storage.leases import LeaseTables
from subagentd.storage.paths import END
from subagentd.storage.roots import inserting, pick, pick_insert, rooted
from subagentd.storage.sessions import Sessions
from subagentd.storage.signals import Signals, taken
from subagentd.storage.trees import CHILDREN_LISTING_SQL, TOP_SQL, WITH_BODY, Trees

if TYPE_CHECKING:
    pass


_DESCRIPTORS_SQL = rooted(
    "SELECT session_id, body FROM descriptors WHERE {root}session_id = ANY(?)"
)


class PgSessions(Sessions):
    def get_descriptors(self, session_ids: list[str]) -> dict[str, str | bytes | None]:
        root = self._db.roots.common(session_ids)
        sql = pick(_DESCRIPTORS_SQL, root, (list(session_ids),))
        return dict(self._db.conn.execute(*sql).fetchall())


class PgInbox(Inbox):
    _counts = rooted(
        "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state ="
        " 'parked') FROM inbox WHERE {root}session_id = ? AND state IN ('queued', 'parked')"
    )

    def all_inbox_counts(self) -> dict[str, tuple[int, int]]:
        return {
            row[0]: (int(row[1]), int(row[2]))
            for row in self._db.conn.execute(
                "SELECT session_id, count(*) FILTER (WHERE state = 'queued'), count(*) FILTER"
                " (WHERE state = 'parked') FROM inbox WHERE state IN ('queued', 'parked')"
                " GROUP BY session_id"
            )
        }

    def parked_counts(self) -> dict[str, int]:
        """As SQLite's, without its INDEXED BY (the planner takes the partial index itself)."""
        return dict(
            self._db.conn.execute(
                "SELECT session_id, count(*) FROM inbox WHERE state = 'parked' GROUP BY session_id"
            ).fetchall()
        )


_EVENTS_INSERT = inserting(
    "INSERT INTO events (root_id, session_id, turn_id, type, data, at)"
    " SELECT {root}, ?, ?, t, d, ? FROM unnest(CAST(? AS text[]), CAST(? AS text[]))"
    " WITH ORDINALITY AS e(t, d, n) ORDER BY n RETURNING seq"
)


class PgEvents(Events):
    def transcript(self, session_id: str) -> list[EventRecord]:
        """As on SQLite; no limit is `LIMIT NULL` (PostgreSQL refuses SQLite's `LIMIT -1`)."""
        return [
            EventRecord(seq=r[0], turn_id=r[1], type=r[2], data=r[3], at=r[4])
            for r in self._db.conn.execute(
                *pick(EVENTS_SQL, self._db.roots.root(session_id), (session_id, 0, None))
            )
        ]

    def append_events(
        self,
        session_id: str,
        turn_id: str | None,
        events: Sequence[tuple[str, str | None]],
        at: str,
    ) -> int:
        db = self._db
        db.begin()
        if not events:
            return 0
        row = db.conn.execute(
            *pick_insert(
                _EVENTS_INSERT,
                db.roots.root(session_id),
                session_id,
                (session_id, turn_id, at, [t for t, _ in events], [d for _, d in events]),
            )
        ).fetchall()
        return int(max(seq for (seq,) in row))


class PgLeases(LeaseTables):
    def foreign_leases(self, owner: str, now: float) -> list[ForeignLease]:
        rows = self._db.conn.execute(
            "SELECT l.session_id, l.owner, l.status FROM owners o JOIN leases l"
            " ON l.owner = o.owner WHERE o.owner != ? AND o.fenced = 0 AND o.expires_at > ?",
            (owner, now),
        ).fetchall()
        return [ForeignLease._make(row) for row in rows]


_SUBTREE_SQL = """
SELECT b.id, b.parent_id, b.depth - ?, b.kind, b.label, {mode}, {body}, {ended} FROM sessions b
WHERE {{b.root}}b.path > ? AND b.path < ? ORDER BY b.path
"""
_PATHLESS_SQL = rooted("SELECT 1 FROM sessions WHERE {root}path IS NULL LIMIT 1")


class PgTrees(Trees):
    _by_parent = ""
    _children_listing = rooted(CHILDREN_LISTING_SQL.format(parked_index="", **WITH_BODY))

    def subtree(self, root_id: str, parts: dict[str, str]) -> list[tuple[Any, ...]] | None:
        """One range scan over paths (storage/trees.py), or None when some session has none."""
        conn = self._db.conn
        tree = self._db.roots.root(root_id)
        top = conn.execute(*pick(TOP_SQL, tree, (root_id,))).fetchone()
        if top is None or top[0] is None:
            return None
        if conn.execute(*pick(_PATHLESS_SQL, tree, ())).fetchone():
            return None
        low, base = top
        rows: list[tuple[Any, ...]]
        sql = rooted(_SUBTREE_SQL.format(**parts))
        rows = conn.execute(*pick(sql, tree, (base, low, low + END))).fetchall()
        return rows


class PgSignals(Signals):
    """The signals table in one round trip each way: a signal's row and its owner's ring (a
    NOTIFY on the channel in the owner's row naming the session, delivered at commit and dropped
    with a rollback, as postgres/group.py ring_after_commit's) are one statement; taking the
    signals inside an open group (a doorbell's ring: the lock of the rung session's tree is taken
    ahead, or every tree's) deletes and returns them in one. Outside a group (a heartbeat's look)
    it stays one read, so finding none writes nothing."""

    _PUT = inserting(
        "WITH s AS (INSERT INTO signals (root_id, owner, session_id, kind, by)"
        " VALUES ({root}, ?, ?, ?, ?))"
        " SELECT pg_notify(wake, ?) FROM owners WHERE owner = ? AND wake <> ''"
    )
    # a ring's take: the sessions' rows (of one tree), each with its session's inbox as read in
    # the same statement (its queued and parked counts, its next queued message)
    _TAKE_OF = rooted(
        "WITH t AS (DELETE FROM signals WHERE {root}owner = ? AND session_id = ANY(?)"
        " RETURNING seq, session_id, kind, by, root_id)"
        " SELECT t.seq, t.session_id, t.kind, t.by, t.root_id, c.queued, c.parked, n.*"
        " FROM t CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE state = 'queued') AS queued,"
        " count(*) FILTER (WHERE state = 'parked') AS parked FROM inbox"
        " WHERE root_id = t.root_id AND session_id = t.session_id"
        " AND state IN ('queued', 'parked')) c"
        " LEFT JOIN LATERAL (SELECT position, message_id, session_id, content, source, state,"
        " turn_id FROM inbox WHERE root_id = t.root_id AND session_id = t.session_id"
        " AND state = 'queued' ORDER BY position LIMIT 1) n ON true"
    )

    def put_signal(self, owner: str, session_id: str, kind: str, by: str | None) -> None:
        db = self._db
        db.begin()
        root = db.roots.root(session_id)
        db.conn.execute(
            *pick_insert(
                self._PUT, root, session_id, (owner, session_id, kind, by, session_id, owner)
            )
        )

    def take_signals(self, owner: str, sessions: Collection[str] | None = None) -> list[SignalRow]:
        db = self._db
        if not db.conn.in_transaction:
            return super().take_signals(owner, sessions)
        db.begin()
        if sessions is None:
            rows = db.conn.execute(
                "DELETE FROM signals WHERE owner = ? RETURNING seq, session_id, kind, by, root_id",
                (owner,),
            ).fetchall()
            return taken(db, rows)
        root = db.roots.common(sessions)
        rows = db.conn.execute(*pick(self._TAKE_OF, root, (owner, list(sessions)))).fetchall()
        if len(rows) != 1:  # acting on one changes what the next would have read: read then
            return taken(db, [row[:5] for row in rows])
        _, session_id, kind, by, _root, queued, parked, *first = rows[0]
        taken(db, [rows[0][:5]])
        if first[0] is not None:
            db.roots.tie(f"m:{first[1]}", session_id)
        return [
            SignalRow(
                session_id,
                kind,
                by,
                InboxCounts(int(queued), int(parked)),
                None if first[0] is None else inbox_record(first),
            )
        ]
