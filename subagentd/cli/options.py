"""The click options, built from the table (table.py): types, ranges, help, SUBAGENTD_* variables."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from subagentd.cli.spec import Spec, read_duration
from subagentd.cli.table import GLOBAL, SERVE, env_name
from subagentd.core.settings import TOOL_NAMES  # stdlib only: cheap at start-up

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # generic in click's newest stubs, not subscriptable at run time in 8.3
    ParamType = click.ParamType[Any]
else:
    ParamType = click.ParamType


def option(name: str, *more: str, **kwargs: Any) -> Callable[[F], F]:
    """A click option that also reads its SUBAGENTD_* variable (the command line wins)."""
    return click.option(name, *more, envvar=env_name(name), show_envvar=True, **kwargs)


class ToolSet(ParamType):
    """--tools: a comma-separated subset of the tools, checked, in canonical order."""

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


class Duration(ParamType):
    """A length of time: 30d, 12h, 90m, 45s, 2w or 500ms, or a bare number in the option's own
    unit (its metavar says which). An option with no such unit (--retention, --older-than)
    refuses a bare number: it would be read as seconds by one person and as days by another."""

    name = "DURATION"

    def __init__(self, spec: Spec | None = None) -> None:
        self.bare = spec.bare if spec else ""
        self.range = (
            click.FloatRange(spec.low, spec.high, min_open=spec.low_open)
            if spec is not None and (spec.low is not None or spec.high is not None)
            else None
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            seconds = read_duration(str(value), self.bare)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return seconds if self.range is None else self.range.convert(seconds, param, ctx)


class RemoteAgent(ParamType):
    """NAME=URL: a name a spawn gives (letters, digits, `.`, `_`, `-`) and an http(s) URL."""

    name = "NAME=URL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        name, sep, url = str(value).partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
            self.fail(f"{value!r}: give NAME=URL, NAME of letters, digits, . _ -", param, ctx)
        if not re.match(r"https?://[^/\s]+", url):
            self.fail(f"{value!r}: the URL must be http:// or https://", param, ctx)
        return (name, url)


def _type(spec: Spec) -> Any:
    if spec.kind == "choice":
        return click.Choice(spec.choices)
    if spec.kind == "int":
        low, high = (None if b is None else int(b) for b in (spec.low, spec.high))
        return click.IntRange(low, high, min_open=spec.low_open)
    if spec.kind == "float":
        return click.FloatRange(spec.low, spec.high, min_open=spec.low_open)
    if spec.kind == "duration":
        return Duration(spec)
    return {"tools": ToolSet(), "agents": RemoteAgent()}.get(spec.kind, str)


def from_spec(spec: Spec, *, global_option: bool = False) -> Callable[[F], F]:
    """The click option of one table row; a global one defaults to None (see group.effective)."""
    shown = spec.default_shown
    if global_option and shown is None and spec.default is not None:
        shown = str(spec.default)
    text = spec.help + (f"  [default: {shown}]" if shown else "")
    return option(
        spec.name,
        type=_type(spec),
        default=None if global_option else spec.default,
        show_default=shown is None and spec.default is not None,
        metavar=spec.metavar,
        help=text,
        multiple=spec.kind == "agents",
    )


def global_options(f: F) -> F:
    """--db, --log-level and --log-format: accepted before or after the command."""
    for spec in reversed(GLOBAL):
        f = from_spec(spec, global_option=True)(f)
    return f


def logging_options(f: F) -> F:
    """--log-level and --log-format alone (commands whose --db means something else)."""
    for spec in reversed(GLOBAL[1:]):
        f = from_spec(spec, global_option=True)(f)
    return f


def database_option(help_text: str) -> Callable[[F], F]:
    return option("--db", default=None, metavar="PATH", help=help_text)


def serve_options(f: F) -> F:
    """The options of `serve` (and of a bare `subagentd`), in the order --help lists them."""
    for spec in reversed(SERVE):
        f = from_spec(spec)(f)
    return global_options(f)


REPLAY_LEAVES_OUT = ("--record", "--framing")  # it records nothing; it speaks NDJSON


A2A_LEAVES_OUT = ("--record", "--framing", "--caller")  # its own --caller; it speaks NDJSON


def replayed_serve_options(f: F, leave_out: tuple[str, ...] = REPLAY_LEAVES_OUT) -> F:
    """The serve options `replay` passes on to each subagentd it starts (no SUBAGENTD_*
    variable: a replay's server is configured by its command line alone)."""
    for spec in reversed(SERVE):
        if spec.name not in leave_out:
            f = click.option(
                spec.name,
                type=_type(spec),
                default=None,
                metavar=spec.metavar,
                help=f"as for serve: {spec.help}",
            )(f)
    return f


def a2a_serve_options(f: F) -> F:
    """The serve options `a2a` passes on to the `subagentd serve` it drives."""
    return replayed_serve_options(f, A2A_LEAVES_OUT)


def serve_arguments(
    ctx: click.Context, leave_out: tuple[str, ...] = REPLAY_LEAVES_OUT
) -> list[str]:
    """The serve options given to `replay` (or `a2a`) as a serve command line (in --help
    order)."""
    argv: list[str] = []
    for spec in SERVE:
        value = ctx.params.get(spec.dest)
        if spec.name in leave_out or value is None:
            continue
        if isinstance(value, tuple):
            value = ",".join(value)
        argv += [spec.name, repr(value) if isinstance(value, float) else str(value)]
    return argv
