"""Remote children (`--a2a-agent NAME=URL`): the turns of a subagent spawned with
`agent: {a2a: NAME}` run as A2A messages to that agent (docs/a2a.md, "A remote child").

The child's conversation is one A2A `contextId` (the remote agent's, kept in the transcript as
`a2a_task`); each turn is one `SendMessage` (streamed when the agent's card says it streams) whose
`messageId` is the turn's id, so a message retried after a lost connection is the same message.
Status updates and artifacts go into the transcript as they come (`a2a_status`, `a2a_artifact`);
the task's end ends the turn: `completed` with the final message's text (else its artifacts'),
`input-required` as a question to the child's parent (core/questions.py) whose answer continues
the remote task, `failed`, `rejected`, `auth-required` and an unasked `canceled` with the texts
below. `turn/interrupt` is `CancelTask`; a task still running `--interrupt-grace` later is left
and the turn ends `aborted`. A connection lost before the task's id is known is retried with the
same message; after it is known, the task is read with `GetTask` until it ends; when neither
answers after RETRIES tries, the turn ends `error` saying that the outcome is unknown.

Longer than ~300 lines on purpose: one remote turn — its message, its stream, its polls after a
lost connection, its question to the parent, its cancel and its end — shares the turn's state
(the remote task's id, what it said, whether it was interrupted); split, each step would have to
be handed all of it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import msgspec

from subagentd.core.descriptors import parse_descriptor
from subagentd.core.questions import Question
from subagentd.core.service import Service
from subagentd.runners.runner import Job, Runner
from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX, Usage

if TYPE_CHECKING:
    from subagentd.server.connection import Connection

log = logging.getLogger("subagentd")

RETRIES = 4  # tries of one request when the connection is lost (the first one included)
RETRY_PAUSE = 0.5  # seconds before the second try, doubling
POLL = 0.5  # seconds between GetTask reads of a task whose stream was lost
CONNECT_TIMEOUT = 10.0  # seconds to connect; reads wait as long as the turn runs
TEXT_CHARS = 4000  # characters of a status message kept in one transcript event
# the texts a turn ends with (docs/a2a.md, "A remote child"); NAME is the --a2a-agent name
NOT_LISTED = 'the A2A agent "{name}" is no longer listed by this deployment (--a2a-agent)'
NOT_REACHED = 'the A2A agent "{name}" could not be reached ({error}); the turn was not sent to it'
UNKNOWN = (
    'the connection to the A2A agent "{name}" was lost ({error}) and could not be made again'
    " after {tries} tries; whether it ran the turn is unknown"
)
REFUSED = 'the A2A agent "{name}" refused the message: {error}'
FAILED = 'the A2A agent "{name}" failed the task{said}'
REJECTED = 'the A2A agent "{name}" rejected the task{said}'
AUTH_REQUIRED = (
    'the A2A agent "{name}" asks for authentication (auth-required), which subagentd does not'
    " give; its task was cancelled{said}"
)
CANCELED = 'the A2A agent "{name}" canceled the task without being asked{said}'
UNANSWERED = (
    'the A2A agent "{name}" asked for input and no answer came ({why}); its task was cancelled'
)
NO_TEXT = 'the A2A agent "{name}" ended the task with no text{said}'
SAID = ": {text}"
ENDED = ("completed", "failed", "canceled", "rejected")
PAUSED = ("input-required", "auth-required")
_STATES = {  # a2a-sdk's TaskState names -> the spec's state names
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}


class Lost(Exception):
    """The connection to the remote agent failed; `sent`: the request may have arrived (False:
    the agent's card could not even be read, so nothing was sent)."""

    def __init__(self, error: str, sent: bool = True) -> None:
        super().__init__(error)
        self.sent = sent


class Refused(Exception):
    """The remote agent answered the request with an error."""


@dataclass(eq=False)
class RemoteTurn:
    """One turn's remote task: what is known of it so far."""

    job: Job
    name: str
    task_id: str = ""
    context_id: str = ""
    state: str = "submitted"
    message: str = ""  # the text of the newest status message
    artifacts: dict[str, str] = field(default_factory=dict)  # artifact id -> its text
    usage: dict[str, Any] | None = None  # the newest usage the remote metadata gave
    earlier: set[str] = field(default_factory=set)  # artifact and task ids of earlier turns
    cancel_sent: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


def refusal(options: Mapping[str, Any]) -> str | None:
    """Why --a2a-agent cannot serve (one `cannot start:` line), before anything is opened."""
    pairs = options.get("a2a_agent") or ()
    if not pairs:
        return None
    from subagentd.extras import missing

    lacking = missing("a2a", "--a2a-agent")
    if lacking is not None:
        return lacking
    names = [name for name, _ in pairs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        return f"--a2a-agent {twice} is given twice: one URL per NAME"
    return None


def wire(connection: Connection, options: Mapping[str, Any], main: Any) -> Any:
    """With --a2a-agent: remote children's turns taken ahead of everything else, their runner
    served beside `main` (what anyio runs) and stopped with the connection's runs; the new
    main. Without it, `main` itself."""
    pairs = options.get("a2a_agent") or ()
    if not pairs:
        return main
    children = A2aChildren(connection.service, dict(pairs))
    # no --max-running slot: a remote turn runs no process here
    remote = Runner(
        connection.service, children, root="", max_running=1_000_000, claims=children.claims
    )
    remote.attach(connection)  # offered before the turn runner attached earlier
    earlier_stop, earlier_kill = connection.stop_runs, connection.kill_runs

    async def stop_runs() -> None:
        await remote.stop(options["shutdown_grace"])
        if earlier_stop is not None:
            await earlier_stop()

    def kill_runs() -> None:
        remote.kill_all()
        if earlier_kill is not None:
            earlier_kill()

    connection.stop_runs, connection.kill_runs = stop_runs, kill_runs

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(remote.serve)
            await main()
            tg.cancel_scope.cancel()

    return serve


class A2aChildren:
    """The executor of remote children's turns (see the module docstring), for a runner of its
    own: taken ahead of the turn runner (a remote child's turn never reaches it)."""

    def __init__(self, service: Service, agents: dict[str, str]) -> None:
        self.service = service
        self.agents = agents  # NAME -> URL
        self.names: dict[str, str | None] = {}  # agent id -> its A2A agent's NAME (None: local)
        self.clients: dict[str, Any] = {}  # NAME -> a2a-sdk client
        self.turns: dict[str, RemoteTurn] = {}  # turn id -> its remote task
        self._http: Any = None
        self._runner: Runner | None = None

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "serving() first"
        return self._runner

    def claims(self, agent_id: str) -> bool:
        """A subagent spawned with `agent: {a2a: NAME}` (its descriptor says so)."""
        return self.remote_name(agent_id) is not None

    def remote_name(self, agent_id: str) -> str | None:
        if agent_id not in self.names:
            try:
                body = self.service.stored_descriptor(agent_id)
                choice = parse_descriptor(body).agent if body is not None else None
            except Exception:  # an ordinary session has no descriptor worth reading
                choice = None
            self.names[agent_id] = choice.a2a if choice is not None else None
        return self.names[agent_id]

    @contextlib.asynccontextmanager
    async def serving(self, runner: Runner) -> AsyncIterator[None]:
        """The HTTP client the remote agents are reached with, while the runner serves."""
        import httpx

        self._runner = runner
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(CONNECT_TIMEOUT, read=None))
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._http.aclose()

    async def stop(self, jobs: list[Job], grace: float) -> None:
        """At shutdown (the turns already ended): each remote task still running is cancelled,
        up to `grace` seconds for the cancels; then each turn is left (it ends `aborted`)."""
        with anyio.move_on_after(grace):
            async with anyio.create_task_group() as tg:
                for turn in list(self.turns.values()):
                    turn.job.interrupted = True
                    tg.start_soon(self._cancel_task, turn)
        for turn in list(self.turns.values()):
            turn.scope.cancel()

    def kill(self, job: Job) -> None:
        turn = self.turns.get(job.start.turn_id)
        if turn is not None:
            turn.scope.cancel()

    async def stopped(self, grace: float) -> None:
        pass

    # --- interrupts ----------------------------------------------------------------------

    def interrupt(self, job: Job, tg: anyio.abc.TaskGroup) -> None:
        turn = self.turns.get(job.start.turn_id)
        if turn is None:  # being set up: its run sees the job interrupted
            return
        tg.start_soon(self._cancel_task, turn)
        tg.start_soon(self._leave_after_grace, turn)

    async def _cancel_task(self, turn: RemoteTurn) -> None:
        """CancelTask, once the remote task's id is known (else when it becomes known)."""
        if not turn.task_id or turn.cancel_sent or turn.state in ENDED:
            return
        turn.cancel_sent = True
        from a2a.types import CancelTaskRequest

        try:
            client = await self._client(turn.name)
            await client.cancel_task(CancelTaskRequest(id=turn.task_id))
        except Exception as exc:  # the task may have ended meanwhile: its end says so
            log.info("CancelTask of %s at %s: %s", turn.task_id, turn.name, exc)

    async def _leave_after_grace(self, turn: RemoteTurn) -> None:
        await anyio.sleep(self.service.settings.interrupt_grace)
        if not turn.job.done:
            turn.scope.cancel()  # ends `aborted`: the remote task is left to its cancel

    # --- one turn ------------------------------------------------------------------------

    async def run(self, job: Job) -> None:
        start = job.start
        name = self.remote_name(start.agent_id) or ""
        turn = RemoteTurn(job, name)
        self.turns[start.turn_id] = turn
        reason, output = "error", None
        try:
            with turn.scope:
                reason, output = await self._turn(turn)
            if turn.scope.cancelled_caught:
                reason, output = "aborted", None
            if job.interrupted and reason != "completed":  # a completion that raced it stands
                reason, output = "aborted", None
            await self._finish(turn, reason, output)
        finally:
            job.done = True
            self.turns.pop(start.turn_id, None)

    async def _turn(self, turn: RemoteTurn) -> tuple[str, str | None]:
        start = turn.job.start
        name = turn.name
        if name not in self.agents:
            return "error", NOT_LISTED.format(name=name)
        turn.context_id, turn.earlier = self._stored_context(start.agent_id)
        # the messages' text only: the turn's instructions speak of tools a remote agent lacks
        parts = ["\n".join(b.text for b in m.content) for m in start.messages]
        text = "\n\n".join(p for p in parts if p)
        message_id, answers = start.turn_id, 0
        while True:
            try:
                await self._send(turn, text, message_id)
            except Refused as exc:
                return "error", REFUSED.format(name=name, error=exc)
            except Lost as exc:
                if not turn.task_id:
                    if not exc.sent:
                        return "error", NOT_REACHED.format(name=name, error=exc)
                    return "error", UNKNOWN.format(name=name, error=exc, tries=RETRIES)
                try:
                    await self._follow(turn)
                except (Lost, Refused) as again:
                    return "error", UNKNOWN.format(name=name, error=again, tries=RETRIES)
            if turn.state == "auth-required" and not turn.job.interrupted:
                await self._cancel_task(turn)  # nobody here can sign it in: it is not left open
            if turn.state != "input-required" or turn.job.interrupted:
                return self._ending(turn)
            answer = await self._ask(turn)
            if answer is None:
                await self._cancel_task(turn)
                return "error", UNANSWERED.format(name=name, why=turn.message)
            answers += 1
            text, message_id = answer, f"{start.turn_id}.{answers}"

    def _ending(self, turn: RemoteTurn) -> tuple[str, str | None]:
        name, state = turn.name, turn.state
        said = SAID.format(text=turn.message) if turn.message else ""
        if turn.job.interrupted:
            return "aborted", None
        if state == "completed":
            texts = [turn.message] if turn.message else []
            texts += [t for t in turn.artifacts.values() if t and t not in texts]
            if not texts:
                return "error", NO_TEXT.format(name=name, said="")
            return "completed", "\n\n".join(texts)
        if state == "failed":
            return "error", FAILED.format(name=name, said=said)
        if state == "rejected":
            return "refusal", REJECTED.format(name=name, said=said)
        if state == "auth-required":
            return "error", AUTH_REQUIRED.format(name=name, said=said)
        if state == "canceled":
            return "error", CANCELED.format(name=name, said=said)
        return "error", NO_TEXT.format(name=name, said=said)

    async def _send(self, turn: RemoteTurn, text: str, message_id: str) -> None:
        """SendMessage (streamed when the card says so), each event taken in as it comes, until
        the stream ends; a lost connection is retried with the same message id while the
        task's id is unknown (Lost when every try failed)."""
        from a2a.types import Message, Part, Role, SendMessageRequest

        sent = Message(
            message_id=message_id,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            context_id=turn.context_id,
            task_id=turn.task_id if turn.state in PAUSED else "",
        )
        pause, tried, error, reached = RETRY_PAUSE, 0, "", False
        while tried < RETRIES:
            tried += 1
            try:
                client = await self._client(turn.name)
                reached = True
                async for event in client.send_message(SendMessageRequest(message=sent)):
                    await self._take_event(turn, event)
                if turn.state in ("submitted", "working"):  # the stream ended early
                    raise Lost("the stream ended before the task did")
                return
            except Exception as exc:
                if not (isinstance(exc, Lost) or _is_transport(exc)):
                    raise Refused(_said(exc)) from None
                error = _said(exc)
            if turn.task_id:
                raise Lost(error)
            log.warning("A2A agent %s: %s; trying again (%d/%d)", turn.name, error, tried, RETRIES)
            await anyio.sleep(pause)
            pause *= 2
        raise Lost(error, sent=reached)

    async def _follow(self, turn: RemoteTurn) -> None:
        """GetTask until the task is no longer working (the stream that told of it was lost)."""
        from a2a.types import GetTaskRequest

        failures, error = 0, ""
        while True:
            try:
                client = await self._client(turn.name)
                task = await client.get_task(GetTaskRequest(id=turn.task_id))
                failures = 0
            except Exception as exc:
                if not _is_transport(exc):
                    raise Refused(_said(exc)) from None
                failures, error = failures + 1, _said(exc)
                if failures >= RETRIES:
                    raise Lost(error) from None
                await anyio.sleep(RETRY_PAUSE * 2 ** (failures - 1))
                continue
            await self._take_task(turn, task)
            if turn.state not in ("submitted", "working"):
                return
            if turn.job.interrupted:
                await self._cancel_task(turn)
            await anyio.sleep(POLL)

    async def _take_event(self, turn: RemoteTurn, event: Any) -> None:
        """One StreamResponse (or the Task a blocking send answered): into the turn's state and
        the transcript."""
        kind = event.WhichOneof("payload") if hasattr(event, "WhichOneof") else None
        if kind == "task":
            await self._take_task(turn, event.task)
        elif kind == "message":  # a direct answer: the turn's closing message
            context_id = event.message.context_id
            if context_id and context_id != turn.context_id:  # the conversation, kept
                turn.context_id = context_id
                shown = {"agent": turn.name, "task_id": "", "context_id": context_id}
                await self._note(turn, "a2a_task", shown)
            turn.state = "completed"
            turn.message = _text(event.message.parts)
            turn.usage = _usage_in(event.message) or turn.usage
            await self._note(turn, "a2a_status", {"state": "completed", "text": turn.message})
        elif kind == "status_update":
            update = event.status_update
            await self._learn_task(turn, update.task_id, update.context_id)
            await self._take_status(turn, update.status)
            turn.usage = _usage_in(update) or turn.usage
        elif kind == "artifact_update":
            artifact = event.artifact_update.artifact
            text = _text(artifact.parts)
            if event.artifact_update.append:
                text = turn.artifacts.get(artifact.artifact_id, "") + text
            await self._take_artifact(turn, artifact, text)

    async def _take_task(self, turn: RemoteTurn, task: Any) -> None:
        await self._learn_task(turn, task.id, task.context_id)
        # a task an earlier turn had holds that turn's artifacts: only the streamed ones count
        for artifact in () if task.id in turn.earlier else task.artifacts:
            if artifact.artifact_id not in turn.artifacts:
                await self._take_artifact(turn, artifact, _text(artifact.parts))
        turn.usage = _usage_in(task) or turn.usage
        if task.HasField("status"):
            await self._take_status(turn, task.status)

    async def _take_artifact(self, turn: RemoteTurn, artifact: Any, text: str) -> None:
        """An artifact of this turn (one an earlier turn was given is not this turn's output)."""
        if artifact.artifact_id in turn.earlier:
            return
        turn.artifacts[artifact.artifact_id] = text
        shown = {"artifact_id": artifact.artifact_id, "name": artifact.name, "text": text}
        shown["text"] = text[:TEXT_CHARS]
        await self._note(turn, "a2a_artifact", shown)

    async def _learn_task(self, turn: RemoteTurn, task_id: str, context_id: str) -> None:
        if task_id and task_id != turn.task_id:
            turn.task_id = task_id
            turn.context_id = context_id or turn.context_id
            await self._note(
                turn,
                "a2a_task",
                {"agent": turn.name, "task_id": task_id, "context_id": turn.context_id},
            )
            if turn.job.interrupted:  # interrupted before the task's id was known
                await self._cancel_task(turn)

    async def _take_status(self, turn: RemoteTurn, status: Any) -> None:
        state = _STATES.get(_state_name(status.state), "working")
        text = _text(status.message.parts) if status.HasField("message") else ""
        usage = _usage_in(status.message) if status.HasField("message") else None
        turn.usage = usage or turn.usage
        if state == turn.state and text == turn.message:
            return
        turn.state, turn.message = state, text
        await self._note(turn, "a2a_status", {"state": state, "text": text[:TEXT_CHARS]})

    async def _ask(self, turn: RemoteTurn) -> str | None:
        """The remote task asks for input: a question to the child's parent (core/questions.py),
        answered by the parent's send_message; None when it ended unanswered (turn.message then
        says why)."""
        start = turn.job.start
        resolved = anyio.Event()
        box: list[tuple[str, str]] = []

        def resolve(option: Any, why: str, answer: str) -> None:
            box.append((why, answer))
            resolved.set()

        record = self.service.stored_session(start.agent_id)
        question = Question(
            child_id=start.agent_id,
            turn_id=start.turn_id,
            title=turn.message or "(the agent asked for input and said nothing more)",
            kind=None,
            options=[],
            timeout=self.service.settings.question_timeout,
            resolve=resolve,
            free=True,
            label=(record.label or "") if record is not None else "",
        )
        asked: list[bool] = []
        await self.runner.work(
            lambda: asked.append(self.service.questions.ask(question)), start.agent_id
        )
        if not asked or not asked[0]:
            turn.message = "there is no parent to ask"
            return None
        await self._note(
            turn, "question", {"question": question.title, "parent": question.parent_id}
        )
        try:
            await resolved.wait()
            await self.runner.connection.committed()  # the answer (or the cancellation) is durable
        finally:
            if not box:  # cancelled (the runner stops): the question goes with it
                questions = self.service.questions
                await self.runner.work(
                    functools.partial(questions.cancel, start.agent_id, start.turn_id, "ended"),
                    start.agent_id,
                )
        why, answer = box[0]
        if why != "answered":
            turn.message = why
            return None
        return answer

    async def _client(self, name: str) -> Any:
        """The agent's a2a-sdk client (its card read once; a failed read is tried again)."""
        client = self.clients.get(name)
        if client is None:
            from a2a.client import ClientConfig, create_client

            config = ClientConfig(streaming=True, httpx_client=self._http)
            client = await create_client(self.agents[name], config)
            self.clients[name] = client
        return client

    async def _note(self, turn: RemoteTurn, kind: str, data: dict[str, Any]) -> None:
        """A transcript event of the turn (while it is still the agent's open turn)."""
        agent_id, turn_id = turn.job.start.agent_id, turn.job.start.turn_id

        def write() -> None:
            if self.runner.current(agent_id, turn_id):
                self.service.record(agent_id, turn_id, kind, data)

        await self.runner.work(write, agent_id)

    async def _finish(self, turn: RemoteTurn, reason: str, output: str | None) -> None:
        """End the turn (unless it ended otherwise), charged the usage the agent reported."""
        agent_id, turn_id = turn.job.start.agent_id, turn.job.start.turn_id
        usage = _usage(turn.usage)
        if reason == "error":
            log.warning("A2A child %s: the turn ends error: %s", agent_id, output)
        detail = {"agent": turn.name, "task_id": turn.task_id, "state": turn.state}

        def record() -> None:
            self.service.record(agent_id, turn_id, "a2a_end", detail)

        await self.runner.finish(turn.job, reason, output, usage, record)

    def _stored_context(self, agent_id: str) -> tuple[str, set[str]]:
        """The contextId the child's last remote task had (`a2a_task` in its transcript), and
        the ids of the tasks and artifacts (`a2a_artifact`) of its earlier turns."""
        found, seen, after = "", set(), None
        while True:
            page = self.service.records.read_transcript(agent_id, after, None)
            for event in page.events:
                data = event.data if isinstance(event.data, dict) else {}
                if event.type == "a2a_task" and data.get("context_id"):
                    found = str(data["context_id"])
                    seen.add(str(data.get("task_id")))
                elif event.type == "a2a_artifact" and data.get("artifact_id"):
                    seen.add(str(data["artifact_id"]))
            if page.next is None:
                return found, seen
            after = page.next


def _state_name(state: Any) -> str:
    from a2a.types import TaskState

    try:
        return str(TaskState.Name(state))
    except ValueError:
        return ""


def _text(parts: Any) -> str:
    """Text parts joined with newlines; data parts as JSON; files as one line naming them."""
    out = []
    for part in parts:
        kind = part.WhichOneof("content") if hasattr(part, "WhichOneof") else None
        if kind == "text" or (kind is None and getattr(part, "text", "")):
            out.append(part.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToDict

            out.append(msgspec.json.encode(MessageToDict(part.data)).decode())
        elif kind in ("raw", "url"):
            what = part.filename or part.url or "a file"
            out.append(f"[file: {what}]")
    return "\n".join(out).strip()


def _usage_in(holder: Any) -> dict[str, Any] | None:
    """The `usage` object of a message's, task's or event's metadata, when it has one."""
    try:
        if not holder.HasField("metadata"):
            return None
    except ValueError:
        return None
    from google.protobuf.json_format import MessageToDict

    usage = MessageToDict(holder.metadata).get("usage")
    return usage if isinstance(usage, dict) else None


def _usage(reported: dict[str, Any] | None) -> Usage | None:
    """The remote metadata's usage (input_tokens, output_tokens, cost; camelCase too), bounded."""
    if not reported:
        return None

    def number(*keys: str) -> float:
        for key in keys:
            value = reported.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return float(value)
        return 0.0

    tokens_in = number("input_tokens", "inputTokens")
    tokens_out = number("output_tokens", "outputTokens")
    cost = number("cost")
    if not (tokens_in or tokens_out or cost):
        return None
    return Usage(
        input_tokens=min(int(tokens_in), COUNT_MAX),
        output_tokens=min(int(tokens_out), COUNT_MAX),
        cost=min(cost, MONEY_MAX),
    )


def _is_transport(exc: BaseException) -> bool:
    """A failure of the connection (the request may or may not have arrived), not an answer."""
    import httpx
    from a2a.client.errors import A2AClientError

    return isinstance(exc, A2AClientError | httpx.TransportError | OSError)


def _said(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:500]
