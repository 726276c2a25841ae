"""`serve --runner`: the turn runner and the `subagentd tool` relay, wired around the connection."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from subagentd.cli.serve_options import ServeOptions
    from subagentd.runners.detached import Background
    from subagentd.server.connection import Connection

SOCKET_NAME = "relay.sock"
SUN_PATH_MAX = 107  # bytes of a Unix socket's path (sockaddr_un.sun_path, less its NUL)


def socket_parent() -> str | None:
    """Where the relay's private directory (mkdtemp, 0700) is made: the temp directory, or /tmp
    when the temp directory's path would make the socket's too long; None when neither fits."""
    import tempfile

    for base in (tempfile.gettempdir(), "/tmp"):
        sample = os.path.join(base, "subagentd-xxxxxxxx", SOCKET_NAME)
        if len(os.fsencode(sample)) <= SUN_PATH_MAX and os.path.isdir(base):
            return base
    return None


def runner_command(options: ServeOptions) -> list[str] | str | None:
    """The --runner command as argv, None without --runner, or why it cannot run (a message)."""
    text = options.get("runner")
    if text is None:
        if options.get("detach") == "on":
            return "--detach on needs --runner: the background process runs the root's turns"
        if options.get("runner_protocol") == "acp":
            return "--runner-protocol acp needs --runner: the command of the ACP agent to run"
        return None
    if not options.get("caller"):
        return "--runner needs --caller: it runs the turns of the agents below that root"
    import shlex  # here, not at start-up: a plain serve never needs it

    try:
        argv = shlex.split(text)
    except ValueError as exc:
        return f"--runner is not a command line ({exc})"
    if argv and socket_parent() is None:
        return (
            "--runner needs a Unix socket for `subagentd tool`, and the temp directory's path is"
            f" too long for one (at most {SUN_PATH_MAX} bytes): set TMPDIR to a shorter directory"
        )
    return argv or "--runner is empty"


class Running:
    """The runner and the relay around one connection; `serve` is what anyio runs instead of
    `connection.serve`."""

    def __init__(self, connection: Connection, options: ServeOptions, argv: list[str]) -> None:
        import tempfile  # with shutil (in serve): only a --runner serve needs them

        from subagentd.runners.handoff import Handoff, subagentd_executable
        from subagentd.runners.runner import ProcessTurns, Runner, TurnExecutor
        from subagentd.runners.tool_socket import Relay, Tokens
        from subagentd.runners.watchdog import Watchdog
        from subagentd.storage.postgres import is_postgres

        self.connection = connection
        self.grace = options["shutdown_grace"]
        service = connection.service
        # 0700: only this user reaches it
        self.directory = tempfile.mkdtemp(prefix="subagentd-", dir=socket_parent())
        self.path = os.path.join(self.directory, SOCKET_NAME)
        db = options["db"]
        if is_postgres(db):  # it is already connected: the runs need no password
            from subagentd.storage.postgres.store import shown

            db = shown(db)
        elif db != ":memory:":
            db = os.path.abspath(db)
        tokens = Tokens(service)
        environment = {"SUBAGENTD_DB": db, "SUBAGENTD_SOCKET": self.path}
        handoff = Handoff(self.directory, subagentd_executable(self.directory), environment)
        background: Background | None = options.get("detached")  # --detach's background process
        processes = background.pids if background is not None else None
        self.watchdog: Watchdog | None = None
        executor: TurnExecutor
        if options.get("runner_protocol") == "acp":
            from subagentd.runners.acp_runner import AcpTurns

            executor = AcpTurns(
                argv,
                environment=environment,
                tokens=tokens,
                handoff=handoff,
                processes=processes,
                permission=options.get("acp_permission", "deny"),
                permission_timeout=service.settings.question_timeout,
                max_frame_bytes=options["max_frame_bytes"],
            )
        else:
            self.watchdog = Watchdog()  # stops the runs' groups should this process die first
            executor = ProcessTurns(
                argv,
                environment=environment,
                tokens=tokens,
                watchdog=self.watchdog,
                usage_dir=self.directory,
                handoff=handoff,
                processes=processes,
            )
        self.runner = Runner(
            service, executor, root=options["caller"] or "", max_running=options["max_running"]
        )
        self.relay = Relay(service, tokens, options["max_frame_bytes"], slots=self.runner)
        self.runner.attach(connection)
        if background is not None:
            background.mux.follow(self.runner)
        self.relay.attach(connection)
        connection.stop_runs = lambda: self.runner.stop(self.grace)
        connection.kill_runs = self.runner.kill_all

    async def serve(self) -> None:
        import shutil

        import anyio

        try:
            listener = await anyio.create_unix_listener(self.path)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.relay.serve, listener)
                tg.start_soon(self.runner.serve)
                await self.connection.serve()  # its shutdown stops the runs (stop_runs)
                tg.cancel_scope.cancel()
        finally:
            if self.watchdog is not None:
                self.watchdog.close()
            shutil.rmtree(self.directory, ignore_errors=True)
