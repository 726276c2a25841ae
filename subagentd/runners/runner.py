"""The turn runner (`serve --runner`): the turns of agents below the --caller root run as processes.

A turn that starts for an agent below the root is not sent to the host as `turn/start`: once its
start is committed, COMMAND runs with the turn on stdin (schema/runner.py RunnerTurn), its
trimmed stdout becomes the turn's output and its exit status the reason; `turn/interrupt` sends
SIGTERM to its process group, then SIGKILL after --interrupt-grace. At most `max_running`
processes run at once; the other turns wait in start order (PROTOCOL.md section 11).

`Runner` holds what every runner shares — which turns it claims, their queue and slots, their
interrupts, a turn's end written durably — and is given a `TurnExecutor` that runs each turn:
`ProcessTurns` here (one process per turn), `AcpTurns` (runners/acp_runner.py: a prompt of an
ACP session), `A2aChildren` (runners/a2a_child.py: a remote agent's task).

Longer than ~300 lines on purpose: one turn from its queue slot to its end written — and, for a
process, its stdin, its output, its signals and their grace — is one lifecycle whose steps share
its state.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc
import msgspec

from subagentd.core import texts
from subagentd.core.service import Service
from subagentd.runners.handoff import Handoff
from subagentd.runners.process import (
    Child,
    Follower,
    following,
    keep_descriptors_private,
    run_process,
    signal_group,
)
from subagentd.runners.runner_pids import PidFiles
from subagentd.runners.tool_socket import Tokens
from subagentd.runners.watchdog import Watchdog
from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX, Usage
from subagentd.schema.host_methods import TurnEndParams
from subagentd.schema.notifications import TurnInterrupt, TurnStart
from subagentd.schema.runner import RunnerExit, RunnerFailure, RunnerTurn

if TYPE_CHECKING:
    from subagentd.server.connection import Connection

log = logging.getLogger("subagentd")

_encode = msgspec.json.Encoder().encode
STDERR_EXCERPT_LINES = 8  # of those, the last lines a failed turn's notice and log show
STDERR_EXCERPT_BYTES = 1000  # and at most this many bytes of them
NOT_STARTED = "subagentd could not start the runner: "
USAGE_MAX_BYTES = 64 * 1024  # of a run's SUBAGENTD_USAGE file read (the rest is ignored)
END_RETRY = 0.1  # seconds before a turn end that could not be written is tried again (doubling)
END_RETRY_MAX = 5.0  # ... up to this many seconds between tries
_usage_line = msgspec.json.Decoder(Usage).decode


@dataclass(slots=True, eq=False)
class Job:
    """One turn for the runner: waiting for a slot, then run by its executor (its process, for
    the process executor)."""

    start: TurnStart
    process: Child | None = None
    interrupted: bool = False
    done: bool = False


class TurnExecutor(Protocol):
    """How the runner's turns are run: the runner keeps which turns are its, their queue and
    the --max-running slots; its executor runs each turn it launches (ProcessTurns below: one
    process per turn; runners/acp_runner.py AcpTurns: a prompt of an ACP session)."""

    def serving(self, runner: Runner) -> AbstractAsyncContextManager[object]:
        """Held while `runner` serves (what the executor keeps across turns: the ACP pool)."""
        ...

    async def run(self, job: Job) -> None:
        """The job's turn, from its start until its end is written (Runner.end_durably)."""
        ...

    def interrupt(self, job: Job, tg: anyio.abc.TaskGroup) -> None:
        """A running turn was interrupted (job.interrupted just set): ask it to stop, and
        stop it once --interrupt-grace passed."""
        ...

    async def stop(self, jobs: list[Job], grace: float) -> None:
        """At shutdown: ask every turn still running to stop (each marked interrupted);
        `grace`: the seconds the runner then waits for them."""
        ...

    def kill(self, job: Job) -> None:
        """Stop a running turn at once (a signal during the shutdown, or the runner ends)."""
        ...

    async def stopped(self, grace: float) -> None:
        """After the shutdown's wait for the turns: up to `grace` seconds for what it holds."""
        ...


