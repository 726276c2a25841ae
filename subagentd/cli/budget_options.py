"""The serve options that set a new tree's budget (PROTOCOL.md section 12; SECURITY.md says why
each default): part of the serve options table (table.py)."""

from __future__ import annotations

from subagentd.cli.spec import Spec

BUDGETS = (
    Spec(
        "--tree-max-turns",
        "int",
        10_000,
        "turns one tree may run over its life (a new root's budget; agents/budget raises it)",
        low=0,
        metavar="N",
    ),
    Spec(
        "--tree-max-spawns",
        "int",
        1_000,
        "subagents one tree may spawn over its life (a new root's budget)",
        low=0,
        metavar="N",
    ),
    Spec(
        "--tree-max-tokens",
        "int",
        0,
        "input and output tokens one tree may use, as turns/end reports them; 0 means no bound",
        low=0,
        metavar="N",
    ),
    Spec(
        "--tree-max-cost",
        "float",
        0.0,
        "cost one tree may run up, in --cost-currency, as turns/end reports it; 0 means no bound",
        low=0,
        metavar="AMOUNT",
    ),
    Spec(
        "--tree-max-seconds",
        "duration",
        0.0,
        "wall-clock deadline of a new tree, from its first agents/open; 0 means none",
        low=0,
        metavar="SECONDS",
    ),
    Spec(
        "--cost-currency",
        "str",
        None,
        "what the cost that turns report is counted in (e.g. USD), shown with every sum",
        metavar="CODE",
    ),
)
