"""`subagentd serve`: open the database, answer the handshake while the rest loads, then serve."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

import subagentd

if TYPE_CHECKING:
    from subagentd.cli.serve_options import ServeOptions
    from subagentd.core.service import Service
    from subagentd.core.settings import Settings
    from subagentd.storage.database import SqliteStore
    from subagentd.storage.opening import OpenedDatabase
    from subagentd.storage.postgres.store import OpenedPostgres, PostgresStore
from subagentd.cli.caller import CallerServedElsewhere, open_default_caller
from subagentd.cli.logs import configure_logging

log = logging.getLogger("subagentd")

LOCK_WAIT_MS = 50  # once serving, the longest wait for another process's write lock
TERMINAL_HINT = (
    "subagentd: serving JSON-RPC on stdin/stdout (one JSON value per line); it is meant to be"
    " spawned by an agent host. Ctrl-D stops it; `subagentd --help` lists the commands.\n"
)


class Loaded:
    """What the loader thread hands the main thread: the service and its store, or why not."""

    def __init__(self) -> None:
        self.service: Service | None = None
        self.store: SqliteStore | PostgresStore | None = None
        self.error: BaseException | None = None


def serve(options: ServeOptions) -> int:
    """Open the database, then answer the handshake while the dispatcher loads (see prelude)."""
    for signum in (signal.SIGTERM, signal.SIGINT):  # until the server's own handlers take over
        signal.signal(signum, _exit_at_once)
    from subagentd.server.handshake import divert_stdout  # not transport: that imports anyio

    configure_logging(options["log_level"], options["log_format"])
    detach = options.get("detach") == "on" and options.get("runner") is not None
    if detach and os.environ.get("_SUBAGENTD_DETACHED") == "1":
        from subagentd.cli.detached import background

        code = background(options)  # fds 0 and 1 become the relay's socketpair
        if code is not None:
            return code
        detach = False
    out_fd = divert_stdout()
    recording = None
    record = options.get("record")
    if record:
        from subagentd.cli.recording import Recording

        try:
            recording = Recording(record, options["max_frame_bytes"], options["framing"])
        except OSError as exc:
            log.error("cannot start: --record %s: %s", record, exc)
            return 1
        out_fd = recording.attach(out_fd)
    if os.isatty(0):
        sys.stderr.write(TERMINAL_HINT)
        sys.stderr.flush()
    from subagentd.cli.running import runner_command
    from subagentd.wire.loops import event_loop

    # Every option is checked before anything is created or "serving" is logged.
    try:
        backend, loop_options = event_loop(options["event_loop"])
    except ValueError as exc:
        log.error("cannot start: %s", exc)
        return 1
    argv = runner_command(options)
    refused = argv if isinstance(argv, str) else _database_refusal(options)
    if refused is None and options.get("a2a_agent"):
        from subagentd.runners.a2a_child import refusal

        refused = refusal(options)
    if refused is not None:
        log.error("cannot start: %s", refused)
        return 1
    if detach:
        from subagentd.cli.detached import front

        return front(options, out_fd)

    from subagentd.storage.opening import DatabaseRefusedError

    path = options["db"]
    try:
        opened, shown = _open_database(path, options)
    except (DatabaseRefusedError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    log.info("subagentd %s serving on stdin/stdout; database %s", subagentd.__version__, shown)
    assert not isinstance(argv, str)
    from subagentd.cli.settings_options import settings_from
    from subagentd.server.handshake import Started, answer_handshake
    from subagentd.wire.framing import FrameReader
    from subagentd.wire.session import Session

    settings = settings_from(options)
    loaded = Loaded()
    loader = threading.Thread(target=_load, args=(opened, options, settings, loaded), daemon=True)
    loader.start()
    started = Started(FrameReader(options["framing"], options["max_frame_bytes"]), Session())
    if not options["caller"]:  # answered while the loader runs
        answer_handshake(0, out_fd, started, settings)
    # --caller: initialize is answered only once the root is known to be served here, so a root
    # another process serves is refused before any handshake succeeds (the one line below)
    loader.join()
    error = loaded.error
    if isinstance(error, DatabaseRefusedError | CallerServedElsewhere):  # one line, no traceback
        log.error("cannot start: %s", error)
        return 1
    from subagentd.errors import SubagentdError

    if isinstance(error, SubagentdError) and type(error) is not SubagentdError:  # e.g. busy
        log.error("cannot start: %s (database %s)", error.message, shown)
        return 1
    if error is not None:
        log.error("cannot start: %s (database %s)", error, shown, exc_info=error)
        return 1
    if options["caller"]:
        answer_handshake(0, out_fd, started, settings)
    import anyio

    from subagentd.server.connection import Connection
    from subagentd.server.handlers import METHODS
    from subagentd.wire.transport import FdReader, FdWriter

    service, store = loaded.service, loaded.store
    assert service is not None and store is not None
    connection = Connection(
        service,
        FdReader(0),
        FdWriter(out_fd),
        locks=store,
        methods=METHODS,
        default_caller=options["caller"],
        grace=options["shutdown_grace"],
        started=started,
    )
    # Everything loaded so far lives as long as the process: the cycle collector need not visit
    # it again (full collections then scan only what requests allocate).
    main = connection.serve
    if argv is not None:
        from subagentd.cli.running import Running

        running = Running(connection, options, argv)
        main = running.serve
    if options.get("a2a_agent"):  # remote children (docs/a2a.md)
        from subagentd.runners.a2a_child import wire

        main = wire(connection, options, main)
    gc.freeze()
    try:
        anyio.run(main, backend=backend, backend_options=loop_options)
        code = connection.exit_code
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):  # stopping already: the last steps finish
            signal.signal(signum, signal.SIG_IGN)
        try:
            service.close()  # the last spans (a bounded wait), the last commit
        except SubagentdError as exc:  # the last commit failed (disk full): said once, not raised
            log.error("final commit failed: %s", exc.message)
        for fd in (0, out_fd):  # the fds' flags are shared with whoever started us
            try:
                os.set_blocking(fd, True)
            except OSError:
                pass
        if recording is not None:
            recording.finish()
    log.info("stopped")
    if options.get("detached_files") is not None:  # --detach's background process
        from subagentd.cli.detached import finished

        finished(options, code)
    return code


def _database_refusal(options: ServeOptions) -> str | None:
    """Why the options cannot serve this kind of database, before it is opened: a PostgreSQL
    URL without psycopg (the `postgres` extra)."""
    from subagentd.storage.postgres import is_postgres

    if not is_postgres(options["db"]):
        return None
    from subagentd.extras import missing

    return missing("postgres", "--db postgresql://…")


def _open_database(path: str, options: ServeOptions) -> tuple[OpenedDatabase | OpenedPostgres, str]:
    """The database `--db` names, opened and checked before the handshake: a SQLite file, or a
    PostgreSQL database for a `postgresql://` (or `postgres://`) URL, connected and migrated;
    with how logs name it (a URL without its password)."""
    from subagentd.storage.postgres import is_postgres

    if is_postgres(path):
        from subagentd.storage.postgres.connection import Timeouts
        from subagentd.storage.postgres.store import open_postgres, shown

        timeouts = Timeouts(
            connect=options["db_connect_timeout"],
            statement=options["db_statement_timeout"],
            keepalive=options["db_keepalive"],
        )
        return open_postgres(path, durability=options["durability"], timeouts=timeouts), shown(path)
    from subagentd.cli.table import default_database
    from subagentd.storage.opening import open_database

    if path == default_database():  # the user's state directory is created, private
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return open_database(path, durability=options["durability"]), path


def _load(
    opened: OpenedDatabase | OpenedPostgres,
    options: ServeOptions,
    settings: Settings,
    loaded: Loaded,
) -> None:
    """The slow part of start-up: migrations, crash recovery, the dispatcher's imports."""
    try:
        from subagentd.core.service import Service
        from subagentd.server import connection  # noqa: F401  (imports jsonrpcserver, anyio)
        from subagentd.storage.opening import OpenedDatabase
        from subagentd.storage.owner_ids import new_owner, owner_alive

        # here, not before the handshake: the handshake needs neither (leases imports socket, uuid)
        settings.owner, settings.owner_alive = new_owner(), owner_alive
        store: SqliteStore | PostgresStore
        if isinstance(opened, OpenedDatabase):
            import time

            from subagentd.storage.database import SqliteStore

            # a manual clock moves leases, not the real time a group holds the lock
            store = SqliteStore(opened, clock=settings.clock.wall, hold_clock=time.monotonic)
        else:
            from subagentd.storage.postgres.store import PostgresStore

            store = PostgresStore(opened, clock=settings.clock.wall)
        service = Service(store, settings)  # the Connection attaches its outlets
        from subagentd.cli.tracing import start_tracing

        start_tracing(service, store)  # before recovery: a recovered turn's span is exported too
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
        loaded.service, loaded.store = service, store
    except BaseException as exc:  # re-raised in the main thread
        loaded.error = exc


def _prune_at_start(store: SqliteStore | PostgresStore, retention: float) -> None:
    """--retention: prune what settled and was untouched that long, before serving."""
    import sqlite3

    from subagentd.storage.prune import SqliteTarget, Target, prune

    target: Target
    if isinstance(store.conn, sqlite3.Connection):
        target = SqliteTarget(store.conn)
    else:
        from subagentd.storage.postgres.reading import PgTarget

        target = PgTarget(store.conn, 5000)  # start-up's patience, as migrations'
    done = prune(target, retention)
    counts = (done.trees, done.events, done.messages)
    log.info("--retention: pruned %d settled tree(s), %d event(s), %d message(s)", *counts)


def _exit_at_once(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT before the server is up: nothing was acknowledged that is not committed,
    so exit 0 now. Not SystemExit: finalizing the interpreter while the loader thread is still
    importing can crash it (a segfault, seen in 5 of 150 runs)."""
    log.info("received %s during start-up: exiting", signal.Signals(signum).name)
    os._exit(0)
