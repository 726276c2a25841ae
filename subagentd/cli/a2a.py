"""`subagentd a2a`: the command, its settings checked (one `cannot start:` line each), then the
A2A face served (subagentd/a2a/)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from subagentd.cli.group import effective
from subagentd.cli.options import (
    A2A_LEAVES_OUT,
    a2a_serve_options,
    database_option,
    logging_options,
    option,
    serve_arguments,
)
from subagentd.cli.table import default_database

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CONTEXT)
@option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="where to serve A2A (port 0: any free one; the URL is printed); an address that is"
    " not loopback needs --token-file",
)
@click.option(
    "--caller",
    "root",
    required=True,
    metavar="ROOT",
    help="the root whose children are the tasks (opened, or created, as serve --caller does)",
)
@option(
    "--token-file",
    metavar="FILE",
    help="a bearer token every request but the agent card must carry; the file must be mode"
    " 0600, and is made (0600) with a new token when it does not exist",
)
@option(
    "--max-body-bytes",
    type=click.IntRange(1024),
    default=1 << 20,
    show_default=True,
    help="bytes of one request body",
)
@option(
    "--max-streams",
    type=click.IntRange(1),
    default=32,
    show_default=True,
    help="SSE streams open at once",
)
@option(
    "--max-tasks-per-client",
    type=click.IntRange(1),
    default=16,
    show_default=True,
    help="working tasks one client address may have started",
)
@database_option("SQLite database path or PostgreSQL URL  [default: the state directory's]")
@logging_options
@a2a_serve_options
@click.pass_context
def a2a(
    ctx: click.Context,
    /,
    listen: str,
    root: str,
    token_file: str | None,
    max_body_bytes: int,
    max_streams: int,
    max_tasks_per_client: int,
    **_: Any,
) -> None:
    """Serve one root's children to A2A clients (A2A 1.0, JSON-RPC over HTTP; docs/a2a.md).

    Each task is a subagent of ROOT, run by a `subagentd serve --caller ROOT` this command
    starts with the serve options below: --runner (required) runs the turns, in a background
    process that outlives the face unless --detach off."""
    ctx.exit(
        run_a2a(
            listen,
            effective(ctx, "db") or default_database(),
            root,
            serve_arguments(ctx, A2A_LEAVES_OUT),
            token_file,
            (max_body_bytes, max_streams, max_tasks_per_client),
        )
    )


def run_a2a(
    listen: str,
    db: str,
    root: str,
    serve_args: Sequence[str],
    token_file: str | None,
    quotas: tuple[int, int, int],
) -> int:
    from subagentd.extras import missing

    line = missing("a2a", "subagentd a2a")
    if line is not None:
        print(f"cannot start: {line}", file=sys.stderr)
        return 1  # as every command a missing extra stops
    import anyio

    from subagentd.a2a.app import CannotStart, Settings, parse_listen, read_token, serve
    from subagentd.a2a.handler import Quotas

    if "--runner" not in serve_args:
        print(
            "cannot start: subagentd a2a needs --runner: the face runs no model of its own,"
            " and its subagents' turns run with --runner (docs/a2a.md)",
            file=sys.stderr,
        )
        return 1
    if "--detach" not in serve_args:  # what the face acknowledged outlives the face (docs/a2a.md)
        serve_args = [*serve_args, "--detach", "on"]
    try:
        where = parse_listen(listen)
        token = read_token(token_file, where)
        settings = Settings(where, db, root, serve_args, token, Quotas(*quotas))
        return anyio.run(serve, settings)
    except CannotStart as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
