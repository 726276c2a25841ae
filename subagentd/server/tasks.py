"""MCP tasks on the wire (2025-11-25): a task-augmented `tools/call`, and `tasks/get`,
`tasks/result`, `tasks/list`, `tasks/cancel` (core/tasks.py holds the rules).

Served when the negotiated protocol version has tasks in its core (schema/tasks.py
TASKS_VERSIONS); the caller is found as for `tools/call` (server/identity.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from subagentd.core.tasks import TASK_TOOLS, task_view
from subagentd.errors import (
    InvalidParamsError,
    MethodUnknownError,
    QuotaExceededError,
    StorageBusyError,
    StorageFailedError,
    SubagentdError,
)
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t
from subagentd.server.boundary import error_text
from subagentd.server.call import Call
from subagentd.server.identity import caller_identity
from subagentd.server.mcp import ToolSpec, call_tool_result, run_tool
from subagentd.server.methods import method

IMMEDIATE_META = "io.modelcontextprotocol/model-immediate-response"


def serves_tasks(call: Call) -> bool:
    """Whether this request may be task-augmented: a handshake that negotiated 2025-11-25."""
    return call.session.tasks and not call.stateless


def admit_task(call: Call, p: t.ToolsCallParams) -> None:
    """A task-augmented `tools/call` of a tool that cannot be one is -32601, a JSON-RPC error
    (checked before the method runs: the tool's own refusals are `isError` results)."""
    if p.task is not None and serves_tasks(call) and p.name not in TASK_TOOLS:
        raise MethodUnknownError(
            f"tool {p.name} does not support task-augmented calls (execution.taskSupport)",
            {"method": "tools/call", "tool": p.name},
        )


def call_as_task(
    call: Call, spec: ToolSpec, p: t.ToolsCallParams, token: str | int | None
) -> tk.CreateTaskResult | t.CallToolResult:
    """`tools/call` with `params.task`: the delegation runs, and its task is created in the same
    transaction; a refused delegation is a task already `failed` (its result the tool error)."""
    assert p.task is not None  # and the tool supports it (admit_task, before the transaction)
    arguments = {} if p.arguments is None else p.arguments
    tasks = call.service.tasks
    caller: str | None = None
    try:
        identity = caller_identity(call, p.meta)
        caller = identity.caller
        if caller:  # past the task quota: no row at all, not even a failed one
            tasks.check_quota(caller)
    except QuotaExceededError as error:
        return call_tool_result(None, error)
    except (SubagentdError, msgspec.ValidationError):
        pass  # the refusal the call below gives, as a task when there is a caller
    shown: list[str] = []

    def delegation() -> tuple[dict[str, Any], str]:
        result = run_tool(call.service, spec, arguments, identity)
        shaped = call_tool_result(result, None)  # type: ignore[arg-type]  # never a Waiter
        shown.append(shaped.content[0]["text"])
        output = shaped.structuredContent or {}
        return output, str(output.get("child_id") or arguments.get("subagent_id"))

    # in the request's write transaction (call.run_method: spawn_agent and send_message write)
    try:
        identity = caller_identity(call, p.meta)
        task = tasks.delegate(caller or "", spec.name, delegation, p.task.ttl, token)
        text = shown[0]
    except (StorageBusyError, StorageFailedError):
        raise  # not the tool's answer: the request is to be retried (a JSON-RPC error)
    except (SubagentdError, msgspec.ValidationError) as exc:
        refused = (
            exc if isinstance(exc, SubagentdError) else InvalidParamsError(f"invalid _meta: {exc}")
        )
        call.drop_notifications(refused)
        if not caller:  # no agent to bind a task to: the plain tool error
            return call_tool_result(None, refused)
        text = error_text(refused)  # the delegation's writes were rolled back with its savepoint
        task = tasks.create_failed(caller, spec.name, refused, p.task.ttl, token)
    return tk.CreateTaskResult(task=task, meta={IMMEDIATE_META: text})


def _caller(call: Call, p: msgspec.Struct) -> str | None:
    return caller_identity(call, getattr(p, "meta", None)).caller


@method("tasks/get", tk.TaskIdParams, tk.Task, confined=True)
def tasks_get(call: Call, p: tk.TaskIdParams) -> tk.Task:
    call.service.tasks.check()  # a child that settled unseen ends its task first
    return task_view(call.service.tasks.find(_caller(call, p), p.taskId))


@method("tasks/result", tk.TaskIdParams, t.CallToolResult, confined=True, defers=True)
def tasks_result(call: Call, p: tk.TaskIdParams) -> Any:
    """The task's result once it is terminal: at once, or when it becomes so (cancellable)."""
    tasks = call.service.tasks
    tasks.check()
    record = tasks.find(_caller(call, p), p.taskId)
    answer = tasks.result(record)
    if answer is not None:
        return answer
    waiter = call.service.waits.add(tasks.result_check(record.task_id), tasks.wait_ms(record))
    return call.wait_for(waiter, lambda a: a)


@method("tasks/list", tk.TasksListParams, tk.TasksListResult, confined=True)
def tasks_list(call: Call, p: tk.TasksListParams) -> tk.TasksListResult:
    call.service.tasks.check()
    found, cursor = call.service.tasks.page(_caller(call, p), p.cursor)
    return tk.TasksListResult(tasks=found, nextCursor=cursor)


@method("tasks/cancel", tk.TaskIdParams, tk.Task, confined=True)
def tasks_cancel(call: Call, p: tk.TaskIdParams) -> tk.Task:
    call.service.tasks.check()
    return call.service.tasks.cancel(_caller(call, p), p.taskId)
