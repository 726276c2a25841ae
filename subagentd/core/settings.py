"""What the deployment chose (command-line options), and the timer service the server provides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

from subagentd.core.clock import SYSTEM, Clock


class TimerService(Protocol):
    """Deferred callbacks; the server implements it on its event loop."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` after `delay` seconds; returns a function that cancels it."""
        ...


TOOL_NAMES = (
    "send_message",
    "interrupt_agent",
    "list_agents",
    "report",
    "spawn_agent",
    "wait_agents",
    "ask_parent",
    "ask_user",
)  # every tool, in order
# spawn_agent and ask_user: opt-in (--spawn-tool, --ask-user)
DEFAULT_TOOLS = tuple(name for name in TOOL_NAMES if name not in ("spawn_agent", "ask_user"))


def served_tools(
    names: tuple[str, ...] | None, spawn_tool: bool, ask_user: bool = False
) -> tuple[str, ...]:
    """The served set: `--tools` (default all but spawn_agent and ask_user), plus spawn_agent
    with --spawn-tool and ask_user with --ask-user on."""
    chosen = set(DEFAULT_TOOLS if names is None else names)
    if spawn_tool:
        chosen.add("spawn_agent")
    if ask_user:
        chosen.add("ask_user")
    return tuple(name for name in TOOL_NAMES if name in chosen)


class Settings(msgspec.Struct):
    report_delivery: str = "wakeup"  # "wakeup" | "quiet"
    max_depth: int = 8
    interrupt_grace: float = 10.0  # seconds before an interrupted turn is force-ended
    status_events: bool = False
    report_rate: int = (
        0  # report wakeups per child per minute; past it reports arrive quietly (0: no bound)
    )
    idempotency_retention: float = 7.0  # days an idempotency key is kept
    owner: str = ""  # this process's lease owner id ("" mints one)
    lease_ttl: float = 15.0  # seconds a lease outlives its last heartbeat
    lock_wait: float = 5.0  # seconds a write waits for another process's lock (--lock-wait-ms)
    owner_alive: Callable[[str], bool] = lambda owner: True  # is that owner's process still there?
    tools: tuple[str, ...] = DEFAULT_TOOLS  # the served set (--tools, --spawn-tool: served_tools)
    # Quotas (SECURITY.md gives each default and why); 0 means no bound.
    max_children: int = 64  # live children per parent
    max_live_per_root: int = 256  # live agents in one tree (below its topmost live agent)
    max_live: int = 10_000  # live agents in this process
    max_queued: int = 1_000  # waiting (queued or parked) messages per inbox
    max_text_bytes: int = 256 * 1024  # UTF-8 bytes per message, prompt, report, output, descriptor
    max_label_bytes: int = 1024  # UTF-8 bytes per label
    report_budget: int = 1024 * 1024  # report bytes per child per report window
    report_window: float = 600.0  # seconds of one report budget window
    max_db_bytes: int = 0  # database size past which model-driven writes are refused
    max_tasks: int = 1_000  # working MCP tasks one agent asked for (core/tasks.py)
    question_timeout: float = 600.0  # seconds a question waits for its answer (--question-timeout)
    a2a_agents: tuple[
        str, ...
    ] = ()  # the names a spawn's `agent: {a2a: NAME}` may give (--a2a-agent)
    clock: Clock = SYSTEM  # --clock manual: a ManualClock the host advances (tests)
    # Budgets of a new tree (SECURITY.md gives each default and why); 0 means no bound.
    tree_max_turns: int = 10_000  # turns over the tree's life
    tree_max_spawns: int = 1_000  # spawns over the tree's life
    tree_max_tokens: int = 0  # input + output tokens reported
    tree_max_cost: float = 0.0  # cost reported, in --cost-currency
    tree_max_seconds: float = 0.0  # wall-clock deadline from the tree's first open
    cost_currency: str = ""  # what `cost` is counted in (e.g. USD); shown with every sum
