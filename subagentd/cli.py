"""Command line: argument parsing and wiring only (storage into core into server)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import threading
import time

import subagentd

DESCRIPTION = """\
subagentd - a subagent control plane served as a sidecar over stdin/stdout.

A host program spawns `subagentd` and speaks JSON-RPC 2.0 to it (one JSON value per line, or
LSP Content-Length frames). subagentd keeps sessions and inboxes in SQLite, schedules every
agent's turns, authorizes send_message / interrupt_agent / list_agents / report by lineage, and
serves the same four tools to MCP clients (tools/list, tools/call). Logs go to stderr only.
"""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default="./subagentd.db",
        help="SQLite database path, or :memory: (default: %(default)s)",
    )
    parser.add_argument(
        "--framing",
        choices=["auto", "ndjson", "lsp"],
        default="auto",
        help="wire framing; auto detects LSP from a leading Content-Length header (default: %(default)s)",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=positive_int,
        default=16 * 1024 * 1024,
        help="largest accepted frame; longer ones are answered -32600 (default: %(default)s)",
    )
    parser.add_argument(
        "--durability",
        choices=["normal", "full"],
        default="normal",
        help="normal survives a process crash, full also survives power loss (default: %(default)s)",
    )
    parser.add_argument(
        "--report-delivery",
        choices=["wakeup", "quiet"],
        default="wakeup",
        help="how reports reach a parent: its next turn, or injected quietly (default: %(default)s)",
    )
    parser.add_argument(
        "--max-depth",
        type=positive_int,
        default=8,
        help="deepest spawn allowed (default: %(default)s)",
    )
    parser.add_argument(
        "--interrupt-grace",
        type=float,
        default=10.0,
        help="seconds before an interrupted turn the host did not end is force-ended (default: %(default)s)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=5.0,
        help="seconds to finish in-flight replies at shutdown (default: %(default)s)",
    )
    parser.add_argument(
        "--report-rate",
        type=int,
        default=0,
        metavar="N",
        help="report wakeups per child per minute; further reports reach the parent quietly"
        " (agent/inject) instead of starting turns; 0 means no bound (default: %(default)s)",
    )
    parser.add_argument(
        "--idempotency-retention",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="days an idempotency key and its result are kept (default: %(default)s)",
    )
    parser.add_argument(
        "--lease-ttl",
        type=float,
        default=15.0,
        help="seconds another process sharing --db waits after our last heartbeat before taking over"
        " our live sessions (default: %(default)s)",
    )
    parser.add_argument(
        "--caller",
        default=None,
        metavar="AGENT_ID",
        help="caller of MCP tools/call requests that carry no _meta caller",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default: %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="stderr log format (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="subagentd",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"subagentd {subagentd.__version__} (protocol {subagentd.PROTOCOL})",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "serve", help="serve JSON-RPC on stdin/stdout (the default command)"
    )
    add_serve_options(serve)
    commands.add_parser(
        "schema", help="print the OpenRPC document of the wire protocol (JSON) to stdout"
    )
    demo = commands.add_parser(
        "demo", help="watch a scripted host drive a real subagentd (no model, no network)"
    )
    demo.add_argument(
        "--db",
        default=None,
        help="new database file to keep for `subagentd inspect` (default: a temporary one, removed)",
    )
    inspect = commands.add_parser(
        "inspect", help="show the sessions of a database as a tree, or one agent's transcript"
    )
    inspect.add_argument("--db", required=True, help="SQLite database path (opened read-only)")
    inspect.add_argument("agent_id", nargs="?", metavar="AGENT_ID", help="show this agent")
    inspect.add_argument("--json", action="store_true", help="print machine-readable JSON")
    return parser


COMMANDS = ("serve", "schema", "demo", "inspect")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["serve", *argv]  # `subagentd [options]` serves
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "schema":
        return schema()
    if args.command == "demo":
        from subagentd import demo

        return demo.run(args.db)
    if args.command == "inspect":
        from subagentd import inspect

        return inspect.run(args.db, args.agent_id, as_json=args.json)
    raise SystemExit(f"unknown command {args.command}")


def schema() -> int:
    from subagentd.server.openrpc import render

    sys.stdout.buffer.write(render())
    sys.stdout.flush()
    return 0


def open_default_caller(service, agent_id: str) -> None:
    """`--caller` names the session MCP clients act as: make it live (creating a root if new)."""
    from subagentd.errors import SubagentdError
    from subagentd.schema.host import OpenParams

    try:
        service.open(OpenParams(agent_id=agent_id))
    except SubagentdError as exc:
        logging.getLogger("subagentd").warning(
            "--caller %s was not opened: %s", agent_id, exc.message
        )


def serve(args: argparse.Namespace) -> int:
    """Open the database, then answer the handshake while the dispatcher loads (see prelude)."""
    for signum in (signal.SIGTERM, signal.SIGINT):  # until the server's own handlers take over
        signal.signal(signum, _exit_at_once)
    from subagentd.server.prelude import divert_stdout  # not transport: that imports anyio

    out_fd = divert_stdout()
    configure_logging(args.log_level, args.log_format)

    from subagentd.storage.opening import DatabaseRefusedError, open_database

    try:
        opened = open_database(args.db, durability=args.durability)
    except DatabaseRefusedError as exc:
        logging.getLogger("subagentd").error("cannot start: %s", exc)
        return 1

    from subagentd.core.settings import Settings
    from subagentd.server.envelope import Session
    from subagentd.server.framing import FrameReader
    from subagentd.server.prelude import Started, answer_handshake
    from subagentd.storage.leases import new_owner, owner_alive

    settings = Settings(
        report_delivery=args.report_delivery,
        max_depth=args.max_depth,
        interrupt_grace=args.interrupt_grace,
        report_rate=args.report_rate,
        idempotency_retention=args.idempotency_retention,
        owner=new_owner(),
        owner_alive=owner_alive,
        lease_ttl=args.lease_ttl,
    )
    loaded: dict[str, object] = {}
    loader = threading.Thread(target=_load, args=(opened, args, settings, loaded), daemon=True)
    loader.start()
    started = Started(FrameReader(args.framing, args.max_frame_bytes), Session())
    answer_handshake(0, out_fd, started, settings)
    loader.join()
    error = loaded.get("error")
    if isinstance(error, DatabaseRefusedError):  # e.g. a newer subagentd migrated it meanwhile
        logging.getLogger("subagentd").error("cannot start: %s", error)
        return 1
    if error is not None:
        logging.getLogger("subagentd").error(
            "cannot start: %s (database %s)",
            error,
            args.db,
            exc_info=error,  # type: ignore[arg-type]
        )
        return 1
    service = loaded["service"]

    import anyio

    from subagentd.server.connection import Connection
    from subagentd.server.transport import FdReader, FdWriter

    connection = Connection(
        service,  # type: ignore[arg-type]
        FdReader(0),
        FdWriter(out_fd),
        default_caller=args.caller,
        grace=args.shutdown_grace,
        started=started,
    )
    # Everything loaded so far lives as long as the process: the cycle collector need not visit
    # it again (full collections then scan only what requests allocate).
    gc.freeze()
    try:
        anyio.run(connection.serve)
    finally:
        service.store.close()  # type: ignore[attr-defined]
        for fd in (0, out_fd):  # the fds' flags are shared with whoever started us
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass
    logging.getLogger("subagentd").info("stopped")
    return 0


def _load(opened, args: argparse.Namespace, settings, loaded: dict[str, object]) -> None:
    """The slow part of start-up: migrations, crash recovery, the dispatcher's imports."""
    try:
        from subagentd.core.service import Service
        from subagentd.server import connection  # noqa: F401  (imports jsonrpcserver, anyio)
        from subagentd.storage.database import SqliteStore

        store = SqliteStore(opened)
        service = Service(store, emit=lambda method, params: None, timers=None, settings=settings)  # type: ignore[arg-type]
        with service.transaction():
            recovered = service.recover()
            if args.caller:
                open_default_caller(service, args.caller)
        service.commit()
        if recovered:
            logging.getLogger("subagentd").warning(
                "recorded %d turn(s) left open by a crash", recovered
            )
        loaded["service"] = service
    except BaseException as exc:  # re-raised in the main thread
        loaded["error"] = exc


def _exit_at_once(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT before the server is up: nothing was acknowledged that is not committed,
    so exit 0 now. Not SystemExit: finalizing the interpreter while the loader thread is still
    importing can crash it (a segfault, seen in 5 of 150 runs)."""
    logging.getLogger("subagentd").info(
        "received %s during start-up: exiting", signal.Signals(signum).name
    )
    os._exit(0)
