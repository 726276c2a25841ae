"""The A2A methods of the face (a2a-sdk's `RequestHandler`), each a call into the serving subagentd:
SendMessage without `taskId` is `spawn_agent`, with it `send_message` (the message's `messageId`
is the idempotency key: a retry is not applied twice); CancelTask is `interrupt_agent`; GetTask,
ListTasks and the streams read the child's agent resource and transcript (docs/a2a.md).

Longer than ~300 lines on purpose: a2a-sdk's `RequestHandler` is one abstract class, and all
eleven of its methods (the four push-notification ones refused) live on the one subclass."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import anyio
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
)

from subagentd.a2a.states import (
    MOVING,
    agent_state,
    build_task,
    message_text,
    state_of,
    status_of,
    text_message,
)
from subagentd.a2a.tree import Refused, Tree

LOOK = 1.0  # seconds between looks at a followed task when nothing woke the face sooner
CANCEL_WAIT = 30.0  # seconds CancelTask waits for the interrupted turn to end
LABEL_CHARS = 60


@dataclass(frozen=True)
class Quotas:
    """The face's bounds (docs/a2a.md, "Limits")."""

    max_body_bytes: int = 1 << 20
    max_streams: int = 32
    max_tasks_per_client: int = 16


class Face(RequestHandler):
    """The A2A methods for one root."""

    def __init__(self, tree: Tree, quotas: Quotas) -> None:
        self.tree, self.quotas = tree, quotas
        self.streams = 0
        self.started_by: dict[str, list[str]] = {}  # client address: tasks it started here

    # --- messages ---------------------------------------------------------------------------

    async def _target(self, message: Message) -> str:
        """The task a message continues: its taskId, else a contextId naming one of ROOT's
        children (each task is its own context), else "" (a new task)."""
        if message.task_id:
            return str(message.task_id)
        if message.context_id and await self.tree.agent(message.context_id) is not None:
            return str(message.context_id)
        return ""

    async def _send(
        self, params: SendMessageRequest, context: ServerCallContext, target: str
    ) -> str:
        """Spawn or follow up; the task id. A retried messageId is answered as the first was."""
        message = params.message
        if not message.message_id:
            raise InvalidParamsError(message="message.messageId is required")
        text = message_text(message)
        if not text.strip():
            raise InvalidParamsError(message="the message holds no text for the subagent")
        key = f"a2a:{message.message_id}"
        try:
            if target:
                if await self.tree.agent(target) is None:
                    raise TaskNotFoundError(message=f"task not found: {target}")
                args = {"subagent_id": target, "message": text}
                await self.tree.tool("send_message", args, key)
                return target
            client = context.state.get("client", "")
            await self._admit(client)
            label = _label(message, text)
            spawned = await self.tree.tool("spawn_agent", {"label": label, "prompt": text}, key)
        except Refused as refused:
            raise InvalidParamsError(message=refused.text, data={"code": refused.code}) from None
        task_id: str = spawned["child_id"]
        started = self.started_by.setdefault(client, [])
        if task_id not in started:
            started.append(task_id)
        return task_id

    async def _admit(self, client: str) -> None:
        """At most max_tasks_per_client unsettled tasks started by one client address."""
        mine = self.started_by.get(client)
        if not mine:
            return
        live = {row["id"] for row in await self.tree.children() if row["status"] != "ready"}
        self.started_by[client] = kept = [t for t in mine if t in live]
        if len(kept) >= self.quotas.max_tasks_per_client:
            raise InvalidRequestError(
                message=f"this client has {len(kept)} tasks working, its quota"
                f" (--max-tasks-per-client {self.quotas.max_tasks_per_client});"
                " wait for one to end or cancel one",
                data={"quota": "max-tasks-per-client"},
            )

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        target = await self._target(params.message)
        after = await self._newest(target) if target else None
        task_id = await self._send(params, context, target)
        if not params.configuration.return_immediately:
            async for _ in self._follow(task_id, after):
                pass
        return await self._task(task_id, _history(params.configuration, "history_length"))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async with self._stream():
            target = await self._target(params.message)
            after = await self._newest(target) if target else None
            task_id = await self._send(params, context, target)
            async for event in self._updates(task_id, after, await self._task(task_id, 0)):
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        async with self._stream():
            task = await self._task(params.id, 0)
            async for event in self._updates(params.id, await self._newest(params.id), task):
                yield event

    def _stream(self) -> Any:
        face = self

        class Slot:
            async def __aenter__(self) -> None:
                if face.streams >= face.quotas.max_streams:
                    raise InvalidRequestError(
                        message=f"{face.streams} streams are open, the quota"
                        f" (--max-streams {face.quotas.max_streams}); close one or poll GetTask",
                        data={"quota": "max-streams"},
                    )
                face.streams += 1

            async def __aexit__(self, *_: object) -> None:
                face.streams -= 1

        return Slot()

    async def _updates(self, task_id: str, after: int | None, first: Task) -> AsyncGenerator[Event]:
        """The task, then a status update for each change, until it stops moving."""
        yield first
        if first.status.state not in MOVING:
            return
        async for agent, note in self._follow(task_id, after, first.status.state):
            yield TaskStatusUpdateEvent(
                task_id=task_id, context_id=task_id, status=status_of(agent, note)
            )

    async def _follow(
        self, task_id: str, after: int | None, shown: int | None = None
    ) -> AsyncGenerator[tuple[dict[str, Any], Message | None]]:
        """Each change of the child (a turn started or ended, a report, a new state) after
        transcript event `after`, until it stops moving: (its agent resource, a note to show)."""
        await self.tree.watch(task_id)
        while True:
            notes: list[Message] = []
            ends: list[Message] = []
            for event in await self.tree.events(task_id, after):
                after = event["seq"]
                data = event.get("data") or {}
                if event["type"] == "report" and data.get("output"):
                    notes.append(text_message(data["output"], task_id, f"report-{after}"))
                elif event["type"] == "turn_end" and data.get("output"):
                    ends.append(text_message(data["output"], task_id, data.get("turn_id", "")))
            agent = await self.tree.agent(task_id)
            if agent is None:
                raise TaskNotFoundError(message=f"task not found: {task_id}")
            state = agent_state(agent)
            if state in MOVING:  # a turn that ended with more to come: its closing message
                notes.extend(ends)
            for note in notes:
                yield agent, note
            if shown != state:
                yield agent, None
                shown = state
            if state not in MOVING:
                return
            await self.tree.changed(LOOK)

    async def _newest(self, task_id: str) -> int | None:
        """The seq of the task's newest transcript event (TaskNotFoundError for another id)."""
        if await self.tree.agent(task_id) is None:
            raise TaskNotFoundError(message=f"task not found: {task_id}")
        events = await self.tree.events(task_id)
        return events[-1]["seq"] if events else None

    async def _task(self, task_id: str, history_length: int | None) -> Task:
        agent = await self.tree.agent(task_id)
        if agent is None:
            raise TaskNotFoundError(message=f"task not found: {task_id}")
        events = await self.tree.events(task_id)
        return build_task(agent, events, self.tree.root, history_length)

    # --- tasks --------------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        return await self._task(params.id, _history(params, "history_length"))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        rows = await self.tree.children()
        if params.context_id:
            rows = [row for row in rows if row["id"] == params.context_id]
        if params.status:
            rows = [
                row
                for row in rows
                if state_of(row["status"], row.get("parked") or 0, row.get("ended"))
                == params.status
            ]
        size = min(params.page_size or 50, 100)
        start = int(params.page_token) if params.page_token.isdigit() else 0
        page = rows[start : start + size]
        history = _history(params, "history_length")
        tasks = []
        for row in page:
            agent = await self.tree.agent(row["id"])
            if agent is None:  # settled and gone between the two reads
                continue
            wanted = history != 0 or params.include_artifacts
            events = await self.tree.events(row["id"]) if wanted else []
            tasks.append(build_task(agent, events, self.tree.root, history or 0))
        following = str(start + size) if start + size < len(rows) else ""
        return ListTasksResponse(
            tasks=tasks, next_page_token=following, page_size=size, total_size=len(rows)
        )

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        agent = await self.tree.agent(params.id)
        if agent is None:
            raise TaskNotFoundError(message=f"task not found: {params.id}")
        if agent_state(agent) not in MOVING:
            raise TaskNotCancelableError(
                message=f"task {params.id} is not working: nothing runs to cancel"
            )
        try:
            await self.tree.tool("interrupt_agent", {"agent_id": params.id})
        except Refused as refused:
            raise TaskNotCancelableError(message=refused.text) from None
        with anyio.move_on_after(CANCEL_WAIT):
            while agent is not None and agent["status"] in ("running", "waiting"):
                await self.tree.changed(LOOK)
                agent = await self.tree.agent(params.id)
        return await self._task(params.id, 0)

    # --- not offered --------------------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


def _label(message: Message, text: str) -> str:
    """The subagent's label: metadata `label` when the client gave one, else the text's first
    line, cut."""
    given = message.metadata.fields.get("label")
    if given is not None and given.WhichOneof("kind") == "string_value" and given.string_value:
        label: str = given.string_value
        return label[:LABEL_CHARS]
    first = text.strip().splitlines()[0] if text.strip() else "a2a task"
    return first if len(first) <= LABEL_CHARS else first[: LABEL_CHARS - 1] + "…"


def _history(params: Any, field: str) -> int | None:
    """A request's optional history length (None: not given, so all of it)."""
    if not params.HasField(field):
        return None
    length: int = getattr(params, field)
    return length
