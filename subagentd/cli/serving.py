"""`subagentd serve`: open the database, answer the handshake while the rest loads, then serve."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from typing import Any

import subagentd
from subagentd.cli.logs import configure_logging

log = logging.getLogger("subagentd")

LOCK_WAIT_MS = 50  # once serving, the longest wait for another process's write lock
QUOTA_NAMES = (
    "max_children",
    "max_live_per_root",
    "max_live",
    "max_queued",
    "max_text_bytes",
    "max_label_bytes",
    "report_budget",
    "max_db_bytes",
)
TERMINAL_HINT = (
    "subagentd: serving JSON-RPC on stdin/stdout (one JSON value per line); it is meant to be"
    " spawned by an agent host. Ctrl-D stops it; `subagentd --help` lists the commands.\n"
)


def open_default_caller(service: Any, agent_id: str) -> None:
    """`--caller` names the session MCP clients act as: make it live (creating a root if new).

    An MCP client cannot run turns, so the root's input is held: whatever is queued for it (a crash
    notice, a report) stays queued and no turn starts unannounced (PROTOCOL.md section 5)."""
    from subagentd.errors import SubagentdError
    from subagentd.schema.host_methods import OpenParams

    try:
        service.host.open(OpenParams(agent_id=agent_id), hold=True)
    except SubagentdError as exc:
        log.warning("--caller %s was not opened: %s", agent_id, exc.message)


def spawn_tool_served(options: dict[str, Any]) -> bool:
    """--spawn-tool: on, off, or auto (on exactly when a turn runner runs the children's turns)."""
    choice = options.get("spawn_tool", "auto")
    return choice == "on" or (choice == "auto" and bool(options.get("runner")))


def serve(options: dict[str, Any]) -> int:
    """Open the database, then answer the handshake while the dispatcher loads (see prelude)."""
    for signum in (signal.SIGTERM, signal.SIGINT):  # until the server's own handlers take over
        signal.signal(signum, _exit_at_once)
    from subagentd.server.prelude import divert_stdout  # not transport: that imports anyio

    out_fd = divert_stdout()
    configure_logging(options["log_level"], options["log_format"])
    if os.isatty(0):
        sys.stderr.write(TERMINAL_HINT)
        sys.stderr.flush()
    from subagentd.server.loops import event_loop

    try:
        backend, loop_options = event_loop(options["event_loop"])
    except ValueError as exc:
        log.error("cannot start: %s", exc)
        return 1

    from subagentd.storage.opening import DatabaseRefusedError

    path = options["db"]
    try:
        opened, shown = _open_database(path, options)
    except (DatabaseRefusedError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    log.info("subagentd %s serving on stdin/stdout; database %s", subagentd.__version__, shown)

    from subagentd.cli.running import runner_command

    argv = runner_command(options)
    if isinstance(argv, str):
        log.error("cannot start: %s", argv)
        return 1
    from subagentd.core.settings import Settings, served_tools
    from subagentd.server.envelope import Session
    from subagentd.server.framing import FrameReader
    from subagentd.server.prelude import Started, answer_handshake

    settings = Settings(
        report_delivery=options["report_delivery"],
        max_depth=options["max_depth"],
        interrupt_grace=options["interrupt_grace"],
        report_rate=options["report_rate"],
        idempotency_retention=options["idempotency_retention"],
        lease_ttl=options["lease_ttl"],
        lock_wait=options["lock_wait_ms"] / 1000,
        tools=served_tools(options["tools"], spawn_tool_served(options)),
        report_window=options["report_window"],
        **{name: options[name] for name in QUOTA_NAMES},
    )
    loaded: dict[str, object] = {}
    loader = threading.Thread(target=_load, args=(opened, options, settings, loaded), daemon=True)
    loader.start()
    started = Started(FrameReader(options["framing"], options["max_frame_bytes"]), Session())
    answer_handshake(0, out_fd, started, settings)
    loader.join()
    error = loaded.get("error")
    if isinstance(error, DatabaseRefusedError):  # e.g. a newer subagentd migrated it meanwhile
        log.error("cannot start: %s", error)
        return 1
    if isinstance(error, BaseException):
        log.error("cannot start: %s (database %s)", error, shown, exc_info=error)
        return 1
    service: Any = loaded["service"]

    import anyio

    from subagentd.errors import SubagentdError
    from subagentd.server.connection import Connection
    from subagentd.server.transport import FdReader, FdWriter

    connection = Connection(
        service,
        FdReader(0),
        FdWriter(out_fd),
        default_caller=options["caller"],
        grace=options["shutdown_grace"],
        started=started,
    )
    # Everything loaded so far lives as long as the process: the cycle collector need not visit
    # it again (full collections then scan only what requests allocate).
    main = connection.serve
    if argv is not None:
        from subagentd.cli.running import Running

        main = Running(connection, options, argv).serve
    gc.freeze()
    try:
        anyio.run(main, backend=backend, backend_options=loop_options)
        code = connection.exit_code
    finally:
        try:
            service.store.close()
        except SubagentdError as exc:  # the last commit failed (disk full): said once, not raised
            log.error("final commit failed: %s", exc.message)
        for fd in (0, out_fd):  # the fds' flags are shared with whoever started us
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass
    log.info("stopped")
    return code


def _open_database(path: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The database `--db` names, opened and checked before the handshake: a SQLite file, or a
    PostgreSQL database for a `postgresql://` (or `postgres://`) URL, connected and migrated;
    with how logs name it (a URL without its password)."""
    from subagentd.storage.opening import DatabaseRefusedError
    from subagentd.storage.postgres import is_postgres

    if is_postgres(path):
        if options["retention"] is not None:
            raise DatabaseRefusedError("--retention prunes SQLite databases only")
        from subagentd.storage.postgres.connection import Timeouts
        from subagentd.storage.postgres.store import open_postgres, shown

        timeouts = Timeouts(
            connect=options["db_connect_timeout"],
            statement=options["db_statement_timeout"],
            keepalive=options["db_keepalive"],
        )
        return open_postgres(path, durability=options["durability"], timeouts=timeouts), shown(path)
    from subagentd.storage.opening import open_database

    _make_state_directory(path)
    return open_database(path, durability=options["durability"]), path


def _make_state_directory(path: str) -> None:
    """The default database's directory (the user's state directory) is created, private."""
    from subagentd.cli.table import default_database

    if path == default_database():
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)


def _load(opened: Any, options: dict[str, Any], settings: Any, loaded: dict[str, object]) -> None:
    """The slow part of start-up: migrations, crash recovery, the dispatcher's imports."""
    try:
        from subagentd.core.service import Service
        from subagentd.server import connection  # noqa: F401  (imports jsonrpcserver, anyio)
        from subagentd.storage.opening import OpenedDatabase
        from subagentd.storage.owner_ids import new_owner, owner_alive

        # here, not before the handshake: the handshake needs neither (leases imports socket, uuid)
        settings.owner, settings.owner_alive = new_owner(), owner_alive
        store: Any
        if isinstance(opened, OpenedDatabase):
            from subagentd.storage.database import SqliteStore

            store = SqliteStore(opened)
        else:
            from subagentd.storage.postgres.store import PostgresStore

            store = PostgresStore(opened)
        no_timers: Any = None  # the Connection sets them before anything is timed
        service: Any = Service(
            store, emit=lambda method, params: None, timers=no_timers, settings=settings
        )
        with service.transaction():
            recovered = service.recovery.recover()
            if options["caller"]:
                open_default_caller(service, options["caller"])
        service.commit()
        if options["retention"] is not None:
            _prune_at_start(store, options["retention"])
        store.limit_lock_wait(LOCK_WAIT_MS)  # serving: never stall the event loop on a lock
        if recovered:
            log.warning("recorded %d turn(s) left open by a crash", recovered)
        loaded["service"] = service
    except BaseException as exc:  # re-raised in the main thread
        loaded["error"] = exc


def _prune_at_start(store: Any, retention: float) -> None:
    """--retention: prune what settled and was untouched that long, before serving."""
    from subagentd.storage.prune import prune

    done = prune(store.conn, retention)
    log.info(
        "--retention: pruned %d settled tree(s), %d event(s), %d message(s)",
        done.trees,
        done.events,
        done.messages,
    )


def _exit_at_once(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT before the server is up: nothing was acknowledged that is not committed,
    so exit 0 now. Not SystemExit: finalizing the interpreter while the loader thread is still
    importing can crash it (a segfault, seen in 5 of 150 runs)."""
    log.info("received %s during start-up: exiting", signal.Signals(signum).name)
    os._exit(0)