class Runner:
    """Runs the claimed turns of one connection's service through its executor (see the module
    docstring): which turns, their queue, their slots, their interrupts and their end."""

    def __init__(
        self,
        service: Service,
        executor: TurnExecutor,
        *,
        root: str,
        max_running: int,
        claims: Callable[[str], bool] | None = None,
    ) -> None:
        self.service = service
        self.executor = executor
        self.root = root
        self._claims = claims  # which agents' turns run here (None: those below the root)
        self.max_running = max_running
        self.waiting: deque[Job] = deque()  # FIFO: the order the turns started in
        self.running: dict[str, Job] = {}  # turn id -> job being run
        self.lent: set[str] = set()  # turn ids of runs waiting (wait_agents): slots they lend
        self._ready: deque[Job] = deque()  # launched (in `running`), for a slot task to run
        self._idle: list[anyio.Event] = []  # the wake-ups of the slot tasks with no job
        self._events: list[TurnStart | TurnInterrupt] = []  # not yet known to be committed
        self._wake: anyio.Event | None = None
        self._connection: Connection | None = None
        self._stopped: anyio.Event | None = None  # set when the last turn ends after stop()

    @property
    def busy(self) -> bool:
        """Runs going, waiting for a slot, or turn events not acted on yet."""
        return bool(self.running or self.waiting or self.pending_events)

    @property
    def pending_events(self) -> bool:
        """Turn starts or interrupts taken but not acted on yet."""
        return bool(self._events)

    @property
    def connection(self) -> Connection:
        assert self._connection is not None, "attach() first"
        return self._connection

    # --- what the core emits -----------------------------------------------------------

    def attach(self, connection: Connection) -> None:
        """Take the turns of agents below the root out of what the host is sent."""
        self._connection = connection
        connection.intercept(self._take)

    def claims(self, agent_id: str) -> bool:
        """An agent below the --caller root (through live owners) has its turns run here,
        unless the runner was given which ones."""
        if self._claims is not None:
            return self._claims(agent_id)
        return agent_id != self.root and self.service.below(agent_id, self.root)

    def _take(self, method: str, params: msgspec.Struct) -> bool:
        """A turn start or interrupt of an agent whose turns run here: taken from the host."""
        if isinstance(params, TurnStart | TurnInterrupt) and self.claims(params.agent_id):
            self._events.append(params)
            if self._wake is not None:
                self._wake.set()
            return True
        return False

    # --- the loop ------------------------------------------------------------------------

    async def serve(self) -> None:
        """Act on committed turn starts and interrupts until cancelled; then kill what runs."""
        assert self._connection is not None, "attach() first"
        self._wake = anyio.Event()
        if self._events:  # emitted before this task started
            self._wake.set()
        async with self.executor.serving(self):
            try:
                async with anyio.create_task_group() as tg:
                    while True:
                        await self._wake.wait()
                        self._wake = anyio.Event()
                        events, self._events = self._events, []  # later ones: the next round
                        await self._connection.committed()
                        for event in events:
                            if isinstance(event, TurnStart):
                                self.waiting.append(Job(event))
                            else:
                                self._interrupt(event, tg)
                        self._launch(tg)
            finally:
                for job in list(self.running.values()):
                    self.executor.kill(job)

    async def stop(self, grace: float) -> None:
        """At shutdown (the turns are already ended): every turn still running is asked to stop
        (once), up to `grace` seconds for them to end; the rest are killed when serve() is
        cancelled; then up to `grace` more for what the executor holds."""
        self.waiting.clear()
        await self.executor.stop(list(self.running.values()), grace)
        if self.running:
            self._stopped = anyio.Event()
            with anyio.move_on_after(grace):
                await self._stopped.wait()
        await self.executor.stopped(grace)

    def kill_all(self) -> None:
        """A signal during the shutdown: every turn still running is stopped now."""
        self.waiting.clear()
        for job in list(self.running.values()):
            job.interrupted = True
            self.executor.kill(job)

    def current(self, agent_id: str, turn_id: str) -> bool:
        """The turn is still its agent's open one (not ended otherwise meanwhile)."""
        return self.service.open_turn(agent_id) == turn_id

    def lend(self, agent_id: str) -> str | None:
        """A run of `agent_id` waits for other agents (wait_agents through `subagentd tool`):
        its slot is lent meanwhile, so the turns it waits for can run even when every slot
        holds a waiting run; the run's turn id (for `reclaim`), or None when no run of it is
        here."""
        for turn_id, job in self.running.items():
            if job.start.agent_id == agent_id and turn_id not in self.lent:
                self.lent.add(turn_id)
                if self._wake is not None:
                    self._wake.set()  # the serve loop launches what waits for a slot
                return turn_id
        return None

    def reclaim(self, turn_id: str) -> None:
        """The wait ended: the run holds its slot again (no new run starts until one is free)."""
        self.lent.discard(turn_id)

    def _launch(self, tg: anyio.abc.TaskGroup, free: int = 0) -> None:
        """Start what waits, as far as the slots allow: each job goes to a slot task — `free`
        of them (the caller, done with its job) take the next ones, then idle ones are woken,
        and only past those is one started (a turn costs no task of its own)."""
        while self.waiting and len(self.running) - len(self.lent) < self.max_running:
            job = self.waiting.popleft()
            if self.current(job.start.agent_id, job.start.turn_id):  # not undone meanwhile
                self.running[job.start.turn_id] = job
                self._ready.append(job)
                if free:
                    free -= 1
                elif self._idle:
                    self._idle.pop().set()
                else:
                    tg.start_soon(self._slot, tg, name="runner slot")

    def _interrupt(self, event: TurnInterrupt, tg: anyio.abc.TaskGroup) -> None:
        job = self.running.get(event.turn_id)
        if job is None:  # still waiting for a slot: it never starts
            for waiting in self.waiting:
                if waiting.start.turn_id == event.turn_id:
                    self.waiting.remove(waiting)
                    tg.start_soon(self.end, waiting, "aborted", None, RunnerExit(interrupted=True))
                    break
            return
        if job.interrupted or job.done:
            return
        job.interrupted = True
        self.executor.interrupt(job, tg)

    async def _slot(self, tg: anyio.abc.TaskGroup) -> None:
        """A task that runs the launched jobs one after the other, idle in between."""
        while True:
            while self._ready:
                job = self._ready.popleft()
                try:
                    await self.executor.run(job)
                finally:
                    job.done = True
                    self.running.pop(job.start.turn_id, None)
                    self.lent.discard(job.start.turn_id)
                    self._launch(tg, free=1)  # this task takes the next job itself
                    if not self.running and self._stopped is not None:
                        self._stopped.set()
            wake = anyio.Event()
            self._idle.append(wake)
            await wake.wait()

    # --- a turn's end --------------------------------------------------------------------

    async def end(self, job: Job, reason: str, output: str | None, report: RunnerExit) -> None:
        """Record how the turn's process ended and end its turn (unless it ended otherwise)."""
        agent_id, turn_id = job.start.agent_id, job.start.turn_id
        failure = failure_of(report, reason)
        if failure is not None:
            tail = json.dumps(failure.stderr_tail or "", ensure_ascii=True)  # one line, escaped
            log.warning(
                "--runner: the turn of %s %s; its stderr ended: %s", agent_id, failure.status, tail
            )

        def record() -> None:
            self.service.record(agent_id, turn_id, "runner_exit", report)

        await self.finish(job, reason, output, report.usage, record, failure)

    async def finish(
        self,
        job: Job,
        reason: str,
        output: str | None,
        usage: Usage | None,
        record: Callable[[], None],
        failure: RunnerFailure | None = None,
        committed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """End the job's turn durably, unless it ended otherwise (force-ended, by the host):
        `record` writes how it ended into its transcript, then `turns/end` charges `usage`, in
        one group that end_durably retries until it is written. Every executor ends its turns
        here."""
        agent_id, turn_id = job.start.agent_id, job.start.turn_id

        def end() -> None:
            if not self.current(agent_id, turn_id):
                return
            record()
            params = TurnEndParams(
                agent_id=agent_id,
                turn_id=turn_id,
                reason=reason,  # type: ignore[arg-type]  # one of the reasons, chosen by the executor
                output=output,
                usage=usage,
            )
            self.service.host.finish_turn(params, failure)

        await self.end_durably(agent_id, turn_id, end, committed)

    async def end_durably(
        self,
        agent_id: str,
        turn_id: str,
        end: Callable[[], None],
        committed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run `end` (which ends the turn unless it ended otherwise) until its turn is ended in
        storage: a group that could not be written (its commit failed, or the database did
        not answer) is retried, END_RETRY seconds later and doubling up to END_RETRY_MAX, until
        the turn is no longer open once memory agrees with storage again. Only the server's
        stop ends the retries (its shutdown ends the turn, or crash recovery does).
        `committed`: how to wait for the commit (the connection's, unless given)."""
        connection, recovery = self.connection, self.service.recovery
        wait_committed = committed or connection.committed
        pause = END_RETRY

        def end_if_open() -> None:
            if recovery.stale or self.current(agent_id, turn_id):
                end()  # else ended otherwise (force-ended, by the host, at shutdown)

        while True:
            if not recovery.stale and not self.current(agent_id, turn_id):
                return  # ended otherwise, or ended and committed
            with anyio.CancelScope(shield=True):
                # the write lock taken ahead, as a request's is: waited for with the loop serving
                # (the agent's tree's only: a turn's end writes its own tree)
                await connection.run_locked(end_if_open, connection.tree_of(agent_id))
            await wait_committed()
            if not recovery.stale and not self.current(agent_id, turn_id):
                return  # ended and committed (or ended otherwise)
            log.warning(
                "the end of turn %s of %s was not written; retrying in %.1f s",
                turn_id,
                agent_id,
                pause,
            )
            await anyio.sleep(pause)
            pause = min(pause * 2, END_RETRY_MAX)

    async def work(self, work: Callable[[], None], agent_id: str) -> None:
        """`work` in a transaction of the connection's group, on the agent's tree only, once
        another process's write lock let it (waited for in the lock queue)."""
        connection = self.connection
        with anyio.CancelScope(shield=True):
            await connection.run_locked(work, connection.tree_of(agent_id))


class ProcessTurns:
    """The process executor (`--runner COMMAND`): each turn one run of COMMAND (see the module
    docstring)."""

    def __init__(
        self,
        command: list[str],
        *,
        environment: dict[str, str],
        tokens: Tokens,
        watchdog: Watchdog,
        usage_dir: str | None = None,
        handoff: Handoff | None = None,
        processes: PidFiles | None = None,
    ) -> None:
        self.command = command
        self.handoff = handoff  # SUBAGENTD and the agent's MCP server for each turn
        # SUBAGENTD_DB and SUBAGENTD_SOCKET added to os.environ, read once: copying it decodes
        # every variable, each turn
        self._base_environment = {**os.environ, **environment}
        self.tokens = tokens
        self.usage_dir = usage_dir  # where each run's SUBAGENTD_USAGE file is (private, 0700)
        self.processes = processes  # --detach: each run's pid, recorded while it lives
        self.watchdog = watchdog  # stops the runs' groups if this process dies first
        self._runner: Runner | None = None
        self._follower: Follower | None = None  # the runs' epoll, while serving (Linux)
        keep_descriptors_private()  # the runs get their pipes and nothing else

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "serving() first"
        return self._runner

    @contextlib.asynccontextmanager
    async def serving(self, runner: Runner) -> AsyncIterator[None]:
        self._runner = runner
        async with following() as self._follower:
            yield

    def interrupt(self, job: Job, tg: anyio.abc.TaskGroup) -> None:
        _signal(job, signal.SIGTERM)
        tg.start_soon(self._kill_after_grace, job)

    async def _kill_after_grace(self, job: Job) -> None:
        await anyio.sleep(self.runner.service.settings.interrupt_grace)
        if not job.done:
            _signal(job, signal.SIGKILL)

    async def stop(self, jobs: list[Job], grace: float) -> None:
        for job in jobs:
            if not job.interrupted:  # an interrupt (e.g. the shutdown's own) sent one already
                job.interrupted = True
                _signal(job, signal.SIGTERM)

    def kill(self, job: Job) -> None:
        _signal(job, signal.SIGKILL)

    async def stopped(self, grace: float) -> None:
        pass

    async def run(self, job: Job) -> None:
        runner = self.runner
        start = job.start
        env, usage_path = self._environment(start)
        turn = RunnerTurn(
            agent_id=start.agent_id,
            turn_id=start.turn_id,
            messages=start.messages,
            instructions=start.instructions,
            resume=start.resume,
        )
        try:
            try:
                output = await run_process(
                    self.command,
                    _encode(turn),
                    env,
                    self.watchdog,
                    runner.service.settings.max_text_bytes,
                    functools.partial(self._started, job),
                    self._follower,
                )
            except OSError as exc:
                log.error("--runner could not start %s: %s", self.command[0], exc)
                report = RunnerExit(stderr=f"{NOT_STARTED}{exc}")
                await runner.end(job, "error", None, report)
                return
            job.done = True
            if job.interrupted:
                reason = "aborted"
            else:
                reason = "completed" if output.code == 0 else "error"
            usage, refused = read_usage(usage_path)
            report = RunnerExit(
                exit_code=output.code,
                interrupted=job.interrupted,
                stdout_cut=output.cut,
                stderr=output.stderr,
                usage=usage,
                usage_refused=refused,
            )
            await runner.end(job, reason, output.stdout or None, report)
        finally:
            job.done = True
            if job.process is not None:
                if job.process.returncode is None:
                    _signal(job, signal.SIGKILL)
                    with anyio.CancelScope(shield=True):
                        await job.process.wait()  # its exit status reaped
                job.process.close()
                self.watchdog.remove(job.process.pid)
                if self.processes is not None:
                    self.processes.remove(job.process.pid)

    def _environment(self, start: TurnStart) -> tuple[dict[str, str], str | None]:
        """The turn's process environment (its agent, turn and token; where to report usage;
        the handoff's), and the usage file it names (None: none)."""
        service = self.runner.service
        token = self.tokens.issue(start.agent_id, service.activation_of(start.agent_id) or "")
        env = self._base_environment.copy()
        env["SUBAGENTD_AGENT_ID"] = start.agent_id
        env["SUBAGENTD_TURN_ID"] = start.turn_id
        env["SUBAGENTD_TOKEN"] = token
        usage_path = None
        if self.usage_dir is not None:
            usage_path = os.path.join(self.usage_dir, f"usage-{start.turn_id}.jsonl")
            env["SUBAGENTD_USAGE"] = usage_path
        if self.handoff is not None:
            env.update(self.handoff.turn_environment(start.agent_id, token))
        return env, usage_path

    def _started(self, job: Job, process: Child) -> None:
        """The turn's process runs: known to the job (signals, reaping) and the pid files; one
        interrupted while it was being started is told to stop now."""
        job.process = process
        if self.processes is not None:
            self.processes.add(process.pid)
        if job.interrupted:
            _signal(job, signal.SIGTERM)


def failure_of(report: RunnerExit, reason: str) -> RunnerFailure | None:
    """How a turn's process failed (it ended `error`), as the parent's notice, the log and the
    views say it; None for a turn that did not fail."""
    if reason != "error":
        return None
    code = report.exit_code
    if code is None:  # never started: stderr is subagentd's own reason
        why = (report.stderr or "").removeprefix(NOT_STARTED)
        return RunnerFailure(status=texts.RUNNER_NOT_STARTED.format(reason=why))
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        status = texts.RUNNER_KILLED.format(number=-code, name=name)
    else:
        status = texts.RUNNER_EXITED.format(code=code)
    return RunnerFailure(status=status, stderr_tail=stderr_excerpt(report.stderr))


def stderr_excerpt(stderr: str | None) -> str | None:
    """The last STDERR_EXCERPT_LINES lines of a runner's stderr, at most STDERR_EXCERPT_BYTES
    (whole lines when they fit; else the last bytes after `…`); None when it wrote nothing."""
    lines = (stderr or "").rstrip().splitlines()[-STDERR_EXCERPT_LINES:]
    while len(lines) > 1 and len("\n".join(lines).encode()) > STDERR_EXCERPT_BYTES:
        lines.pop(0)
    text = "\n".join(lines)
    if not text.strip():
        return None
    data = text.encode()
    if len(data) > STDERR_EXCERPT_BYTES:
        text = "…" + data[-STDERR_EXCERPT_BYTES:].decode(errors="ignore")
    return text


def read_usage(path: str | None) -> tuple[Usage | None, int]:
    """The usage a run reported in its SUBAGENTD_USAGE file (JSON lines, summed; the file is
    then removed) and how many lines were refused; (None, 0) when it wrote none."""
    if path is None:
        return None, 0
    try:
        with open(path, "rb") as file:
            data = file.read(USAGE_MAX_BYTES)
        os.unlink(path)
    except OSError:
        return None, 0
    sums = {"input_tokens": 0, "output_tokens": 0}
    cost = 0.0
    seen = False
    refused = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            item = _usage_line(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            refused += 1
            continue
        seen = True
        sums["input_tokens"] += item.input_tokens or 0
        sums["output_tokens"] += item.output_tokens or 0
        cost += item.cost or 0.0
    if not seen:
        return None, refused
    # each line is bounded, their sums saturate at the same bounds (storage/spending.py)
    return Usage(
        input_tokens=min(sums["input_tokens"], COUNT_MAX),
        output_tokens=min(sums["output_tokens"], COUNT_MAX),
        cost=min(cost, MONEY_MAX),
    ), refused


def _signal(job: Job, signum: signal.Signals) -> None:
    """Signal the job's process group (the command and whatever it started)."""
    signal_group(job.process, signum)
