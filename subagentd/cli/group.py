"""The command group: `serve` is the default command, global options go before or after it."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

DEFAULT_COMMAND = "serve"
GLOBAL_WITH_VALUE = ("--db", "--log-level", "--log-format")  # the group's own options
GLOBAL_FLAGS = ("--help", "-h", "--version")

DESCRIPTION = """\
A subagent control plane. `subagentd serve --help` lists the serve options.
"""

SHORT_OPTIONS = [
    ("--db PATH", "SQLite file, :memory: or postgresql:// URL"),
    ("--log-level LEVEL", "debug, info (default), warning or error"),
    ("--log-format FORMAT", "text (default) or json"),
    ("--version, -h, --help", "Show the version, or this message, and exit."),
]


class DefaultGroup(click.Group):
    """A click Group that runs `serve` when no command is named, and suggests close commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        index = _first_unclaimed(args)
        if index == len(args) or args[index].startswith("-"):
            args = [*args[:index], DEFAULT_COMMAND, *args[index:]]
        return super().parse_args(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """One line per option (the top-level help fits one screen; `serve --help` and each
        command's --help say more), then the commands."""
        with formatter.section("Options"):
            formatter.write_dl(SHORT_OPTIONS)
        self.format_commands(ctx, formatter)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


def _first_unclaimed(args: list[str]) -> int:
    """The index of the first argument the group's own options do not take (or len(args))."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in GLOBAL_FLAGS or any(arg.startswith(o + "=") for o in GLOBAL_WITH_VALUE):
            index += 1
        elif arg in GLOBAL_WITH_VALUE:
            index += 2
        else:
            return index
    return len(args)


def effective(ctx: click.Context, name: str, default: Any = None) -> Any:
    """A global option's value: given after the command, else before it, else its variable or
    default (the command line wins over SUBAGENTD_*, wherever on the line it was given)."""
    mine = ctx.params.get(name)
    parent = ctx.parent.params.get(name) if ctx.parent is not None else None
    if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return mine
    if ctx.parent is not None and ctx.parent.get_parameter_source(name) is (
        ParameterSource.COMMANDLINE
    ):
        return parent
    for value in (mine, parent):
        if value is not None:
            return value
    return default
