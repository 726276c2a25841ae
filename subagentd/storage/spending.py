"""The `spending` table: per session, its own usage, its subtree's usage and its budget's limits.

A row is written the first time a session spends or is given a budget. Spending is charged in
the request's transaction to the session and to every ancestor (its lineage), so a budget check
reads a handful of rows by primary key, whichever process wrote them. Every sum saturates at
its ceiling (COUNT_MAX, COST_MAX; PROTOCOL.md section 12), alike on both backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX
from subagentd.schema.records import SpendingRecord
from subagentd.storage.roots import inserting, pick, pick_insert, rooted
from subagentd.storage.table_access import Connected

_COLUMNS = (
    "session_id, limits_set, max_turns, max_spawns, max_tokens, max_cost, deadline, stopped,"
    " own_turns, own_spawns, own_input, own_output, own_cost,"
    " tree_turns, tree_spawns, tree_input, tree_output, tree_cost, close_policy"
)
_COUNTERS = ("turns", "spawns", "input", "output", "cost")
# a count (turns, spawns, tokens) saturates at COUNT_MAX, exact in every JSON client; a cost
# (millionths) at MONEY_MAX units: each the bound of one report (schema/budgets.py)
COST_MAX = int(MONEY_MAX) * 1_000_000
CEILINGS = (COUNT_MAX, COUNT_MAX, COUNT_MAX, COUNT_MAX, COST_MAX)  # _COUNTERS' order


def saturated(total: int, ceiling: int) -> int:
    """A sum as the spending table keeps it: never past its ceiling (checked arithmetic, the
    same on both backends; PostgreSQL's BIGINT would fail the group, SQLite's turn REAL)."""
    return ceiling if total > ceiling else total


def _saturating(column: str, ceiling: int) -> str:
    """`column + excluded.column`, saturating at `ceiling` without ever computing past it."""
    return (
        f"{column} = CASE WHEN spending.{column} > {ceiling} - excluded.{column}"
        f" THEN {ceiling} ELSE spending.{column} + excluded.{column} END"
    )


_CHARGE_SQL = inserting(
    "INSERT INTO spending (root_id, session_id, "
    + ", ".join(f"own_{c}" for c in _COUNTERS)
    + ", "
    + ", ".join(f"tree_{c}" for c in _COUNTERS)
    + ") VALUES ({root},?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (session_id) DO UPDATE SET "
    + ", ".join(
        _saturating(f"{p}_{c}", ceiling)
        for p in ("own", "tree")
        for c, ceiling in zip(_COUNTERS, CEILINGS, strict=True)
    )
)
_LIMITS = ("max_turns", "max_spawns", "max_tokens", "max_cost", "deadline")
_SET_LIMITS_SQL = inserting(
    "INSERT INTO spending (root_id, session_id, limits_set, "
    + ", ".join(_LIMITS)
    + ") VALUES ({root},?,1,?,?,?,?,?) ON CONFLICT (session_id) DO UPDATE SET limits_set = 1, "
    + ", ".join(f"{name} = excluded.{name}" for name in _LIMITS)
)
_CLOSE_POLICY_SQL = inserting(
    "INSERT INTO spending (root_id, session_id, close_policy) VALUES ({root}, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET close_policy = excluded.close_policy"
)
_STOPPED_SQL = inserting(
    "INSERT INTO spending (root_id, session_id, stopped) VALUES ({root}, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET stopped = excluded.stopped"
)


def _charged(
    session_id: str, row: SpendingRecord | None, own: tuple[int, ...], tree: tuple[int, ...]
) -> SpendingRecord:
    """What _CHARGE_SQL leaves of `row` (None: no row yet, so the table's defaults)."""
    values: list[Any] = (
        list(msgspec.structs.astuple(row))
        if row is not None
        else [session_id, 0, None, None, None, None, None, 0, *(0,) * 10, None]
    )
    for offset, added in ((8, own), (13, tree)):  # own_turns …, tree_turns …: _COUNTERS' order
        for i, amount in enumerate(added):
            total, ceiling = values[offset + i] + amount, CEILINGS[i]
            values[offset + i] = ceiling if total > ceiling else total  # saturated(), inlined
    return SpendingRecord(*values)


class Spending:
    """Usage counters and budget limits by session."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def spending_rows(self, session_ids: Sequence[str]) -> dict[str, SpendingRecord]:
        """The rows of `session_ids` that exist. Inside a group each is read once: the group's
        later requests (a burst of sends checks the same lineage's budgets) find it in the
        group's reads, which every write here drops it from (group_base.py `reads`)."""
        if not session_ids:
            return {}
        seen = self._db.reads()
        if seen is None:
            return self._select(session_ids)
        found: dict[str, SpendingRecord] = {}
        missing: list[str] = []
        for session_id in session_ids:
            key = ("spending", session_id)
            if key in seen:
                row = seen[key]
                if row is not None:
                    found[session_id] = row
            else:
                missing.append(session_id)
        if missing:
            rows = self._select(missing)
            for session_id in missing:
                seen["spending", session_id] = row = rows.get(session_id)
                if row is not None:
                    found[session_id] = row
        return found

    def _select(self, session_ids: Sequence[str]) -> dict[str, SpendingRecord]:
        marks = ",".join("?" * len(session_ids))
        sql = rooted(f"SELECT {_COLUMNS} FROM spending WHERE {{root}}session_id IN ({marks})")
        root = self._db.roots.common(session_ids)
        rows = self._db.conn.execute(*pick(sql, root, tuple(session_ids))).fetchall()
        return {row[0]: SpendingRecord(*row) for row in rows}

    def _written(self, session_ids: Sequence[str]) -> None:
        """The group's reads forget rows about to change (read again when next asked for)."""
        seen = self._db.reads()
        if seen:
            for session_id in session_ids:
                seen.pop(("spending", session_id), None)

    def charge(
        self,
        lineage: Sequence[str],
        turns: int,
        spawns: int,
        tokens_in: int,
        tokens_out: int,
        cost: int,
    ) -> None:
        """Charge the first session of `lineage` (its own) and all of it (its subtree's sums),
        held with the group's next statement (storage/deferred.py): nothing reads its answer,
        and the group's reads of these rows are brought up to date."""
        db = self._db
        spent = tuple(
            [  # saturated(), inlined: a turn's end charges this
                ceiling if amount > ceiling else amount
                for amount, ceiling in zip(
                    (turns, spawns, tokens_in, tokens_out, cost), CEILINGS, strict=True
                )
            ]
        )
        none = (0, 0, 0, 0, 0)
        db.roots.lineage(lineage)
        root = db.roots.root(lineage[0]) if lineage else None
        for i, session_id in enumerate(lineage):  # a handful: trees are shallow
            row = (session_id, *(spent if i == 0 else none), *spent)
            db.defer(*pick_insert(_CHARGE_SQL, root, session_id, row))
        seen = db.reads()
        if seen:
            for i, session_id in enumerate(lineage):
                key = ("spending", session_id)
                if key in seen:  # the row as the charge leaves it
                    seen[key] = _charged(session_id, seen[key], spent if i == 0 else none, spent)

    def set_limits(
        self,
        session_id: str,
        max_turns: int | None,
        max_spawns: int | None,
        max_tokens: int | None,
        max_cost: int | None,
        deadline: float | None,
    ) -> None:
        db = self._db
        db.begin()
        self._written((session_id,))
        row = (session_id, max_turns, max_spawns, max_tokens, max_cost, deadline)
        db.conn.execute(*pick_insert(_SET_LIMITS_SQL, db.roots.root(session_id), session_id, row))

    def set_close_policy(self, session_id: str, policy: str | None) -> None:
        db = self._db
        db.begin()
        self._written((session_id,))
        root = db.roots.root(session_id)
        db.conn.execute(*pick_insert(_CLOSE_POLICY_SQL, root, session_id, (session_id, policy)))

    def set_stopped(self, session_id: str, stopped: bool) -> None:
        db = self._db
        db.begin()
        self._written((session_id,))
        row = (session_id, int(stopped))
        db.conn.execute(*pick_insert(_STOPPED_SQL, db.roots.root(session_id), session_id, row))
