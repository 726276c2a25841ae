"""MCP tasks: one task is one delegation, ended by that child's settling (2025-11-25's tasks,
and the 2026-07-28 extension's view of the same rows: `flat_task`, `detailed_task`).

A task is created in the transaction of the spawn (or send_message) it stands for, owned by the
calling agent, and seen only by that agent and its ancestors (a task outside the caller's
subtree is "not found", exactly like one that does not exist). It is `working` until the child
settles: then `completed` (its last turn completed) or `failed` (any other end: an error, a
crash, a stop), its result what `wait_agents` for that child would answer — the reports and the
settlement notice, consumed as a wait consumes them. `tasks/cancel` interrupts the child's
current turn by `interrupt_agent`'s rules, then marks the task `cancelled`. The rows are
storage/tasks.py's; the wire is mcp/tasks.py's. PROTOCOL.md section 5, Tasks.

Longer than ~300 lines on purpose: a task's whole life — created with its delegation, found only
inside the caller's subtree, ended by the child's settling or a cancel — reads in one place.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import msgspec

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.delegation import Delegation
from subagentd.core.questions import Question, Questions
from subagentd.core.stamps import now, stamp
from subagentd.core.tools import ToolRules
from subagentd.errors import InvalidParamsError, QuotaExceededError, SubagentdError
from subagentd.schema.notifications import Progress
from subagentd.schema.records import TaskRecord
from subagentd.schema.tasks import (
    TERMINAL,
    DetailedTask,
    Task,
    TaskInput,
    TaskStatusNotification,
)
from subagentd.schema.tools import InterruptAgentArgs, WaitAgentsResult

POLL_MS = 1000  # the pollInterval every task suggests
DEFAULT_TTL_MS = 24 * 3600 * 1000  # a task's lifetime when the client asks for none
MAX_TTL_MS = 30 * 24 * 3600 * 1000  # the longest lifetime granted
PAGE = 100  # tasks/list page size
TASK_TOOLS = ("spawn_agent", "send_message")

_encode = msgspec.json.Encoder().encode


class TaskRules:
    """The tasks' rules; `watching` holds the working tasks this process may end."""

    def __init__(
        self, agents: Agents, delegation: Delegation, tools: ToolRules, questions: Questions
    ) -> None:
        self.agents = agents
        self.questions = questions
        questions.asked = self._asked
        questions.over = self._over
        self.answering: str | None = None  # the key a task's elicitation response answers
        self.store = agents.store
        self.delegation = delegation
        self.tools = tools
        self.watching: dict[str, TaskRecord] | None = None  # None: not read from storage yet
        # whether write transactions must end with `check` (tasks may be working): kept with
        # `watching`, read as a plain attribute by every write transaction (core/service.py)
        self.pending = True
        self.tokens: dict[str, str | int] = {}  # progress tokens of tasks created here

    # --- creation ------------------------------------------------------------------------

    def check_quota(self, owner: str) -> None:
        limit = self.agents.settings.max_tasks
        if limit and self.store.count_working([owner]) >= limit:
            raise QuotaExceededError(
                texts.QUOTA_TASKS.format(id=texts.shown(owner), limit=limit), "max-tasks", limit
            )

    def delegate(
        self,
        owner: str,
        tool: str,
        run: Callable[[], tuple[dict[str, Any], str]],
        ttl_ms: int | None,
        token: str | int | None,
    ) -> Task:
        """The delegation `run` makes (its structured output and the child it names) and its
        working task, in one savepoint of the request's write transaction: both or neither."""
        with self.store.atomic():
            output, child = run()
            return self.create(owner, child, tool, output, ttl_ms, token)

    def create(
        self,
        owner: str,
        agent_id: str,
        tool: str,
        output: dict[str, Any],
        ttl_ms: int | None,
        token: str | int | None,
    ) -> Task:
        """A working task for this delegation, in the current write transaction."""
        record = self._record(owner, agent_id, tool, output, ttl_ms, token, "working")
        record.status_message = texts.TASK_WORKING.format(id=texts.shown(agent_id))
        self.store.insert_task(record)
        self._watching()[record.task_id] = record
        self.pending = True
        if token is not None:
            self.tokens[record.task_id] = token
            self._progress(token, 0, texts.TASK_WORKING.format(id=texts.shown(agent_id)))
        return task_view(record)

    def create_failed(
        self,
        owner: str,
        tool: str,
        error: SubagentdError,
        ttl_ms: int | None,
        token: str | int | None,
    ) -> Task:
        """A refused delegation asked for as a task: a task already `failed`, its status message
        the reason, its result the tool error (`isError: true`), so `tasks/result` returns what
        the call would have."""
        record = self._record(owner, "", tool, {}, ttl_ms, token, "failed")
        record.status_message = error.message
        record.result = _encode(_tool_result([texts.REFUSED + error.message], None, True)).decode()
        self.store.insert_task(record)
        return task_view(record)

    def _record(
        self,
        owner: str,
        agent_id: str,
        tool: str,
        output: dict[str, Any],
        ttl_ms: int | None,
        token: str | int | None,
        status: str,
    ) -> TaskRecord:
        ttl = DEFAULT_TTL_MS if ttl_ms is None else min(ttl_ms, MAX_TTL_MS)
        at = self.store.clock()
        created = stamp(at)
        return TaskRecord(
            task_id=secrets.token_urlsafe(24),  # 192 random bits: not guessable
            owner_id=owner,
            agent_id=agent_id,
            tool=tool,
            status=status,
            status_message=None,
            created_at=created,
            updated_at=created,
            ttl_ms=ttl,
            poll_ms=POLL_MS,
            expires_at=at + ttl / 1000,
            output=_encode(output).decode(),
            result=None,
            progress_token=None if token is None else _encode(token).decode(),
        )

    # --- reading -------------------------------------------------------------------------

    def find(self, caller: str | None, task_id: str) -> TaskRecord:
        """The task, if the caller may see it: asked for by the caller or an agent below it, and
        not expired; anything else is the same -32602 as a task that does not exist."""
        record = self.store.get_task(task_id) if caller else None
        if (
            record is None
            or self._expired(record)
            or not self._below(record.owner_id, caller or "")
        ):
            raise InvalidParamsError(texts.TASK_NOT_FOUND.format(id=task_id))
        return self._held(record)

    def _held(self, record: TaskRecord) -> TaskRecord:
        """A working task whose child's question is open is `input_required` (as read: it is
        `working` again once the question ends); one whose child's tree a spent budget holds
        says so in its status message (it works on once the budget is raised)."""
        if record.status == "working" and self.questions.open_question(record.agent_id):
            record.status = "input_required"
            record.status_message = texts.TASK_INPUT_REQUIRED.format(
                id=texts.shown(record.agent_id)
            )
        elif record.status == "working":
            held = self.agents.registry.held_tree(record.agent_id)
            if held is not None:
                why = texts.held_why(record.agent_id, held.budget, held.agent_id)
                shown = texts.shown(record.agent_id)
                record.status_message = texts.TASK_HELD.format(id=shown, why=why)
        return record

    def input_requests(self, record: TaskRecord) -> dict[str, Any] | None:
        """An `input_required` task's `inputRequests` (the 2026-07-28 extension): the child's
        open question, keyed."""
        if record.status != "input_required":
            return None
        request = self.questions.input_request(record.agent_id)
        return None if request is None else {request[0]: request[1]}

    def update(self, caller: str | None, task_id: str, responses: dict[str, Any]) -> None:
        """`tasks/update`: each response whose key is the child's open question answers it;
        any other key is ignored (not outstanding). The task is working again."""
        record = self.find(caller, task_id)
        child = self.agents.registry.get(record.agent_id)
        if child is None or record.status != "input_required":
            return
        for key, response in responses.items():
            self.questions.answer_input(child, key, response)

    def _asked(self, question: Question) -> None:
        """A child with a working task asked: the task's input request, for a 2025-11-25 client
        that can show it (TaskInput)."""
        request = self.questions.input_request(question.child_id)
        for record in self._watching().values():
            if record.agent_id == question.child_id and request is not None:
                self.agents.emit(
                    "tasks/input",
                    TaskInput(taskId=record.task_id, key=request[0], request=request[1]),
                )

    def _over(self, question: Question) -> None:
        """Its question ended: the elicitation withdrawn, unless its own response answered it."""
        if question.key == self.answering:
            return
        for record in self._watching().values():
            if record.agent_id == question.child_id:
                self.agents.emit("tasks/input", TaskInput(taskId=record.task_id, key=question.key))

    def answer_input(
        self, caller: str | None, task_id: str, key: str, response: dict[str, Any]
    ) -> None:
        """The response to a task's elicited input (2025-11-25): as `tasks/update` answers it.
        `caller`: the connection's own root, when it has one."""
        record = self.find(caller, task_id) if caller else self.store.get_task(task_id)
        child = None if record is None else self.agents.registry.get(record.agent_id)
        self.answering = key
        try:
            if child is None or not self.questions.answer_input(child, key, response):
                raise InvalidParamsError(texts.USER_NO_QUESTION.format(id=texts.shown(key)))
        finally:
            self.answering = None

    def page(self, caller: str | None, cursor: str | None) -> tuple[list[Task], str | None]:
        """One page of the caller's subtree's tasks, in creation order; the cursor names the
        last task of the previous page."""
        if caller is None:
            if cursor is not None:
                raise InvalidParamsError(texts.TASK_BAD_CURSOR.format(cursor=cursor))
            return [], None
        owners = [caller, *(row[0] for row in self.store.tree_rows(caller, True))]
        after = None
        if cursor is not None:
            last = self.store.get_task(cursor)
            if last is None or not self._below(last.owner_id, caller):
                raise InvalidParamsError(texts.TASK_BAD_CURSOR.format(cursor=cursor))
            after = (last.created_at, last.task_id)
        rows = self.store.tasks_page(owners, after, self.store.clock(), PAGE + 1)
        tasks = [task_view(self._held(r)) for r in rows[:PAGE]]
        return tasks, rows[PAGE - 1].task_id if len(rows) > PAGE else None

    def _expired(self, record: TaskRecord) -> bool:
        return record.expires_at is not None and record.expires_at <= self.store.clock()

    def _below(self, owner: str, caller: str) -> bool:
        """Whether `owner` is `caller` or a session below it (durable parent links)."""
        current: str | None = owner
        for _ in range(66):  # --max-depth is at most 64
            if current is None or current == caller:
                break
            session = self.store.get_session(current)
            current = None if session is None else session.parent_id
        return current is not None and current == caller

    def result(self, record: TaskRecord) -> dict[str, Any] | None:
        """A terminal task's result, as `tasks/result` returns it (None while it works)."""
        if record.status not in TERMINAL or record.result is None:
            return None
        answer: dict[str, Any] = msgspec.json.decode(record.result)
        answer["_meta"] = {"io.modelcontextprotocol/related-task": {"taskId": record.task_id}}
        return answer

    def result_check(self, task_id: str) -> Callable[[bool], Any]:
        """A Waits check for `tasks/result`: the result once the task is terminal (or expired)."""

        def check(timed_out: bool) -> Any:
            record = self.store.get_task(task_id)
            gone = record is None or self._expired(record)
            answer = None if record is None or gone else self.result(record)
            if answer is None and (gone or timed_out):  # its lifetime ended while it waited
                return _tool_result([texts.TASK_NOT_FOUND.format(id=task_id)], None, True)
            return answer

        return check

    def wait_ms(self, record: TaskRecord) -> int:
        """How long a tasks/result may wait: until the task's lifetime ends."""
        if record.expires_at is None:
            return MAX_TTL_MS
        return max(0, int((record.expires_at - self.store.clock()) * 1000))

    # --- cancellation --------------------------------------------------------------------

    def cancel(self, caller: str | None, task_id: str) -> Task:
        record = self.find(caller, task_id)
        if record.status in TERMINAL:
            raise InvalidParamsError(texts.TASK_TERMINAL.format(id=task_id, status=record.status))
        try:  # interrupt_agent's rules, as the agent that asked for the task
            self.tools.interrupt_agent(
                record.owner_id, None, InterruptAgentArgs(agent_id=record.agent_id)
            )
        except SubagentdError:
            pass  # the asker is not live here (or the child is gone): the task is cancelled anyway
        text = texts.TASK_CANCELLED.format(id=texts.shown(record.agent_id))
        self._finish(record, "cancelled", text, _tool_result([text], None, True))
        return task_view(record)

    # --- settling ------------------------------------------------------------------------

    def check(self) -> None:
        """End every watched task whose child settled, for an asker live here or live nowhere
        (it settled before its child: the process that sees the child settled ends the task;
        finish_task ends it once). Called at the end of each write transaction while tasks are
        working, before the waits are judged."""
        watching = self._watching()
        if not watching:
            return
        status = None  # read only when a task may be ended here (it reads other leases)
        registry = self.agents.registry
        for task_id, record in list(watching.items()):
            status = status or self.agents.status_lookup()
            if registry.get(record.owner_id) is None and status(record.owner_id) != "ready":
                continue  # its asker is live in another process: that one ends the task
            if status(record.agent_id) != "ready":
                continue
            fresh = self.store.get_task(task_id)
            if fresh is None or fresh.status != "working":
                del watching[task_id]
                continue
            self._settle(fresh)
        self.pending = bool(watching)

    def _settle(self, record: TaskRecord) -> None:
        answer = self.delegation.collect_settled(record.owner_id, record.agent_id)
        session = self.store.get_session(record.agent_id)
        reason = session.last_reason if session is not None else None
        ended = answer.agents[0].reason or reason  # the notice's reason, else the stored one
        completed = ended == "completed"
        line = texts.SETTLED_FIRST_LINE.get(ended or "")
        first = line.format(id=texts.shown(record.agent_id)) if line else answer.blocks[-1]
        output: dict[str, Any] = msgspec.json.decode(record.output)
        result = _tool_result(answer.blocks, _structured(answer, output), not completed)
        self._finish(record, "completed" if completed else "failed", first, result)

    def _finish(
        self, record: TaskRecord, status: str, message: str, result: dict[str, Any]
    ) -> None:
        at = now()
        if self.store.finish_task(record.task_id, status, message, at, _encode(result).decode()):
            record.status, record.status_message, record.updated_at = status, message, at
            record.result = _encode(result).decode()
            task = task_view(record)
            self.agents.emit(
                "notifications/tasks/status",
                TaskStatusNotification(**{f: getattr(task, f) for f in task.__struct_fields__}),
            )
            # the extension's (2026-07-28), written only to a subscriptions/listen for the task
            self.agents.emit("notifications/tasks", detailed_task(record))
            token = self.tokens.pop(record.task_id, None)
            if token is not None:
                self._progress(token, 1, message)
        watching = self._watching()
        watching.pop(record.task_id, None)
        self.pending = bool(watching)

    def _progress(self, token: str | int, progress: int, message: str) -> None:
        self.agents.emit(
            "notifications/progress",
            Progress(progressToken=token, progress=progress, total=1, message=message),
        )

    def _watching(self) -> dict[str, TaskRecord]:
        if self.watching is None:
            self.watching = {r.task_id: r for r in self.store.working_tasks()}
            self.pending = bool(self.watching)
        return self.watching

    def reload(self) -> None:
        """After a lost commit group: what works is what storage says (read again when needed)."""
        self.watching = None
        self.pending = True


