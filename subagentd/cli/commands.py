"""The click commands: `subagentd [serve]`, `demo`, `inspect`, `watch`, `schema`, `stats`, `prune`, `tool`, `mcp`,
`render`."""

from __future__ import annotations

import sys
from typing import Any

import click

import subagentd
from subagentd.cli.group import DESCRIPTION, DefaultGroup, effective
from subagentd.cli.options import (
    Duration,
    database_option,
    global_options,
    logging_options,
    option,
    serve_options,
)
from subagentd.cli.table import VERSION, default_database

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=DefaultGroup, context_settings=CONTEXT, help=DESCRIPTION)
@click.version_option(subagentd.__version__, message=VERSION)
@global_options
def cli(db: str | None, log_level: str | None, log_format: str | None) -> None:
    pass


def _logging(ctx: click.Context) -> tuple[str, str]:
    return effective(ctx, "log_level", "info"), effective(ctx, "log_format", "text")


@cli.command(context_settings=CONTEXT)
@click.version_option(subagentd.__version__, message=VERSION)
@serve_options
@click.pass_context
def serve(ctx: click.Context, /, **options: Any) -> None:
    """Serve JSON-RPC on stdin/stdout (the default command)."""
    from subagentd.cli import serving

    options["db"] = effective(ctx, "db") or default_database()
    options["log_level"], options["log_format"] = _logging(ctx)
    ctx.exit(serving.serve(options))


@cli.command(context_settings=CONTEXT)
@database_option(
    "new database file to keep for `subagentd inspect`  [default: a temporary one, removed]"
)
@logging_options
@click.pass_context
def demo(ctx: click.Context, /, db: str | None, **_: Any) -> None:
    """Watch a scripted host drive a real subagentd (no model, no network)."""
    from subagentd import demo as demo_module

    ctx.exit(demo_module.run(effective(ctx, "db")))


@cli.command(context_settings=CONTEXT)
@click.argument("agent_id", required=False, metavar="[AGENT_ID]")
@database_option("SQLite database path (opened read-only)  [default: the state directory's]")
@option("--json", "as_json", is_flag=True, help="print machine-readable JSON")
@option(
    "--html",
    metavar="OUT.html",
    help="write the tree and a timeline as one self-contained HTML page (AGENT_ID: its subtree)",
)
@logging_options
@click.pass_context
def inspect(
    ctx: click.Context, /, agent_id: str | None, as_json: bool, html: str | None, **_: Any
) -> None:
    """Show the sessions of a database as a tree, or one agent's transcript (--html: a page with
    the tree and a timeline)."""
    path = effective(ctx, "db") or default_database()
    _refuse_postgres(ctx, path, "inspect")
    if html is not None:
        from subagentd.view import page

        ctx.exit(page.run(path, agent_id, html))
    from subagentd import inspect as inspecting

    ctx.exit(inspecting.run(path, agent_id, as_json=as_json))


@cli.command(context_settings=CONTEXT)
@click.argument("root", required=False, metavar="[ROOT]")
@database_option("SQLite database path (opened read-only)  [default: the state directory's]")
@option("--once", is_flag=True, help="print one frame and exit (for scripts)")
@logging_options
@click.pass_context
def watch(ctx: click.Context, /, root: str | None, once: bool, **_: Any) -> None:
    """Watch the tree (or the one below ROOT) live beside a running server (needs rich)."""
    from subagentd.view import watch as watching

    path = effective(ctx, "db") or default_database()
    _refuse_postgres(ctx, path, "watch")
    ctx.exit(watching.run(path, root, once))


@cli.command(context_settings=CONTEXT)
@click.pass_context
def schema(ctx: click.Context, /) -> None:
    """Print the OpenRPC document of the wire protocol (JSON) to stdout."""
    from subagentd.server.openrpc import render

    sys.stdout.buffer.write(render())
    sys.stdout.flush()


