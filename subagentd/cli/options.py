"""Every command-line option in one table: its type and range, its help, its SUBAGENTD_* variable."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

MAX_DEPTH_CAP = 64  # a deeper chain costs quadratic storage (each path holds its ancestors')
TOOL_NAMES = ("send_message", "interrupt_agent", "list_agents", "report")  # core/settings.py's

# (option, default, help) of each quota: SECURITY.md explains them; 0 means no bound.
QUOTAS = (
    ("--max-children", 64, "live children per parent"),
    ("--max-live-per-root", 256, "live agents in one tree"),
    ("--max-live", 10_000, "live agents in this process"),
    ("--max-queued", 1_000, "waiting messages per inbox"),
    ("--max-text-bytes", 256 * 1024, "bytes per message, prompt, report, output or descriptor"),
    ("--max-label-bytes", 1024, "bytes per label"),
    ("--report-budget", 1024 * 1024, "report bytes per child per --report-window"),
    ("--max-db-bytes", 0, "database size past which model-driven writes are refused"),
)


def env_name(option: str) -> str:
    """The variable that sets an option's default: --max-depth -> SUBAGENTD_MAX_DEPTH."""
    return "SUBAGENTD_" + option[2:].upper().replace("-", "_")


def option(name: str, **kwargs: Any) -> Callable[[F], F]:
    """A click option that also reads its SUBAGENTD_* variable (the command line wins)."""
    return click.option(name, envvar=env_name(name), show_envvar=True, **kwargs)


def default_database() -> str:
    """$XDG_STATE_HOME/subagentd/subagentd.db, else ~/.local/state/subagentd/subagentd.db."""
    state = os.environ.get("XDG_STATE_HOME") or ""
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return str(base / "subagentd" / "subagentd.db")


class ToolSet(click.ParamType):
    """--tools: a comma-separated subset of the four tools, checked, in canonical order."""

    name = "NAMES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        names = {part.strip() for part in str(value).split(",") if part.strip()}
        unknown = sorted(names.difference(TOOL_NAMES))
        if unknown or not names:
            self.fail(
                f"unknown tool(s) {', '.join(unknown) or '(none given)'};"
                f" choose from {', '.join(TOOL_NAMES)}",
                param,
                ctx,
            )
        return tuple(name for name in TOOL_NAMES if name in names)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Duration(click.ParamType):
    """A length of time such as 30d, 12h, 90m or 45s (a bare number is seconds)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration such as 30d, 12h, 90m or 45s", param, ctx)
        return float(match[1]) * _UNITS[match[2] or "s"]


def database_option(help_text: str) -> Callable[[F], F]:
    return option("--db", default=None, metavar="PATH", help=help_text)


SERVE_DB_HELP = (
    "SQLite database path, or :memory: [default: $XDG_STATE_HOME/subagentd/subagentd.db, else"
    " ~/.local/state/subagentd/subagentd.db]"
)


def logging_options(f: F) -> F:
    """--log-level and --log-format: accepted before or after the command."""
    f = option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default=None,
        help="stderr log format  [default: text]",
    )(f)
    return option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"]),
        default=None,
        help="stderr log level; debug logs one line per request  [default: info]",
    )(f)


def serve_options(f: F) -> F:
    """The options of `serve` (and of a bare `subagentd`), in the order --help lists them."""
    quotas = [
        option(name, type=click.IntRange(min=0), default=default, show_default=True, help=what)
        for name, default, what in QUOTAS
    ]
    decorators = [
        option(
            "--framing",
            type=click.Choice(["auto", "ndjson", "lsp"]),
            default="auto",
            show_default=True,
            help="wire framing; auto detects LSP from a leading Content-Length header",
        ),
        option(
            "--max-frame-bytes",
            type=click.IntRange(min=1),
            default=16 * 1024 * 1024,
            show_default=True,
            help="largest accepted frame; longer ones are answered -32600",
        ),
        option(
            "--durability",
            type=click.Choice(["normal", "full"]),
            default="normal",
            show_default=True,
            help="normal survives a process crash, full also survives power loss",
        ),
        option(
            "--report-delivery",
            type=click.Choice(["wakeup", "quiet"]),
            default="wakeup",
            show_default=True,
            help="how reports reach a parent: its next turn, or injected quietly",
        ),
        option(
            "--max-depth",
            type=click.IntRange(1, MAX_DEPTH_CAP),
            default=8,
            show_default=True,
            help=f"deepest spawn allowed, 1 to {MAX_DEPTH_CAP}",
        ),
        option(
            "--interrupt-grace",
            type=click.FloatRange(min=0),
            default=10.0,
            show_default=True,
            help="seconds before an interrupted turn the host did not end is force-ended",
        ),
        option(
            "--shutdown-grace",
            type=click.FloatRange(min=0),
            default=5.0,
            show_default=True,
            help="seconds to finish in-flight replies at shutdown",
        ),
        option(
            "--report-rate",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            metavar="N",
            help="report wakeups per child per minute; further reports reach the parent quietly"
            " (agent/inject) instead of starting turns; 0 means no bound",
        ),
        option(
            "--idempotency-retention",
            type=click.FloatRange(min=0),
            default=7.0,
            show_default=True,
            metavar="DAYS",
            help="days an idempotency key and its result are kept",
        ),
        option(
            "--lease-ttl",
            type=click.FloatRange(min=0, min_open=True),
            default=15.0,
            show_default=True,
            help="seconds this process's leases last unless renewed (a thread renews them every"
            " third of it); a process stalled longer loses its live sessions to another process"
            " sharing --db",
        ),
        option(
            "--tools",
            type=ToolSet(),
            default=None,
            help="the tools served to models (tools/list, tools/call), comma-separated, e.g."
            " send_message,interrupt_agent,report to leave out list_agents  [default: all four]",
        ),
        option(
            "--caller",
            default=None,
            metavar="AGENT_ID",
            help="caller of MCP tools/call requests that carry no _meta caller; opened at"
            " start-up with its input held (queued, no turn starts) for the MCP client",
        ),
        *quotas,
        option(
            "--report-window",
            type=click.FloatRange(min=0, min_open=True),
            default=600.0,
            show_default=True,
            metavar="SECONDS",
            help="length of one --report-budget window",
        ),
        option(
            "--retention",
            type=Duration(),
            default=None,
            help="at start-up, prune the trees settled and untouched this long (e.g. 30d), as"
            " `subagentd prune --older-than` does  [default: keep everything]",
        ),
        database_option(SERVE_DB_HELP),
        logging_options,
    ]
    for decorator in reversed(decorators):
        f = decorator(f)
    return f
