"""The click commands: `subagentd [serve]`, `demo`, `inspect`, `watch`, `replay`, `schema`, `stats`,
`prune`, `tool`, `mcp`, `render`; `detached list|stop` and `a2a` come from their own modules."""

from __future__ import annotations

import sys
from typing import Any, cast

import click

import subagentd
from subagentd.cli.a2a import a2a
from subagentd.cli.detached_servers import detached
from subagentd.cli.group import DESCRIPTION, DefaultGroup, effective
from subagentd.cli.options import (
    Duration,
    database_option,
    global_options,
    logging_options,
    option,
    replayed_serve_options,
    serve_arguments,
    serve_options,
)
from subagentd.cli.serve_options import ServeOptions
from subagentd.cli.spec import Spec
from subagentd.cli.table import VERSION, default_database

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=DefaultGroup, context_settings=CONTEXT, help=DESCRIPTION, commands=[detached, a2a])
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
    ctx.exit(serving.serve(cast(ServeOptions, options)))


@cli.command(context_settings=CONTEXT)
@database_option(
    "new database file to keep for `subagentd inspect`  [default: a temporary one, removed]"
)
@option(
    "--record",
    metavar="DIR",
    help="write each subagentd's session to DIR/demo-N.jsonl (see `subagentd replay`)",
)
@logging_options
@click.pass_context
def demo(ctx: click.Context, /, db: str | None, record: str | None, **_: Any) -> None:
    """Watch a scripted host drive a real subagentd (no model, no network)."""
    from subagentd.cli import demo as demo_module

    ctx.exit(demo_module.run(effective(ctx, "db"), record))


@cli.command(context_settings=CONTEXT)
@click.argument("agent_id", required=False, metavar="[AGENT_ID]")
@database_option(
    "SQLite database path or PostgreSQL URL (read-only)  [default: the state directory's]"
)
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
    if html is not None:
        from subagentd.view import page

        ctx.exit(page.run(path, agent_id, html))
    from subagentd.view import inspect as inspecting

    ctx.exit(inspecting.run(path, agent_id, as_json=as_json))


@cli.command(context_settings=CONTEXT)
@click.argument("root", required=False, metavar="[ROOT]")
@database_option(
    "SQLite database path or PostgreSQL URL (read-only)  [default: the state directory's]"
)
@option("--once", is_flag=True, help="print one frame and exit (for scripts)")
@logging_options
@click.pass_context
def watch(ctx: click.Context, /, root: str | None, once: bool, **_: Any) -> None:
    """Watch the tree (or the one below ROOT) live beside a running server (needs rich)."""
    from subagentd.view import watch as watching

    path = effective(ctx, "db") or default_database()
    ctx.exit(watching.run(path, root, once))


@cli.command(context_settings=CONTEXT)
@click.argument("scripts", nargs=-1, required=True, metavar="SCRIPT.jsonl...")
@click.option(
    "--update",
    is_flag=True,
    help="rewrite each script's expectations from what was received, keeping its placeholders",
)
@click.option("--junit", metavar="FILE", help="also write the results as JUnit XML to FILE")
@click.option(
    "--timeout",
    type=Duration(Spec("--timeout", "duration", 10.0, "", low=0, low_open=True)),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="how long an expect waits for its frame",
)
@click.option(
    "--db",
    metavar="PATH",
    help="database of the subagentd each script runs against; a file is shared by the scripts,"
    " in order  [default: :memory:, a new one per script]",
)
@replayed_serve_options
@click.pass_context
def replay(
    ctx: click.Context,
    /,
    scripts: tuple[str, ...],
    update: bool,
    junit: str | None,
    timeout: float,
    db: str | None,
    **_: Any,
) -> None:
    """Replay transcripts, each against a fresh subagentd.

    Each SCRIPT.jsonl (format: docs/scripts.md) runs against its own `subagentd serve`, given
    the serve options below; the first frame that differs stops it with its step and a diff."""
    from subagentd.cli.replaying import run_replay

    database = db or (ctx.parent.params.get("db") if ctx.parent is not None else None)
    ctx.exit(
        run_replay(
            scripts,
            serve_arguments(ctx),
            db=database or ":memory:",
            timeout=timeout,
            update=update,
            junit=junit,
        )
    )


@cli.command(context_settings=CONTEXT)
@click.pass_context
def schema(ctx: click.Context, /) -> None:
    """Print the OpenRPC document of the wire protocol (JSON) to stdout."""
    from subagentd.server.openrpc import render

    sys.stdout.buffer.write(render())
    sys.stdout.flush()


@cli.command(context_settings=CONTEXT)
@database_option(
    "SQLite database path or PostgreSQL URL (read-only)  [default: the state directory's]"
)
@logging_options
@click.pass_context
def stats(ctx: click.Context, /, **_: Any) -> None:
    """Print a database's figures as JSON: sessions by status, queues, size (see server/stats)."""
    from subagentd.cli.operator import print_stats

    path = effective(ctx, "db") or default_database()
    ctx.exit(print_stats(path))


@cli.command(context_settings=CONTEXT)
@option(
    "--older-than",
    type=Duration(Spec("--older-than", "duration", None, "", low=0, bare="")),
    required=True,
    help="prune trees settled and untouched this long, with its unit: 30d, 12h, 90m, 45s, 2w",
)
@option(
    "--dry-run", is_flag=True, help="list each tree that would go and the bytes; delete nothing"
)
@database_option("SQLite database path or PostgreSQL URL  [default: the state directory's]")
@logging_options
@click.pass_context
def prune(ctx: click.Context, /, older_than: float, dry_run: bool, **_: Any) -> None:
    """Delete the events and messages of trees settled and untouched for --older-than."""
    from subagentd.cli.operator import run_prune

    path = effective(ctx, "db") or default_database()
    ctx.exit(run_prune(path, older_than, dry_run))


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

    from subagentd.message_fences import RENDER_GUIDE, check_messages, render_messages

    if guide:
        click.echo(RENDER_GUIDE)
        return
    try:
        value = json.loads(sys.stdin.read())
        if isinstance(value, dict) and "messages" not in value:
            raise ValueError("an object without `messages`")
        messages = value["messages"] if isinstance(value, dict) else value
        text = render_messages(check_messages(messages))
    except ValueError as exc:  # not JSON, or not messages (which one and why)
        click.echo(f"subagentd render: stdin is not a turn or a list of messages ({exc})", err=True)
        ctx.exit(2)
    click.echo(text)


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
