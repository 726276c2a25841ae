"""Usage (what turns spent) and budgets (what a tree or a child may spend): PROTOCOL.md section 12."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from subagentd.schema.base import HostParams, Wire

COUNT_MAX = 2**53  # a count reported, and the ceiling where a sum of counts saturates
MONEY_MAX = 1e12  # a cost reported, and the ceiling where a sum of costs saturates
Count = Annotated[int, msgspec.Meta(ge=0, le=COUNT_MAX)]
Money = Annotated[float, msgspec.Meta(ge=0, le=MONEY_MAX)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e9)]

BudgetName = Literal["turns", "spawns", "tokens", "cost", "deadline", "stopped"]
"""What a refusal names in `data.budget`: a limit, or a stopped subtree (agents/stop)."""
BUDGET_NAMES: tuple[str, ...] = ("deadline", "turns", "spawns", "tokens", "cost")
"""The limits, in the order a check reports the first one spent."""


class Usage(Wire, kw_only=True):
    """What one turn used, as the host (turns/end) or a runner's command reports it."""

    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cost: Money | None = None  # in the deployment's currency (--cost-currency)


class Spent(Wire, kw_only=True):
    """Sums: turns started, subagents spawned, tokens and cost reported."""

    turns: int
    spawns: int
    input_tokens: int
    output_tokens: int
    cost: float
    currency: str | None = None


class Budget(Wire, kw_only=True):
    """Limits (absent: none at this level; the ancestors' still bind). `max_tokens` counts input
    and output tokens together; `max_seconds` is a wall-clock deadline counted from when the
    budget is set (a spawn, agents/open, agents/budget)."""

    max_turns: Count | None = None
    max_spawns: Count | None = None
    max_tokens: Count | None = None
    max_cost: Money | None = None
    max_seconds: Seconds | None = None


class BudgetInfo(Wire, kw_only=True):
    """An agent's own budget as stored: its limits and its deadline (a UTC stamp)."""

    max_turns: int | None = None
    max_spawns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    deadline: str | None = None
    stopped: bool | None = None  # agents/stop holds its subtree until agents/resume


class Held(Wire, kw_only=True):
    """Why an agent's queued input starts no turn: the first budget spent, and whose it is."""

    budget: BudgetName
    agent_id: str


class BudgetParams(HostParams, kw_only=True):
    """agents/budget: set (or, with `remove`, drop) limits of an agent's own budget."""

    agent_id: str
    budget: Budget | None = None
    remove: list[Literal["turns", "spawns", "tokens", "cost", "deadline"]] | None = None


class BudgetResult(Wire, kw_only=True):
    agent_id: str
    budget: BudgetInfo
    tree_usage: Spent
    resumed: list[str] | None = None  # agents whose held input started a turn


class StopParams(HostParams, kw_only=True):
    """agents/stop: hold a whole subtree; `queues` parks (default) or cancels what waits."""

    agent_id: str
    queues: Literal["park", "clear"] = "park"


class StopResult(Wire, kw_only=True):
    agent_id: str
    interrupted: list[str]  # agents whose open turn got turn/interrupt (cause stop)
    cleared: int | None = None  # messages cancelled (queues: clear)
