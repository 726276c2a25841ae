"""Thin handlers: typed params -> service -> result, and `build_methods`, which builds the one
method table from them and the other method modules' declarations (wire/methods.py).

The table, in order: the handshake (server/lifecycle.py, which start-up serves before core
loads), the MCP tasks (mcp/tasks.py), the host API, the tools as direct methods, the MCP bridge
(tools/list, tools/call) and the resources (mcp/resources.py). `METHODS` is the table built once,
which the serving command passes to the connection (and the connection to the relay socket).
"""

from __future__ import annotations

import sys
from typing import Any, Final

import msgspec

from subagentd.core.waits import Waiter
from subagentd.errors import (
    InvalidParamsError,
    StateInvalidError,
    SubagentdError,
)
from subagentd.mcp import elicitation, resources, tasks
from subagentd.mcp.identity import caller_identity
from subagentd.mcp.tasks import admit_task, call_as_task, runs_as_task, serves_tasks
from subagentd.mcp.tools import (
    TOOLS,
    call_tool_result,
    direct_method,
    progress_token,
    run_tool,
    served_tool,
    tool_definitions,
)
from subagentd.schema import budgets as b
from subagentd.schema import host_methods as h
from subagentd.schema import stats as st
from subagentd.schema import tools as t
from subagentd.server import lifecycle
from subagentd.wire.call import Call, Handler
from subagentd.wire.ledger import Deferred
from subagentd.wire.lockwait import LOCK_WAITS
from subagentd.wire.methods import declared, method
from subagentd.wire.timers import Timers

HOST_CALLER = ""  # idempotency namespace of agents/followup: no agent id is empty (migration m007)


# --- host API -------------------------------------------------------------------------------


@method("agents/open", h.OpenParams, h.OpenResult)
def agents_open(call: Call, p: h.OpenParams) -> h.OpenResult:
    return call.service.host.open(p)


@method("agents/close", h.AgentParams, h.Empty, defers=True)
def agents_close(call: Call, p: h.AgentParams) -> Deferred:
    closed = Deferred(h.Empty())
    call.service.host.close_root(p.agent_id, closed.complete)
    return closed


@method("agents/get", h.AgentParams, h.AgentInfo, writes=False)
def agents_get(call: Call, p: h.AgentParams) -> h.AgentInfo:
    return call.service.records.get(p.agent_id)


@method("agents/spawn", h.SpawnParams, h.SpawnResult)
def agents_spawn(call: Call, p: h.SpawnParams) -> h.SpawnResult:
    arguments = msgspec.to_builtins(msgspec.structs.replace(p, idempotency_key=None, meta=None))
    return call.service.idempotent(
        p.caller,
        p.idempotency_key,
        "agents/spawn",
        arguments,
        h.SpawnResult,
        lambda: call.service.host.spawn(p),
    )


@method("turns/begin", h.TurnBeginParams, h.TurnBeginResult)
def turns_begin(call: Call, p: h.TurnBeginParams) -> h.TurnBeginResult:
    return call.service.host.begin_turn(p.agent_id, p.messages, p.traceparent)


@method("turns/end", h.TurnEndParams, h.Empty)
def turns_end(call: Call, p: h.TurnEndParams) -> h.Empty:
    call.service.host.finish_turn(p)
    return h.Empty()


@method("agents/followup", h.FollowupParams, h.MessageIdResult)
def agents_followup(call: Call, p: h.FollowupParams) -> h.MessageIdResult:
    return call.service.idempotent(
        HOST_CALLER,
        p.idempotency_key,
        "agents/followup",
        [p.agent_id, p.message],
        h.MessageIdResult,
        lambda: call.service.host.followup(p.agent_id, p.message),
    )


@method("agents/interrupt", h.AgentParams, h.InterruptResult)
def agents_interrupt(call: Call, p: h.AgentParams) -> h.InterruptResult:
    return call.service.host.host_interrupt(p.agent_id)


@method("agents/budget", b.BudgetParams, b.BudgetResult)
def agents_budget(call: Call, p: b.BudgetParams) -> b.BudgetResult:
    return call.service.budgets.set_budget(p)


@method("agents/stop", b.StopParams, b.StopResult)
def agents_stop(call: Call, p: b.StopParams) -> b.StopResult:
    return call.service.budgets.stop(p)


@method("agents/resume", h.AgentParams, b.BudgetResult)
def agents_resume(call: Call, p: h.AgentParams) -> b.BudgetResult:
    return call.service.budgets.resume(p.agent_id)


@method("transcript/append", h.TranscriptAppendParams, h.SeqResult)
def transcript_append(call: Call, p: h.TranscriptAppendParams) -> h.SeqResult:
    return h.SeqResult(seq=call.service.records.append_transcript(p.agent_id, p.turn_id, p.events))


@method("transcript/read", h.TranscriptReadParams, h.TranscriptReadResult, writes=False)
def transcript_read(call: Call, p: h.TranscriptReadParams) -> h.TranscriptReadResult:
    return call.service.records.read_transcript(p.agent_id, p.after, p.limit)


