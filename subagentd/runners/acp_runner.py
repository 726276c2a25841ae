"""The ACP turn runner (`--runner-protocol acp`): each subagent is a session of an ACP agent.

The turns it claims, their queue and `--max-running` are the runner's (runners/runner.py), which
is given `AcpTurns` as its executor: what differs is how a turn runs (docs/acp.md). Agent processes (`--runner COMMAND`) form a pool
of at most `--max-running`, each `initialize`d once when it starts and reused across turns; a
subagent's first turn opens a session (`session/new` with the working directory and the
agent's own tools as its MCP server, `subagentd mcp`) on the least busy process, and each turn
is one `session/prompt` on it: the turn's instructions and each of its messages, rendered with
its sender (docs/rendering.md), as text content blocks. `session/update`s go into the
transcript; the prompt's `stopReason` ends the turn, charged what the agent reported it used
(runners/acp_usage.py). `turn/interrupt` sends `session/cancel`; a turn still running
`--interrupt-grace` later is stopped: what it waits for is cancelled and its agent process
killed, so an agent that never answers costs its own slot for at most the grace. No lock is
held across a wait on an agent: a process being started is in the pool, reserved for its turn. `session/request_permission`
is answered by `--acp-permission`; with `ask-parent` it is held, the turn running, as a question
for the subagent's parent (core/questions.py) until the parent answers it, the turn is
interrupted or ends, or `--acp-permission-timeout` passes.

The session id is kept in the transcript (`acp_session`), so a later activation — after a
cold resume, a restart of subagentd, or the death of the process that held it — reopens it with
`session/load` when the agent advertises `loadSession` (a new session otherwise, told who it
is). A process that dies ends the turns it was running `error`; the next turn starts another.

Longer than ~300 lines on purpose: one turn's way through its session — the pool's process, the
session opened, loaded or reused, the prompt, its cancel, its updates written as they come, and
its end — shares the turn's state; split, each step would have to be handed all of it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from subagentd.core.questions import Option, Question
from subagentd.core.service import Service
from subagentd.errors import QuotaExceededError
from subagentd.message_fences import RENDER_GUIDE, render_messages
from subagentd.runners.acp import MAX_LINE, AcpError, AgentGone, AgentProcess, permission_policy
from subagentd.runners.acp_elicitation import CANCEL, DECLINE, content_of, form_field
from subagentd.runners.acp_progress import TurnProgress
from subagentd.runners.acp_usage import SessionTotals, charge
from subagentd.runners.handoff import Handoff
from subagentd.runners.runner import Job, Runner
from subagentd.runners.runner_pids import PidFiles
from subagentd.runners.tool_socket import Tokens
from subagentd.schema.budgets import Usage

log = logging.getLogger("subagentd")

STOP_REASONS = {  # the prompt's stopReason -> the turn's end
    "end_turn": "completed",
    "max_tokens": "max-tokens",
    "max_turn_requests": "max-tokens",
    "refusal": "refusal",
    "cancelled": "aborted",
}
GRACE_PASSED = (
    "the ACP agent did not end its prompt within --interrupt-grace after session/cancel;"
    " its process was stopped"
)
OPTION_TEXT = 1024  # characters of a permission option's name or kind kept (shown: fewer)
PROGRESS_KEPT = ("acp_session",)  # written past --max-db-bytes (the session is reopened by it)
RESUMED = (
    'You are the subagent "{label}", resumed in a new session: your earlier conversation'
    " could not be reopened."
)


@dataclass(slots=True, eq=False)
class AgentSession:
    """A subagent's session: on which process, for which activation (whose token its MCP
    server holds)."""

    process: AgentProcess
    session_id: str
    activation_id: str
    totals: SessionTotals  # what the agent last reported as the session's running totals


class AcpTurns:
    """The ACP executor of the runner's turns: each turn a prompt of an ACP session (see the
    module docstring)."""

    def __init__(
        self,
        command: list[str],
        *,
        environment: dict[str, str],
        tokens: Tokens,
        handoff: Handoff,
        processes: PidFiles | None = None,
        permission: str = "deny",
        permission_timeout: float = 600.0,
        max_frame_bytes: int = MAX_LINE,
    ) -> None:
        self.command = command
        self.environment = environment  # SUBAGENTD_DB and SUBAGENTD_SOCKET, added to os.environ
        self.tokens = tokens
        self.acp_handoff = handoff
        self.processes = processes  # --detach: each agent process's pid, while it lives
        self.ask_parent = permission == "ask-parent"
        self.policy = permission_policy("deny" if self.ask_parent else permission)
        self.permission_timeout = permission_timeout
        self.max_line = max_frame_bytes or MAX_LINE  # of a line to or from an agent
        self.pool: list[AgentProcess] = []  # started ones and those being started (≤ max_running)
        self.starting: set[AgentProcess] = set()  # being started: not yet `initialize`d
        self.sessions: dict[
            str, AgentSession
        ] = {}  # agent id -> its session, while this process runs
        self.turns: dict[str, tuple[AgentProcess, str]] = {}  # turn id -> where it prompts
        self._runner: Runner | None = None
        self._processes: anyio.abc.TaskGroup | None = None
        self._stopping: anyio.Event | None = None  # set by stop(): nothing commits after it
        self._pool_changed = anyio.Event()  # a process became ready or idle, or left the pool
        self.scopes: dict[str, anyio.CancelScope] = {}  # turn id -> what it waits for
        self.past_grace: set[str] = set()  # turn ids stopped at the grace

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "serving() first"
        return self._runner

    @property
    def service(self) -> Service:
        return self.runner.service

    @contextlib.asynccontextmanager
    async def serving(self, runner: Runner) -> AsyncIterator[None]:
        """The agent processes' task group while the runner serves; every one killed after."""
        self._runner = runner
        self._stopping = anyio.Event()
        try:
            async with anyio.create_task_group() as processes:
                self._processes = processes
                try:
                    yield
                finally:
                    processes.cancel_scope.cancel()
        finally:
            for process in self.pool:
                process.kill()
                await process.close()
                self._forget(process)

    def _forget(self, process: AgentProcess) -> None:
        """The agent process is gone: no longer one to stop after a crash (--detach)."""
        if self.processes is not None and process.process is not None:
            self.processes.remove(process.process.pid)

    async def stop(self, jobs: list[Job], grace: float) -> None:
        if self._stopping is not None:
            self._stopping.set()
        for job in jobs:  # the questions still open are cancelled
            await self._cancel_questions(job, "interrupted")
        for process, session_id in list(self.turns.values()):  # the prompts still running
            if session_id:
                process.notify("session/cancel", {"sessionId": session_id})
        for job in jobs:
            job.interrupted = True

    def kill(self, job: Job) -> None:
        """Nothing at once: the agent processes are killed when the runner stops serving."""

    async def stopped(self, grace: float) -> None:
        for process in self.pool:
            process.terminate()
        with anyio.move_on_after(grace):
            for process in self.pool:
                if process.process is not None:
                    await process.process.wait()

    # --- the pool ----------------------------------------------------------------------

    async def _process(self, turn_id: str) -> AgentProcess:
        """A process for the turn (counted in its `prompting`, kept in `turns`): an idle live
        one; else a new one while fewer than --max-running are in the pool; else the least
        busy live one; when every one is still being started, the first to change."""
        while True:
            for gone in [p for p in self.pool if not p.alive and p not in self.starting]:
                self._forget(gone)
                self.pool.remove(gone)
            ready = [p for p in self.pool if p not in self.starting]
            idle = [p for p in ready if p.prompting == 0]
            if idle or (ready and len(self.pool) >= self.runner.max_running):
                process = idle[0] if idle else min(ready, key=lambda p: p.prompting)
                process.prompting += 1
                self.turns[turn_id] = (process, "")
                return process
            if len(self.pool) < self.runner.max_running:
                return await self._start(turn_id)
            await self._pool_changed.wait()

    async def _start(self, turn_id: str) -> AgentProcess:
        """A new process, in the pool and reserved for the turn while it is `initialize`d."""
        env = {**os.environ, **self.environment}
        process = AgentProcess(
            self.command, env, self._permission, self.max_line, self._elicitation
        )
        process.prompting += 1
        self.turns[turn_id] = (process, "")
        self.pool.append(process)
        self.starting.add(process)
        assert self._processes is not None
        try:
            await process.spawn(self._processes)
            if self.processes is not None and process.process is not None:
                self.processes.add(process.process.pid)  # stopped after a crash (--detach)
            await process.initialize()
        except BaseException:
            process.kill()
            await process.close()
            self._forget(process)
            self.pool.remove(process)
            raise
        finally:
            self.starting.discard(process)
            self._changed()
        return process

    def _changed(self) -> None:
        """Wake the turns waiting for a process."""
        self._pool_changed.set()
        self._pool_changed = anyio.Event()

    async def _permission(self, process: AgentProcess, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to the agent's `session/request_permission`: by the policy, or (ask-parent,
        while a turn prompts that session) the parent's, through core/questions.py."""
        session_id = str(params.get("sessionId"))
        call = params.get("toolCall")
        title = call.get("title") if isinstance(call, dict) else None
        kind = call.get("kind") if isinstance(call, dict) else None
        sink = process.sinks.get(session_id)
        job = self._prompting(process, session_id)
        options = _options(params.get("options"))
        outcome: dict[str, Any] | None = None
        if self.ask_parent and job is not None and not job.interrupted and options:
            outcome = await self._ask(job, str(title or ""), kind, options, sink)
        if outcome is None:
            outcome = self.policy(params)
            if sink is not None:
                sink.update({"sessionUpdate": "permission", "title": title, **outcome})
        return outcome

    async def _ask(
        self,
        job: Job,
        title: str,
        kind: Any,
        options: list[Option],
        sink: Any,
    ) -> dict[str, Any] | None:
        """Hold the request as a question for the subagent's parent until it is answered or
        cancelled; None when there is no parent to ask (then the deny policy answers)."""
        question = Question(
            child_id=job.start.agent_id,
            turn_id=job.start.turn_id,
            title=title,
            kind=kind if isinstance(kind, str) and kind else None,
            options=options,
            timeout=self.permission_timeout,
            resolve=_unset,
        )
        asked = {
            "sessionUpdate": "permission",
            "title": title,
            "outcome": "asked",
            "options": [o.option_id for o in options],
        }
        held = await self._held(job, question, sink, asked)
        if held is None:
            return None
        option, why, _ = held
        if option is None:
            outcome: dict[str, Any] = {"outcome": "cancelled"}
            detail = {"why": why}
        else:
            outcome = {"outcome": "selected", "optionId": option.option_id}
            detail = {"by": question.parent_id}
        if sink is not None:
            sink.update({"sessionUpdate": "permission", "title": title, **outcome, **detail})
        return outcome

    async def _elicitation(self, process: AgentProcess, params: dict[str, Any]) -> dict[str, Any]:
        """The agent's `elicitation/create`: a form of one field is a question for the
        subagent's parent while a turn prompts that session, its answer the field's value
        (runners/acp_elicitation.py); anything else is declined, a question nobody can answer
        (no turn, no parent, ended unanswered) cancelled."""
        field = form_field(params)
        if field is None:
            return DECLINE
        session_id = str(params.get("sessionId"))
        job = self._prompting(process, session_id)
        if job is None or job.interrupted:
            return CANCEL
        record = self.service.stored_session(job.start.agent_id)
        question = Question(
            child_id=job.start.agent_id,
            turn_id=job.start.turn_id,
            title=str(params.get("message") or "") or "(the agent asked for input)",
            kind=None,
            options=[Option(c, c, "") for c in field.choices],
            timeout=self.permission_timeout,
            resolve=_unset,
            free=True,
            label=(record.label or "") if record is not None else "",
        )
        sink = process.sinks.get(session_id)
        asked = {"sessionUpdate": "elicitation", "message": question.title, "outcome": "asked"}
        held = await self._held(job, question, sink, asked)
        content = content_of(field, held[2]) if held is not None and held[1] == "answered" else None
        if held is None or held[1] != "answered":
            result = CANCEL
        else:
            result = DECLINE if content is None else {"action": "accept", "content": content}
        if sink is not None and held is not None:
            ended = {"outcome": result["action"], "parent": question.parent_id, "why": held[1]}
            sink.update({**asked, **ended})
        return result

    async def _held(
        self, job: Job, question: Question, sink: Any, asked: dict[str, Any]
    ) -> tuple[Option | None, str, str] | None:
        """File `question` (core/questions.py) and wait until it is answered or ends: the option
        chosen, why it ended, the answer's text; None when there is no parent to ask. `asked`
        goes to the turn's progress once it is filed."""
        resolved = anyio.Event()
        box: list[tuple[Option | None, str, str]] = []

        def resolve(option: Option | None, why: str, answer: str) -> None:
            box.append((option, why, answer))
            resolved.set()

        question.resolve = resolve
        filed: list[bool] = []
        await self.runner.work(
            lambda: filed.append(self.service.questions.ask(question)), job.start.agent_id
        )
        if not filed or not filed[0]:
            return None
        if sink is not None:
            sink.update({**asked, "parent": question.parent_id})
        try:
            await resolved.wait()
            await self._committed()  # the answer (or the cancellation) is durable
        finally:
            if not box:  # cancelled (the runner stops): the question goes with it
                await self._cancel_questions(job, "ended")
        return box[0]

    def _prompting(self, process: AgentProcess, session_id: str) -> Job | None:
        """The turn prompting that session of the process, if any."""
        return next(
            (
                self.runner.running.get(turn_id)
                for turn_id, (where, prompted) in self.turns.items()
                if where is process and prompted == session_id
            ),
            None,
        )

    # --- one turn ------------------------------------------------------------------------

    def interrupt(self, job: Job, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(self._cancel_questions, job, "interrupted")
        where = self.turns.get(job.start.turn_id)
        if where is not None and where[1]:
            process, session_id = where
            process.notify("session/cancel", {"sessionId": session_id})
        tg.start_soon(self._stop_after_grace, job)

    async def _stop_after_grace(self, job: Job) -> None:
        """The interrupted turn still runs after --interrupt-grace: what it waits for is
        cancelled and its agent process killed (what else that process ran ends `error`)."""
        await anyio.sleep(self.service.settings.interrupt_grace)
        turn_id = job.start.turn_id
        scope = self.scopes.get(turn_id)
        if job.done or scope is None:  # its prompt ended: it is being written
            return
        self.past_grace.add(turn_id)
        scope.cancel()
        where = self.turns.get(turn_id)
        if where is not None:
            where[0].kill(GRACE_PASSED)

    async def run(self, job: Job) -> None:
        start = job.start
        progress = TurnProgress(limit=self.service.settings.max_text_bytes)
        detail: dict[str, Any] = {}
        output: str | None = None
        scope = self.scopes[start.turn_id] = anyio.CancelScope()
        try:
            async with anyio.create_task_group() as writing:
                writing.start_soon(self._write_progress, job, progress)
                reason = "error"
                try:
                    with scope:
                        stop, reported = await self._turn(job, progress)
                        detail["stop_reason"] = stop
                        progress.reported = reported
                        reason = STOP_REASONS.get(stop, "error")
                    if start.turn_id in self.past_grace:
                        detail.clear()
                        detail["error"] = GRACE_PASSED
                except AgentGone as exc:
                    reason, detail["error"] = "error", str(exc)
                    stderr = self._stderr_of(start.turn_id)
                    if stderr:
                        detail["stderr"] = stderr
                except AcpError as exc:
                    reason, detail["error"] = "error", f"the ACP agent refused {exc}"
                finally:
                    self.scopes.pop(start.turn_id, None)
                    writing.cancel_scope.cancel()
            progress.close_chunk()
            await self._cancel_questions(job, "ended")  # its prompt ended first
            if job.interrupted:
                reason = "aborted"
            output = _cut(progress.last_message.strip(), self.service.settings.max_text_bytes)
            usage = self._usage(start.agent_id, progress, detail)
            await self._finish(job, progress, reason, output or None, detail, usage)
        finally:
            job.done = True
            progress.end()
            self.scopes.pop(start.turn_id, None)
            self.past_grace.discard(start.turn_id)
            where = self.turns.pop(start.turn_id, None)
            if where is not None:
                process, session_id = where
                process.prompting -= 1
                if process.sinks.get(session_id) is progress:  # later updates are dropped
                    del process.sinks[session_id]
                self._changed()

    async def _committed(self) -> None:
        """Until what was done so far is committed, or the runner is stopping (the connection
        commits nothing more then)."""
        assert self._stopping is not None
        connection, stopping = self.runner.connection, self._stopping
        async with anyio.create_task_group() as waiting:

            async def commit() -> None:
                await connection.committed()
                waiting.cancel_scope.cancel()

            waiting.start_soon(commit)
            await stopping.wait()
            waiting.cancel_scope.cancel()

    async def _cancel_questions(self, job: Job, why: str) -> None:
        """Cancel the questions the turn's agent still has open (core/questions.py)."""
        questions = self.service.questions
        if questions.pending.get(job.start.agent_id):
            await self.runner.work(
                functools.partial(questions.cancel, job.start.agent_id, job.start.turn_id, why),
                job.start.agent_id,
            )

    async def _write_progress(self, job: Job, progress: TurnProgress) -> None:
        """While the turn runs: what its updates add goes into the transcript as it comes, so
        `watch` and the timeline show the child working."""
        while True:
            await progress.changed.wait()
            progress.changed = anyio.Event()
            await self.runner.work(
                functools.partial(self._record, job, progress.take()), job.start.agent_id
            )

    def _record(self, job: Job, events: list[tuple[str, Any]], ending: bool = False) -> None:
        """The turn's events into its transcript (while it is current); past --max-db-bytes
        only `acp_session` (and, `ending`, `acp_end`)."""
        agent_id, turn_id = job.start.agent_id, job.start.turn_id
        if not self.runner.current(agent_id, turn_id):
            return
        service = self.service
        try:
            service.check_database_quota()
            full = False
        except QuotaExceededError:
            full = True
        for index, (event_type, data) in enumerate(events):
            if (
                full
                and event_type not in PROGRESS_KEPT
                and not (ending and index == len(events) - 1)
            ):
                continue
            service.record(agent_id, turn_id, event_type, data)

    def _stderr_of(self, turn_id: str) -> str | None:
        where = self.turns.get(turn_id)
        if where is None or not where[0].stderr:
            return None
        return bytes(where[0].stderr).decode("utf-8", errors="replace")

    def _usage(self, agent_id: str, progress: TurnProgress, detail: dict[str, Any]) -> Usage | None:
        """What the turn used, from the session totals the agent reported (docs/acp.md "Usage");
        what was reported goes into `acp_end`."""
        held = self.sessions.get(agent_id)
        if held is None:
            return None
        usage, seen, progress.totals = charge(
            held.totals, progress.reported, progress.cost, self.service.settings.cost_currency
        )
        if seen:
            detail["session_usage"] = {"session_id": held.session_id, **seen}
        return usage

    async def _turn(self, job: Job, progress: TurnProgress) -> tuple[str, Any]:
        """Open (or reopen) the session, prompt it; the stopReason and the usage it reported."""
        start = job.start
        activation = self.service.activation_of(start.agent_id) or ""
        token = self.tokens.issue(start.agent_id, activation)
        servers = [self.acp_handoff.acp_server(start.agent_id, token)]
        cwd = os.getcwd()
        blocks: list[str] = []
        held = self.sessions.get(start.agent_id)
        if held is not None and held.process.alive and held.activation_id == activation:
            process, session_id = held.process, held.session_id
            process.prompting += 1
            self.turns[start.turn_id] = (process, session_id)
        else:
            process = await self._process(start.turn_id)
            known: str | None
            if held is not None:
                known, totals = held.session_id, held.totals
            else:
                known, totals = self._stored_session(start.agent_id)
            session_id = None
            if known is not None and process.loads:
                process.sinks[known] = progress
                progress.replaying = True
                try:
                    await process.request(
                        "session/load", {"sessionId": known, "cwd": cwd, "mcpServers": servers}
                    )
                    session_id = known
                except AcpError as exc:
                    log.warning("the ACP agent could not load session %s: %s", known, exc)
                    process.sinks.pop(known, None)
                finally:
                    progress.replaying = False
            self.turns[start.turn_id] = (process, session_id or "")
            if session_id is None:
                opened = await process.request("session/new", {"cwd": cwd, "mcpServers": servers})
                session_id = str((opened or {}).get("sessionId", ""))
                blocks.append(RENDER_GUIDE)
                if start.resume is not None:
                    blocks.append(RESUMED.format(label=start.resume.label))
                loaded = False
            else:
                loaded = True
            self.turns[start.turn_id] = (process, session_id)
            progress.events.append(("acp_session", {"session_id": session_id, "loaded": loaded}))
            if not loaded:
                totals = SessionTotals()  # a new session counts from zero
            self.sessions[start.agent_id] = AgentSession(process, session_id, activation, totals)
        assert session_id is not None
        process.sinks[session_id] = progress
        if start.instructions:
            blocks.append(start.instructions)
        blocks += [render_messages([message]) for message in start.messages]
        if job.interrupted:
            return "cancelled", None
        result = await process.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": b} for b in blocks]},
        )
        stop = result.get("stopReason") if isinstance(result, dict) else None
        reported = result.get("usage") if isinstance(result, dict) else None
        return (stop if isinstance(stop, str) else "error"), reported

    def _stored_session(self, agent_id: str) -> tuple[str | None, SessionTotals]:
        """The last session id the transcript keeps for this agent (`acp_session`), and the
        totals its agent last reported for it (`acp_end` `session_usage`)."""
        found: str | None = None
        totals = SessionTotals()
        after: int | None = None
        while True:
            page = self.service.records.read_transcript(agent_id, after, None)
            for event in page.events:
                data = event.data if isinstance(event.data, dict) else {}
                if event.type == "acp_session" and data.get("session_id"):
                    if data["session_id"] != found:
                        totals = SessionTotals()
                    found = data["session_id"]
                elif event.type == "acp_end" and isinstance(data.get("session_usage"), dict):
                    if data["session_usage"].get("session_id") == found:
                        totals = SessionTotals.stored(data["session_usage"])
            if page.next is None:
                return found, totals
            after = page.next

    async def _finish(
        self,
        job: Job,
        progress: TurnProgress,
        reason: str,
        output: str | None,
        detail: dict[str, Any],
        usage: Usage | None,
    ) -> None:
        """The turn's progress and how it ended into its transcript; then end the turn (unless
        it ended otherwise meanwhile), charging what it used."""

        def record() -> None:
            self._record(job, [*progress.take(), ("acp_end", detail)], ending=True)
            held = self.sessions.get(job.start.agent_id)
            if held is not None and progress.totals is not None:
                held.totals = progress.totals  # charged next: the next turn counts from here

        # retried until written (or the runner stops)
        await self.runner.finish(job, reason, output, usage, record, committed=self._committed)


def _options(given: Any) -> list[Option]:
    """The well-formed options of a permission request (an id and a kind, both strings); a
    name or kind is kept to OPTION_TEXT characters (the id whole: it is the answer's)."""
    options = []
    for item in given if isinstance(given, list) else []:
        if not isinstance(item, dict):
            continue
        option_id, name, kind = item.get("optionId"), item.get("name"), item.get("kind")
        if isinstance(option_id, str) and option_id and isinstance(kind, str):
            shown = name if isinstance(name, str) else option_id
            options.append(Option(option_id, shown[:OPTION_TEXT], kind[:OPTION_TEXT]))
    return options


def _cut(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes (0: no bound), never half a character."""
    data = text.encode()
    if not limit or len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def _unset(option: Option | None, why: str, answer: str) -> None:
    """A question's resolve until AcpTurns._held sets its own."""
