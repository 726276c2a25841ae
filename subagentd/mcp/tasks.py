"""MCP tasks on the wire, in both eras, over the same rows (core/tasks.py holds the rules).

2025-11-25 (tasks in the core, a handshake that negotiated that version): a task-augmented
`tools/call` (`params.task`), `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`.
2026-07-28 (the extension `io.modelcontextprotocol/tasks`, declared in a stateless request's
`_meta` client capabilities): a delegation answered as a `resultType: "task"` result,
`tasks/get` with a DetailedTask, `tasks/update`, `tasks/cancel` (an empty acknowledgement);
`tasks/result` and `tasks/list` do not exist there (-32601), and the extension's methods from a
request that did not declare it get -32021. The caller is found as for `tools/call`
(mcp/identity.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from subagentd.core.tasks import TASK_TOOLS, detailed_task, flat_task, task_view
from subagentd.errors import (
    InvalidParamsError,
    MethodUnknownError,
    MissingClientCapabilityError,
    QuotaExceededError,
    StorageBusyError,
    StorageFailedError,
    SubagentdError,
)
from subagentd.mcp.identity import caller_identity
from subagentd.mcp.tools import ToolSpec, call_tool_result, run_tool
from subagentd.schema import host_methods as h
from subagentd.schema import tasks as tk
from subagentd.schema import tools as t
from subagentd.wire.boundary import error_text
from subagentd.wire.call import Call
from subagentd.wire.ledger import Deferred
from subagentd.wire.methods import method

IMMEDIATE_META = "io.modelcontextprotocol/model-immediate-response"


def serves_tasks(call: Call) -> bool:
    """Whether this request may be task-augmented: a handshake that negotiated 2025-11-25."""
    return call.session.tasks and not call.stateless


def declares_extension(call: Call, meta: dict[str, Any] | None) -> bool:
    """Whether this is a stateless-era (2026-07-28) request that declares the tasks extension in
    its per-request client capabilities."""
    if not (call.stateless and call.session.offers_tasks):
        return False
    capabilities = (meta or {}).get(tk.CLIENT_CAPABILITIES_META)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and tk.TASKS_EXTENSION in extensions


def runs_as_task(call: Call, p: t.ToolsCallParams) -> bool:
    """Whether this `tools/call` is answered as a task: asked for with `params.task` (2025-11-25),
    or a delegation from a client that declared the extension and set `_meta["subagentd/task"]:
    true` (2026-07-28: the server decides; without the hint it answers at once, since clients
    that declare the extension wait for a task's end, which would make a spawn block)."""
    if p.task is not None and serves_tasks(call):
        return True
    hinted = p.meta is not None and p.meta.get(tk.TASK_HINT_META) is True
    return hinted and p.name in TASK_TOOLS and declares_extension(call, p.meta)


def _extension_era(call: Call, method_name: str, p: msgspec.Struct) -> bool:
    """Whether a `tasks/*` request is of the extension's era; there, one that did not declare the
    extension is refused with -32021 naming it."""
    if not call.stateless:
        return False
    if not declares_extension(call, getattr(p, "meta", None)):
        raise MissingClientCapabilityError(
            f"{method_name} belongs to the MCP tasks extension ({tk.TASKS_EXTENSION}); declare it"
            " in the request's _meta client capabilities",
            tk.REQUIRED_CAPABILITIES,
        )
    return True


def _not_in_extension(call: Call, method_name: str) -> None:
    if call.stateless:  # the extension has no tasks/result, no tasks/list
        raise MethodUnknownError("Method not found", {"method": method_name})


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
) -> tk.CreateTaskResult | tk.ExtensionCreateTaskResult | t.CallToolResult:
    """`tools/call` run as a task (runs_as_task): the delegation runs, and its task is created in
    the same transaction; a refused delegation is a task already ended (its result the tool
    error: `failed` in 2025-11-25, `completed` with `isError` in the extension)."""
    extension = p.task is None  # the extension's era: the server chose to run it as a task
    ttl = None if p.task is None else p.task.ttl
    token = None if extension else token  # the extension has no progress on tasks
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
        task = tasks.delegate(caller or "", spec.name, delegation, ttl, token)
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
        task = tasks.create_failed(caller, spec.name, refused, ttl, token)
    if extension:
        return tk.ExtensionCreateTaskResult(resultType="task", **flat_task(task))
    return tk.CreateTaskResult(task=task, meta={IMMEDIATE_META: text})


