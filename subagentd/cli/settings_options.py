"""The core `Settings` a `subagentd serve` process runs with, from its command-line options."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from subagentd.core.clock import SYSTEM, ManualClock
from subagentd.core.settings import Settings, served_tools

if TYPE_CHECKING:
    from subagentd.cli.serve_options import ServeOptions

log = logging.getLogger("subagentd")

QUOTA_NAMES = (
    "max_children",
    "max_live_per_root",
    "max_live",
    "max_queued",
    "max_text_bytes",
    "max_label_bytes",
    "report_budget",
    "max_db_bytes",
    "max_tasks",
)
BUDGET_NAMES = (  # a new tree's budget (core/budgets.py)
    "tree_max_turns",
    "tree_max_spawns",
    "tree_max_tokens",
    "tree_max_cost",
    "tree_max_seconds",
)


def spawn_tool_served(options: ServeOptions) -> bool:
    """--spawn-tool: on, off, or auto (on exactly when a turn runner runs the children's turns)."""
    choice = options.get("spawn_tool", "auto")
    return choice == "on" or (choice == "auto" and bool(options.get("runner")))


def settings_from(options: ServeOptions) -> Settings:
    """The rules' settings: limits, quotas, a new tree's budget, the served tools, the clock."""
    table: Mapping[str, Any] = options  # the quotas and budgets by their names in the table
    return Settings(
        report_delivery=options["report_delivery"],
        max_depth=options["max_depth"],
        interrupt_grace=options["interrupt_grace"],
        report_rate=options["report_rate"],
        idempotency_retention=options["idempotency_retention"],
        lease_ttl=options["lease_ttl"],
        lock_wait=options["lock_wait_ms"] / 1000,
        tools=served_tools(
            options["tools"], spawn_tool_served(options), options.get("ask_user") == "on"
        ),
        report_window=options["report_window"],
        clock=_clock(options.get("clock", "system")),
        **{name: table[name] for name in QUOTA_NAMES},
        **{name: table[name] for name in BUDGET_NAMES},
        cost_currency=options.get("cost_currency") or "",
        question_timeout=question_timeout(options),
        a2a_agents=tuple(name for name, _ in options.get("a2a_agent") or ()),
    )


def question_timeout(options: ServeOptions) -> float:
    """--question-timeout, or its older name --acp-permission-timeout when that is given."""
    older = options.get("acp_permission_timeout")
    return float(older if older is not None else options.get("question_timeout", 600.0))


def _clock(choice: str) -> Any:
    """--clock: the system's, or (tests) a manual clock that moves only by clock/advance."""
    if choice != "manual":
        return SYSTEM
    log.warning("--clock manual: time stands still until the host calls clock/advance (tests only)")
    return ManualClock()