@method("agents/list", h.ListParams, h.ListResult, writes=False)
def agents_list(call: Call, p: h.ListParams) -> h.ListResult:
    return call.service.records.list_host(p)


@method("messages/cancel", h.MessageGetParams, h.MessageInfo)
def messages_cancel(call: Call, p: h.MessageGetParams) -> h.MessageInfo:
    return call.service.host.cancel_message(p.message_id)


@method("messages/get", h.MessageGetParams, h.MessageInfo, writes=False)
def messages_get(call: Call, p: h.MessageGetParams) -> h.MessageInfo:
    return call.service.records.get_message(p.message_id)


@method("agents/wait_idle", h.WaitIdleParams, h.WaitIdleResult, writes=False, defers=True)
def agents_wait_idle(call: Call, p: h.WaitIdleParams) -> Any:
    answer = call.service.delegation.wait_idle(p.agent_id, p.timeout_ms)
    return call.wait_for(answer, lambda a: a) if isinstance(answer, Waiter) else answer


@method("clock/advance", h.ClockAdvanceParams, h.ClockAdvanceResult)
def clock_advance(call: Call, p: h.ClockAdvanceParams) -> h.ClockAdvanceResult:
    """Tests only: the manual clock moves on, and the timers due on the way run, in order."""
    timers = call.service.timers
    if not call.service.settings.clock.manual or not isinstance(timers, Timers):
        raise StateInvalidError(
            "clock/advance needs a manual clock: it is served only with --clock manual (for tests)"
        )
    return h.ClockAdvanceResult(advanced=timers.advance(p.seconds))


@method("server/stats", st.StatsParams, st.StatsResult, writes=False)
def server_stats(call: Call, p: st.StatsParams) -> st.StatsResult:
    figures = call.service.stats()
    figures.lock_waits = LOCK_WAITS.figures()
    return figures


# --- the MCP bridge -------------------------------------------------------------------------


@method("tools/list", t.ToolsListParams, t.ToolsListResult, writes=False, confined=True)
def tools_list(call: Call, p: t.ToolsListParams) -> t.ToolsListResult:
    identity = caller_identity(call, p.meta)
    offered = call.service.tools.offered_tools(identity.caller, identity.activation)
    return t.ToolsListResult(tools=tool_definitions(offered, serves_tasks(call)))  # tasks: hook


def _served(call: Call, p: t.ToolsCallParams) -> None:
    served_tool(p.name, call.settings.tools)  # "Unknown tool": the JSON-RPC error
    if p.task is not None:  # MCP tasks: hook (mcp/tasks.py)
        admit_task(call, p)


def _refused(error: SubagentdError) -> t.CallToolResult:
    return call_tool_result(None, error)


def _tool_writes(params: Any) -> bool:
    """Whether a tools/call writes: it then runs in a write transaction (call.run_method), and
    the connection takes the write lock before it runs."""
    name = params.get("name") if type(params) is dict else None
    spec = TOOLS.get(name) if type(name) is str else None
    return spec is not None and spec.writes


@method(
    "tools/call",
    t.ToolsCallParams,
    t.CallToolResult,
    writes=False,
    confined=True,
    defers=True,
    writes_if=_tool_writes,
    admit=_served,
    refusal=_refused,
)
def tools_call(call: Call, p: t.ToolsCallParams) -> Any:
    # the one tools/call (the `subagentd tool` socket's come here too, runners/tool_socket.py); a tool
    # the rules refuse answers an isError result, its writes rolled back (call.run_method)
    spec = TOOLS[p.name]
    if (p.task is not None or call.stateless) and runs_as_task(call, p):  # MCP tasks: hook
        return call_as_task(call, spec, p, progress_token(p.meta) if p.meta else None)
    arguments = {} if p.arguments is None else p.arguments
    try:
        identity = caller_identity(call, p.meta)
    except msgspec.ValidationError as exc:
        raise InvalidParamsError(f"invalid _meta: {exc}") from None
    if spec.waits and p.meta is not None:
        identity.progress = progress_token(p.meta)
    result = run_tool(call.service, spec, arguments, identity)
    if spec.waits and isinstance(result, Waiter):
        return call.wait_for(result, lambda answer: call_tool_result(answer, None))
    return call_tool_result(result, None)  # type: ignore[arg-type]  # a Waiter only when spec.waits


def build_methods() -> dict[str, Handler]:
    """The one table of every method the server serves (see the module's docstring)."""
    here = declared(sys.modules[__name__])
    bridge = {name: here.pop(name) for name in ("tools/list", "tools/call")}
    direct = {
        name: Handler(
            direct_method(spec), None, spec.result, writes=spec.writes, tool=True, defers=spec.waits
        )
        for name, spec in TOOLS.items()
    }
    return (
        lifecycle.handshake_methods()
        | declared(tasks)
        | here
        | direct
        | bridge
        | declared(resources)
        | declared(elicitation)
    )


METHODS: Final = build_methods()