@cli.command(context_settings=CONTEXT)
@database_option("SQLite database path (opened read-only)  [default: the state directory's]")
@logging_options
@click.pass_context
def stats(ctx: click.Context, /, **_: Any) -> None:
    """Print a database's figures as JSON: sessions by status, queues, size (see server/stats)."""
    from subagentd.cli.operator import print_stats

    path = effective(ctx, "db") or default_database()
    _refuse_postgres(ctx, path, "stats")
    ctx.exit(print_stats(path))


@cli.command(context_settings=CONTEXT)
@option(
    "--older-than",
    type=Duration(),
    required=True,
    help="prune trees settled and untouched this long, e.g. 30d, 12h, 90m",
)
@database_option("SQLite database path  [default: the state directory's]")
@logging_options
@click.pass_context
def prune(ctx: click.Context, /, older_than: float, **_: Any) -> None:
    """Delete the events and messages of trees settled and untouched for --older-than."""
    from subagentd.cli.operator import run_prune

    path = effective(ctx, "db") or default_database()
    _refuse_postgres(ctx, path, "prune")
    ctx.exit(run_prune(path, older_than))


@cli.command(context_settings=CONTEXT)
@click.argument("name", metavar="NAME")
@click.argument("arguments", required=False, default="{}", metavar="[JSON-ARGS]")
@click.option(
    "--caller",
    envvar="SUBAGENTD_AGENT_ID",
    show_envvar=True,
    metavar="AGENT_ID",
    help="the agent to act as: the runner's own (SUBAGENTD_TOKEN proves it)",
)
@click.option("--idempotency-key", metavar="KEY", help="a retry with the same key runs once")
@option("--json", "as_json", is_flag=True, help="print the whole MCP tool result as JSON")
@click.pass_context
def tool(
    ctx: click.Context,
    /,
    name: str,
    arguments: str,
    caller: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Call a tool as the agent of this --runner turn (relayed to the serving subagentd with
    the SUBAGENTD_SOCKET and SUBAGENTD_TOKEN the turn's environment holds)."""
    import os

    from subagentd.cli.tool import call, show

    status, outcome = call(
        name,
        arguments,
        caller,
        os.environ.get("SUBAGENTD_SOCKET"),
        os.environ.get("SUBAGENTD_TOKEN"),
        idempotency_key,
    )
    ctx.exit(show(status, outcome, as_json))


@cli.command(context_settings=CONTEXT)
@click.pass_context
def mcp(ctx: click.Context, /) -> None:
    """Serve this --runner turn's agent's own tools as an MCP stdio server (for the agent CLI
    the turn runs: `claude --mcp-config "$SUBAGENTD_MCP_CONFIG"`, an ACP session's mcpServers)."""
    from subagentd.cli.child_mcp import main

    ctx.exit(main())


@cli.command(context_settings=CONTEXT)
@option("--guide", is_flag=True, help="print the guide for the model's system prompt instead")
@click.pass_context
def render(ctx: click.Context, /, guide: bool) -> None:
    """Render messages for a model with each sender visible (docs/rendering.md): a turn
    (`{messages, ...}`, as a runner's stdin holds it) or a list of messages, as JSON on stdin."""
    import json

    from subagentd.render import RENDER_GUIDE, render_messages

    if guide:
        click.echo(RENDER_GUIDE)
        return
    try:
        value = json.loads(sys.stdin.read())
        messages = value["messages"] if isinstance(value, dict) else value
        text = render_messages(messages)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        click.echo(f"subagentd render: stdin is not a turn or a list of messages ({exc})", err=True)
        ctx.exit(2)
    click.echo(text)


def _refuse_postgres(ctx: click.Context, path: str, command: str) -> None:
    """The operator commands read SQLite files only: a PostgreSQL URL gets one clear line."""
    from subagentd.storage.postgres import is_postgres, sqlite_only

    if is_postgres(path):
        click.echo(sqlite_only(command), err=True)
        ctx.exit(1)


def run(argv: list[str]) -> int:
    """Run the command line through click; the exit status (usage errors are 2)."""
    try:
        status = cli.main(args=argv, prog_name="subagentd", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return status if isinstance(status, int) else 0