def _caller(call: Call, p: msgspec.Struct) -> str | None:
    return caller_identity(call, getattr(p, "meta", None)).caller


@method("tasks/get", tk.TaskIdParams, tk.Task, confined=True)
def tasks_get(call: Call, p: tk.TaskIdParams) -> tk.Task | tk.DetailedTask:
    extension = _extension_era(call, "tasks/get", p)
    call.service.tasks.check()  # a child that settled unseen ends its task first
    tasks = call.service.tasks
    record = tasks.find(_caller(call, p), p.taskId)
    return detailed_task(record, tasks.input_requests(record)) if extension else task_view(record)


@method("tasks/result", tk.TaskIdParams, t.CallToolResult, confined=True, defers=True)
def tasks_result(call: Call, p: tk.TaskIdParams) -> Any:
    """The task's result once it is terminal: at once, or when it becomes so (cancellable)."""
    _not_in_extension(call, "tasks/result")
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
    _not_in_extension(call, "tasks/list")
    call.service.tasks.check()
    found, cursor = call.service.tasks.page(_caller(call, p), p.cursor)
    return tk.TasksListResult(tasks=found, nextCursor=cursor)


@method("tasks/cancel", tk.TaskIdParams, tk.Task, confined=True)
def tasks_cancel(call: Call, p: tk.TaskIdParams) -> tk.Task | h.Empty:
    """Interrupts the child's current turn by interrupt_agent's rules, then marks the task. In
    the extension (cooperative cancel) an acknowledgement, also for a task that already ended."""
    extension = _extension_era(call, "tasks/cancel", p)
    tasks = call.service.tasks
    tasks.check()
    if not extension:
        return tasks.cancel(_caller(call, p), p.taskId)
    caller = _caller(call, p)
    if tasks.find(caller, p.taskId).status not in tk.TERMINAL:
        tasks.cancel(caller, p.taskId)
    return h.Empty()


@method("tasks/update", tk.TaskUpdateParams, h.Empty, confined=True, extension_only=True)
def tasks_update(call: Call, p: tk.TaskUpdateParams) -> h.Empty:
    """The extension's answers to `inputRequests`: the response keyed as the child's open
    question answers it (core/tasks.py, TaskRules.update); a key that is not outstanding is
    ignored, as the extension says; a task the caller cannot see is -32602."""
    if not call.stateless:  # not a method of 2025-11-25
        raise MethodUnknownError("Method not found", {"method": "tasks/update"})
    _extension_era(call, "tasks/update", p)
    call.service.tasks.update(_caller(call, p), p.taskId, p.inputResponses or {})
    return h.Empty()


@method(
    "subscriptions/listen",
    tk.ListenParams,
    h.Empty,
    confined=True,
    defers=True,
    writes=False,
    extension_only=True,
)
def subscriptions_listen(call: Call, p: tk.ListenParams) -> Deferred:
    """A stream of `notifications/tasks` for the task ids asked for that the caller may see
    (others are left out of the acknowledgement, as a task that does not exist); it stays open
    until the client cancels the request. A task already ended is told at once."""
    if not call.stateless:  # a method of the stateless era only
        raise MethodUnknownError("Method not found", {"method": "subscriptions/listen"})
    asked = (p.notifications or {}).get("taskIds")
    if asked is not None:
        _extension_era(call, "subscriptions/listen with taskIds", p)
    if not isinstance(asked, list) or not all(isinstance(i, str) for i in asked or ()):
        if asked is not None:
            raise InvalidParamsError("notifications.taskIds must be a list of task ids")
        asked = []
    tasks, caller = call.service.tasks, _caller(call, p)
    honoured: list[str] = []
    ended = []
    for task_id in dict.fromkeys(asked):
        try:
            record = tasks.find(caller, task_id)
        except InvalidParamsError:
            continue  # not the caller's to see: left out, never revealed
        honoured.append(task_id)
        if record.status in tk.TERMINAL:
            ended.append(detailed_task(record))
    listen = call.request_id
    call.session.task_listens[listen] = honoured
    meta = {tk.SUBSCRIPTION_ID_META: listen}
    call.service.emit(
        "notifications/subscriptions/acknowledged",
        tk.ListenAcknowledged(notifications={"taskIds": honoured}, meta=meta),
    )
    for task in ended:
        call.service.emit("notifications/tasks", task)
    stream = Deferred(None)  # never completes: the stream ends when the client cancels it

    def closed() -> None:
        call.session.task_listens.pop(listen, None)

    stream.on_cancel = closed
    return stream
