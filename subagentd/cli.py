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


def tool_set(text: str) -> str:
    """--tools: a comma-separated subset of the four tools, checked and put in canonical order."""
    from subagentd.core.settings import TOOL_NAMES

    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names.difference(TOOL_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(TOOL_NAMES)}"
        )
    return ",".join(name for name in TOOL_NAMES if name in names)


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (no bound) or more")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


MAX_DEPTH_CAP = 64  # a deeper chain costs quadratic storage (each path holds its ancestors')


def depth(text: str) -> int:
    value = positive_int(text)
    if value > MAX_DEPTH_CAP:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DEPTH_CAP}")
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
        "--event-loop",
        choices=["asyncio", "uvloop", "trio"],  # server/loops.py
        default="asyncio",
        help="anyio backend the server runs on; uvloop needs the `fast` extra (default: %(default)s)",
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
        type=depth,
        default=8,
        help=f"deepest spawn allowed, 1 to {MAX_DEPTH_CAP} (default: %(default)s)",
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
        help="seconds this process's leases last unless renewed (a thread renews them every third"
        " of it); a process stalled longer loses its live sessions to another process sharing"
        " --db (default: %(default)s)",
    )
    parser.add_argument(
        "--tools",
        type=tool_set,
        default=None,
        metavar="NAMES",
        help="the tools served to models (tools/list, tools/call), comma-separated, e.g."
        " send_message,interrupt_agent,report to leave out list_agents (default: all four)",
    )
    parser.add_argument(
        "--caller",
        default=None,
        metavar="AGENT_ID",
        help="caller of MCP tools/call requests that carry no _meta caller; opened at start-up"
        " with its input held (queued, no turn starts) for the MCP client",
    )
    quotas = parser.add_argument_group(
        "quotas", "bounds on what models can make subagentd do (SECURITY.md); 0 means no bound"
    )
    for option, default, what in QUOTAS:
        quotas.add_argument(
            option, type=count, default=default, metavar="N", help=f"{what} (default: %(default)s)"
        )
    quotas.add_argument(
        "--report-window",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="length of one --report-budget window (default: %(default)s)",
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


def env_defaults(parser: argparse.ArgumentParser) -> None:
    """`SUBAGENTD_<OPTION>` (e.g. SUBAGENTD_MAX_DEPTH) sets an option's default; the command line
    still wins. Values are parsed and checked like the option's own."""
    for action in parser._actions:
        option = next((o for o in action.option_strings if o.startswith("--")), None)
        if option is None or option in ("--help", "--version") or action.nargs == 0:
            continue
        value = os.environ.get("SUBAGENTD_" + option[2:].upper().replace("-", "_"))
        if value is None:
            continue
        if action.choices is not None and value not in action.choices:
            parser.error(
                f"SUBAGENTD_{option[2:].upper().replace('-', '_')}: invalid choice {value!r}"
            )
        action.default = value  # a string default goes through the option's type when parsed


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
        "serve",
        help="serve JSON-RPC on stdin/stdout (the default command)",
        description="Serve JSON-RPC on stdin/stdout. Every option's default can also be set with"
        " SUBAGENTD_<OPTION> (e.g. SUBAGENTD_MAX_DEPTH=4); the command line wins.",
    )
    add_serve_options(serve)
    env_defaults(serve)
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
    """`--caller` names the session MCP clients act as: make it live (creating a root if new).

    An MCP client cannot run turns, so the root's input is held: whatever is queued for it (a crash
    notice, a report) stays queued and no turn starts unannounced (PROTOCOL.md section 5)."""
    from subagentd.errors import SubagentdError
    from subagentd.schema.host import OpenParams

    try:
        service.open(OpenParams(agent_id=agent_id), hold=True)
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
    from subagentd.server.loops import event_loop

    try:
        backend, options = event_loop(args.event_loop)
    except ValueError as exc:
        logging.getLogger("subagentd").error("cannot start: %s", exc)
        return 1

    from subagentd.storage.opening import DatabaseRefusedError, open_database

    try:
        opened = open_database(args.db, durability=args.durability)
    except DatabaseRefusedError as exc:
        logging.getLogger("subagentd").error("cannot start: %s", exc)
        return 1

    from subagentd.core.settings import TOOL_NAMES, Settings
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
        tools=TOOL_NAMES if args.tools is None else tuple(filter(None, args.tools.split(","))),
        report_window=args.report_window,
        **{name: getattr(args, name) for name in (o[2:].replace("-", "_") for o, _, _ in QUOTAS)},
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

    from subagentd.errors import SubagentdError
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
        anyio.run(connection.serve, backend=backend, backend_options=options)
    finally:
        try:
            service.store.close()  # type: ignore[attr-defined]
        except SubagentdError as exc:  # the last commit failed (disk full): said once, not raised
            logging.getLogger("subagentd").error("final commit failed: %s", exc.message)
        for fd in (0, out_fd):  # the fds' flags are shared with whoever started us
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass
    logging.getLogger("subagentd").info("stopped")
    return 0


LOCK_WAIT_MS = 50  # once serving, the longest wait for another process's write lock


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
        store.limit_lock_wait(LOCK_WAIT_MS)  # serving: never stall the event loop on a lock
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
