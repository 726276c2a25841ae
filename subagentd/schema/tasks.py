"""MCP tasks: in the core of protocol version 2025-11-25 (a task-augmented `tools/call` and the
`tasks/*` methods), and as the 2026-07-28 extension `io.modelcontextprotocol/tasks` (a
`resultType: "task"` result, `tasks/get` with a DetailedTask, `tasks/update`, `tasks/cancel`).

One task is one delegation (PROTOCOL.md section 5, Tasks): `spawn_agent`, or `send_message` to
an idle or ready child, called with `params.task`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from subagentd.schema.base import Params, Wire

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
TASKS_VERSIONS = frozenset({"2025-11-25"})  # the handshake versions whose core has tasks

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
TASK_HINT_META = "subagentd/task"
"""`_meta` of a declaring `tools/call`: `true` asks for the delegation as a task (2026-07-28)."""
REQUIRED_CAPABILITIES: dict[str, object] = {
    "requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
}
"""`data` of the -32021 a stateless-era request gets for the extension's methods undeclared."""

SERVER_CAPABILITY: dict[str, object] = {
    "list": {},
    "cancel": {},
    "requests": {"tools": {"call": {}}},
}
"""`capabilities.tasks` of initialize, for a version in TASKS_VERSIONS."""

TtlMs = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]


class TaskMetadata(Wire, kw_only=True):
    """`params.task` of a task-augmented request: the lifetime the client asks for."""

    ttl: TtlMs | None = None


class ToolExecution(Wire, kw_only=True):
    """A Tool's `execution`: whether it may be called as a task."""

    taskSupport: Literal["forbidden", "optional", "required"]


class Task(Wire, kw_only=True):
    """MCP Task. `ttl` is always present (null: unlimited)."""

    taskId: str
    status: TaskStatus
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttl: int | None
    pollInterval: int | None = None


class CreateTaskResult(Wire, kw_only=True):
    task: Task
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class TaskIdParams(Params, kw_only=True):
    """`tasks/get`, `tasks/result`, `tasks/cancel`."""

    taskId: str


class TasksListParams(Params, kw_only=True):
    cursor: str | None = None


class TasksListResult(Wire, kw_only=True):
    tasks: list[Task]
    nextCursor: str | None = None


class TaskStatusNotification(Task, kw_only=True):
    """`notifications/tasks/status`: the whole task, as `tasks/get` answers it."""


class ExtensionTask(Wire, kw_only=True):
    """A Task of the 2026-07-28 extension: flat, `ttlMs` always present (null: unlimited)."""

    taskId: str
    status: TaskStatus
    statusMessage: str | None = None
    createdAt: str
    lastUpdatedAt: str
    ttlMs: int | None
    pollIntervalMs: int | None = None


class ExtensionCreateTaskResult(ExtensionTask, kw_only=True):
    """`tools/call` answered as a task (2026-07-28 extension)."""

    resultType: Literal["task"]


class DetailedTask(ExtensionTask, kw_only=True):
    """`tasks/get` (2026-07-28 extension): `result` when completed, `error` when failed."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # `input_required`: the child's open question as an `elicitation/create` request, by key
    inputRequests: dict[str, Any] | None = None


SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"


class ListenParams(Params, kw_only=True):
    """`subscriptions/listen` (2026-07-28): the notifications asked for; subagentd honours the
    tasks extension's `taskIds` (its other kinds are not sent: nothing here changes them)."""

    notifications: dict[str, Any] | None = None


class ListenAcknowledged(Wire, kw_only=True):
    """`notifications/subscriptions/acknowledged`: what this stream will carry."""

    notifications: dict[str, Any]
    meta: dict[str, Any] = msgspec.field(name="_meta")


class TaskUpdateParams(Params, kw_only=True):
    """`tasks/update` (2026-07-28 extension): answers to a task's `inputRequests`."""

    taskId: str
    inputResponses: dict[str, Any] | None = None


class TaskInput(Wire, kw_only=True):
    """A working task's child asked (or its question ended: `request` None): for a connection
    that negotiated 2025-11-25 and declared `elicitation`, written as an `elicitation/create`
    with the related-task `_meta` (or its withdrawal), server/dispatcher.py."""

    taskId: str
    key: str
    request: dict[str, Any] | None = None
