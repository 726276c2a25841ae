"""Budgets (PROTOCOL.md section 12): what a tree or a child may spend, checked before a turn or a
spawn starts, charged to the agent and every ancestor in the same transaction.

Longer than ~300 lines on purpose: the checks, the charges, the stored limits and what the host
reads of them are one rule's, and read best side by side.

A session's *lineage* is itself and its durable ancestors, nearest first. A turn may start only
while no session of its lineage has spent a budget; a spawn only while its parent's lineage
has a spawn left too. Every read and write goes through the store inside the request's write
transaction, so processes sharing a database (one writer at a time) see one count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from subagentd.core import texts
from subagentd.core.settings import Settings
from subagentd.core.stamps import stamp
from subagentd.core.store import Store
from subagentd.errors import BudgetExceededError
from subagentd.schema.budgets import Budget, BudgetInfo, Held, Spent, Usage
from subagentd.schema.records import SpendingRecord

if TYPE_CHECKING:
    from subagentd.core.registry import LiveAgent, Registry

MICROS = 1_000_000  # cost is stored in millionths of the currency unit


def micros(cost: float | None) -> int:
    return 0 if cost is None else round(cost * MICROS)


def money(value: int) -> str:
    """Millionths as a plain decimal: 2500000 -> "2.5"."""
    whole, part = divmod(value, MICROS)
    return f"{whole}.{part:06d}".rstrip("0").rstrip(".")


@dataclass(slots=True)
class Refusal:
    """The first budget spent in a lineage: which, whose, and the figures the texts name."""

    budget: str
    agent_id: str
    limit: int | str
    spent: int | float
    left: int

    def held(self) -> Held:
        return Held(budget=self.budget, agent_id=self.agent_id)  # type: ignore[arg-type]  # BUDGET_NAMES


class Budgets:
    """The checks, the charges and the stored limits; no state of its own beyond the store."""

    def __init__(self, settings: Settings, registry: Registry, store: Store) -> None:
        self.settings = settings
        self.registry = registry
        self.store = store

    # --- lineage --------------------------------------------------------------------------

    def lineage(self, session_id: str, parent_id: str | None) -> tuple[str, ...]:
        """`session_id` and its durable ancestors, nearest first (cycles in corrupt data end it)."""
        parent = self.registry.get(parent_id)
        if parent is not None and parent.lineage:
            return (session_id, *parent.lineage)
        ids = [session_id]
        seen = {session_id}
        while parent_id is not None and parent_id not in seen:
            ids.append(parent_id)
            seen.add(parent_id)
            record = self.store.get_session(parent_id)
            parent_id = record.parent_id if record is not None else None
        return tuple(ids)

    # --- checks ---------------------------------------------------------------------------

    def refusal(
        self,
        lineage: tuple[str, ...],
        spawn: bool = False,
        extra: Budget | None = None,
        rows: dict[str, SpendingRecord] | None = None,
    ) -> Refusal | None:
        """The first budget of `lineage` that one more turn (and, with `spawn`, one more spawn)
        would pass, nearest agent first; None when it may start. `extra`: a new child's own
        budget (it has spent nothing yet), as lineage[0]'s: lineage[0] is then the child being
        spawned, whose own spawns budget does not count its own creation. `rows`: the lineage's
        spending rows, when the caller has just read them."""
        if rows is None:
            rows = self.store.spending_rows(lineage)
        if not rows and extra is None:
            return None
        clock = self.store.clock()
        if extra is not None:  # a new child's own budget: a row that has spent nothing
            rows = {**rows, lineage[0]: self.virtual(lineage[0], extra, clock)}
        for session_id in lineage:
            row = rows.get(session_id)
            if row is None:
                continue
            if row.stopped:
                return Refusal("stopped", session_id, 0, 0, 0)
            if row.deadline is not None and clock >= row.deadline:
                return Refusal(
                    "deadline", session_id, stamp(row.deadline), round(clock - row.deadline, 3), 0
                )
            if row.max_turns is not None and row.tree_turns + 1 > row.max_turns:
                return Refusal(
                    "turns",
                    session_id,
                    row.max_turns,
                    row.tree_turns,
                    max(0, row.max_turns - row.tree_turns),
                )
            if (
                spawn
                and row.max_spawns is not None
                and row.tree_spawns + 1 > row.max_spawns
                and (extra is None or session_id != lineage[0])  # the new child's own spawn
            ):
                return Refusal(
                    "spawns",
                    session_id,
                    row.max_spawns,
                    row.tree_spawns,
                    max(0, row.max_spawns - row.tree_spawns),
                )
            tokens = row.tree_input + row.tree_output
            if row.max_tokens is not None and tokens >= row.max_tokens:
                return Refusal("tokens", session_id, row.max_tokens, tokens, 0)
            if row.max_cost is not None and row.tree_cost >= row.max_cost:
                return Refusal("cost", session_id, row.max_cost, row.tree_cost, 0)
        return None

    def turn_check(self, lineage: tuple[str, ...]) -> tuple[Refusal | None, float | None]:
        """refusal() of one more turn and the lineage's deadline (deadline()), from one read."""
        rows = self.store.spending_rows(lineage)
        return self.refusal(lineage, rows=rows), _earliest(rows)

    def require(
        self, lineage: tuple[str, ...], spawn: bool = False, extra: Budget | None = None
    ) -> None:
        """Refuse (BudgetExceededError, nothing written yet) when a budget is spent."""
        refusal = self.refusal(lineage, spawn, extra)
        if refusal is not None:
            raise self.error(refusal)

    def error(self, refusal: Refusal) -> BudgetExceededError:
        return BudgetExceededError(
            self.text(refusal),
            refusal.budget,
            refusal.agent_id,
            money(refusal.limit) if refusal.budget == "cost" else refusal.limit,  # type: ignore[arg-type]
            money(int(refusal.spent)) if refusal.budget == "cost" else refusal.spent,
            refusal.left,
        )

    def text(self, refusal: Refusal) -> str:
        """The model-readable refusal (SEMANTICS.md section 11)."""
        shown = texts.shown(refusal.agent_id)
        if refusal.budget == "stopped":
            return texts.BUDGET_STOPPED.format(id=shown)
        if refusal.budget == "deadline":
            return texts.BUDGET_DEADLINE.format(
                id=shown, stamp=refusal.limit, seconds=f"{refusal.spent:g}"
            )
        if refusal.budget == "cost":
            limit, spent = money(int(refusal.limit)), money(int(refusal.spent))
            left = money(max(0, int(refusal.limit) - int(refusal.spent)))
            unit = self.settings.cost_currency or texts.BUDGET_COST_UNIT
        else:
            limit, spent, left = str(refusal.limit), str(refusal.spent), str(refusal.left)
            unit = texts.BUDGET_UNITS[refusal.budget]
        return texts.BUDGET_SPENT.format(
            id=shown, budget=refusal.budget, spent=spent, limit=limit, left=left, unit=unit
        )

    def virtual(self, session_id: str, budget: Budget, clock: float) -> SpendingRecord:
        """A row for a budget not stored yet (a child being spawned)."""
        deadline = None if budget.max_seconds is None else clock + budget.max_seconds
        cost = None if budget.max_cost is None else micros(budget.max_cost)
        return SpendingRecord(
            session_id,
            1,
            budget.max_turns,
            budget.max_spawns,
            budget.max_tokens,
            cost,
            deadline,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        )

    def deadline(self, lineage: tuple[str, ...]) -> float | None:
        """The earliest deadline of `lineage` (wall-clock seconds), or None."""
        return _earliest(self.store.spending_rows(lineage))

    # --- charges --------------------------------------------------------------------------

    def turn_started(self, agent: LiveAgent) -> None:
        self.store.charge(agent.lineage, 1, 0, 0, 0, 0)

    def spawned(self, parent_lineage: tuple[str, ...]) -> None:
        self.store.charge(parent_lineage, 0, 1, 0, 0, 0)

    def used(self, lineage: tuple[str, ...], usage: Usage) -> None:
        tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
        cost = micros(usage.cost)
        if tokens_in or tokens_out or cost:
            self.store.charge(lineage, 0, 0, tokens_in, tokens_out, cost)

    # --- limits ---------------------------------------------------------------------------

    def set(
        self,
        session_id: str,
        budget: Budget,
        above: tuple[str, ...] = (),
        keep: SpendingRecord | None = None,
        remove: tuple[str, ...] = (),
    ) -> None:
        """Store `budget` as the session's own, each limit cut to what `above` (its ancestors)
        have left: a child is never granted more than its parent holds. `keep`: the row whose
        limits the absent fields keep (agents/budget); `remove`: limits dropped."""
        clock = self.store.clock()
        values: dict[str, int | float | None] = {
            "turns": keep.max_turns if keep else None,
            "spawns": keep.max_spawns if keep else None,
            "tokens": keep.max_tokens if keep else None,
            "cost": keep.max_cost if keep else None,
            "deadline": keep.deadline if keep else None,
        }
        given = {
            "turns": budget.max_turns,
            "spawns": budget.max_spawns,
            "tokens": budget.max_tokens,
            "cost": None if budget.max_cost is None else micros(budget.max_cost),
            "deadline": None if budget.max_seconds is None else clock + budget.max_seconds,
        }
        for name, value in given.items():
            if value is not None:
                values[name] = value
        for name in remove:
            values[name] = None
        if above:  # only the limits it is given: the others are its ancestors' as they change
            left = self.left(above)
            for name, most in left.items():
                value = given[name]
                if value is not None and most is not None and value > most:
                    values[name] = most
        self.store.set_limits(
            session_id,
            values["turns"],  # type: ignore[arg-type]
            values["spawns"],  # type: ignore[arg-type]
            values["tokens"],  # type: ignore[arg-type]
            values["cost"],  # type: ignore[arg-type]
            values["deadline"],
        )

    def opened(self, session_id: str, parent_id: str | None, budget: Budget | None) -> None:
        """agents/open's `budget` (the host's: not cut to the ancestors', which still bind). A
        root's first budget takes the serve options' defaults for the limits it does not give."""
        row = self.store.spending_rows([session_id]).get(session_id)
        if parent_id is None and (row is None or not row.limits_set):
            defaults = self.defaults()
            if defaults is not None:
                given = {} if budget is None else msgspec.structs.asdict(budget)
                budget = msgspec.structs.replace(
                    defaults, **{k: v for k, v in given.items() if v is not None}
                )
        if budget is not None:
            self.set(session_id, budget, keep=row)

    def left(self, lineage: tuple[str, ...]) -> dict[str, int | float | None]:
        """What the budgets of `lineage` leave, the tightest of each (None: unbounded)."""
        left: dict[str, int | float | None] = dict.fromkeys(
            ("turns", "spawns", "tokens", "cost", "deadline")
        )

        def tighten(name: str, value: int | float) -> None:
            current = left[name]
            if current is None or value < current:
                left[name] = value

        for row in self.store.spending_rows(lineage).values():
            if row.max_turns is not None:
                tighten("turns", max(0, row.max_turns - row.tree_turns))
            if row.max_spawns is not None:
                tighten("spawns", max(0, row.max_spawns - row.tree_spawns))
            if row.max_tokens is not None:
                tighten("tokens", max(0, row.max_tokens - row.tree_input - row.tree_output))
            if row.max_cost is not None:
                tighten("cost", max(0, row.max_cost - row.tree_cost))
            if row.deadline is not None:
                tighten("deadline", row.deadline)
        return left

    def defaults(self) -> Budget | None:
        """The serve options' budget for a new tree, or None when every one is off."""
        s = self.settings
        budget = Budget(
            max_turns=s.tree_max_turns or None,
            max_spawns=s.tree_max_spawns or None,
            max_tokens=s.tree_max_tokens or None,
            max_cost=s.tree_max_cost or None,
            max_seconds=s.tree_max_seconds or None,
        )
        return budget if budget != Budget() else None

    # --- what the host reads ----------------------------------------------------------------

    def info(self, row: SpendingRecord | None) -> BudgetInfo | None:
        if row is None or not (row.limits_set or row.stopped):
            return None
        return BudgetInfo(
            max_turns=row.max_turns,
            max_spawns=row.max_spawns,
            max_tokens=row.max_tokens,
            max_cost=None if row.max_cost is None else row.max_cost / MICROS,
            deadline=None if row.deadline is None else stamp(row.deadline),
            stopped=True if row.stopped else None,
        )

    def own(self, row: SpendingRecord | None) -> Spent:
        if row is None:
            return self.spent(0, 0, 0, 0, 0)
        return self.spent(
            row.own_turns, row.own_spawns, row.own_input, row.own_output, row.own_cost
        )

    def tree(self, row: SpendingRecord | None) -> Spent:
        if row is None:
            return self.spent(0, 0, 0, 0, 0)
        return self.spent(
            row.tree_turns, row.tree_spawns, row.tree_input, row.tree_output, row.tree_cost
        )

    def spent(self, turns: int, spawns: int, tokens_in: int, tokens_out: int, cost: int) -> Spent:
        return Spent(
            turns=turns,
            spawns=spawns,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost=cost / MICROS,
            currency=self.settings.cost_currency or None,
        )


def _earliest(rows: dict[str, SpendingRecord]) -> float | None:
    deadlines = [r.deadline for r in rows.values() if r.deadline is not None]
    return min(deadlines) if deadlines else None