def task_view(record: TaskRecord) -> Task:
    return Task(
        taskId=record.task_id,
        status=record.status,  # type: ignore[arg-type]  # stored from TaskStatus only
        statusMessage=record.status_message,
        createdAt=record.created_at,
        lastUpdatedAt=record.updated_at,
        ttl=record.ttl_ms,
        pollInterval=record.poll_ms,
    )


def flat_task(task: Task) -> dict[str, Any]:
    """A task's fields as the extension names them; a 2025 `failed` (a delegation that did not
    complete: a tool-level failure, its result `isError`) is the extension's `completed`."""
    return {
        "taskId": task.taskId,
        "status": "completed" if task.status == "failed" else task.status,
        "statusMessage": task.statusMessage,
        "createdAt": task.createdAt,
        "lastUpdatedAt": task.lastUpdatedAt,
        "ttlMs": task.ttl,
        "pollIntervalMs": task.pollInterval,
    }


def detailed_task(record: TaskRecord, inputs: dict[str, Any] | None = None) -> DetailedTask:
    """`tasks/get` in the extension: the task with its result inlined once it has one, and
    `inputRequests` while `input_required`. A delegation ends in no JSON-RPC error, so
    `failed` never shows there."""
    fields = flat_task(task_view(record))
    result = None
    if record.status != "cancelled" and record.result is not None:
        result = msgspec.json.decode(record.result)
    return DetailedTask(**fields, result=result, inputRequests=inputs)


def _structured(answer: WaitAgentsResult, output: dict[str, Any]) -> dict[str, Any]:
    """wait_agents' structured fields, with the tool's own (child_id / message_id) kept, so the
    result also matches the tool's outputSchema."""
    fields = msgspec.to_builtins(answer)
    fields.pop("blocks", None)
    for name, value in output.items():
        if name != "text":
            fields[name] = value
    return fields  # type: ignore[no-any-return]


def _tool_result(
    blocks: list[str], structured: dict[str, Any] | None, is_error: bool
) -> dict[str, Any]:
    # one block, the blocks joined as `text` is: a client that shows only the first loses nothing
    result: dict[str, Any] = {"content": [{"type": "text", "text": "\n".join(blocks)}]}
    if structured is not None:
        result["structuredContent"] = structured
    result["isError"] = is_error
    return result
