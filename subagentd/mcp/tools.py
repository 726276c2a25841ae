"""The tools as MCP `Tool`s and as direct methods: one definition, schemas from the Structs.

Longer than ~300 lines on purpose: the tools' one definition, the MCP bridge's and the direct
methods' ways of running them beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import msgspec

from subagentd.core import texts
from subagentd.core.arguments import check_arguments
from subagentd.core.asking import Asking
from subagentd.core.asking_user import AskingUser
from subagentd.core.delegation import Delegation
from subagentd.core.service import Service
from subagentd.core.tasks import TASK_TOOLS
from subagentd.core.tools import ToolRules
from subagentd.core.waits import Waiter
from subagentd.errors import CallerUnauthorizedError, InvalidParamsError, SubagentdError
from subagentd.mcp.tool_schemas import object_schema
from subagentd.schema import tools as t
from subagentd.schema.tasks import ToolExecution
from subagentd.wire.boundary import error_text

if TYPE_CHECKING:
    from subagentd.wire.call import Call

OPTIONAL_TASK = ToolExecution(taskSupport="optional")
CALLER_META = "subagentd/caller"
ACTIVATION_META = "subagentd/activation"
IDEMPOTENCY_META = "subagentd/idempotency_key"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    args: type[msgspec.Struct]
    output: type[msgspec.Struct]
    result: type[msgspec.Struct]
    params: type[msgspec.Struct]  # the direct method's params, for the schema export
    idempotent: bool
    writes: bool  # list_agents only reads: no write transaction, no commit to wait for
    description: str
    run: Callable[..., Any]  # a method of service.<rules>: (rules, caller, activation, args)
    rules: str = "tools"  # the Service attribute holding `run`'s object
    waits: bool = False  # may answer later (a Waiter): takes the client's progress token
    title: str = ""  # MCP `title`, also the annotations' title
    # MCP tool annotations (hints for approval prompts): (readOnly, destructive, idempotent,
    # openWorld); see PROTOCOL.md section 5 for why each is what it is
    hints: tuple[bool, bool, bool, bool] = (False, False, False, False)


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "send_message",
            t.SendMessageArgs,
            t.MessageIdOutput,
            t.SendMessageResult,
            t.SendMessageParams,
            True,
            True,
            "Queue a message as the next turn of one of your own continuable subagents (a child you"
            " started). The message is stored durably in the child's inbox and runs as its own turn:"
            " if the child is running now, it gets the message after its current turn ends (this"
            " never redirects the running turn); if it is idle it starts at once; if it is ready"
            " (not live) it is resumed from its saved state. Success means the message was queued,"
            " not answered: the child's reply reaches you later (through `report` or its settlement"
            " notice). Only the direct parent can send; a grandparent, sibling or the child itself"
            " is refused. A failure text starts with `message not delivered:` and nothing was"
            " queued; if it says the subagent cannot be resumed, do not retry with that id.",
            ToolRules.send_message,
            title="Send a message to a subagent",
            hints=(False, False, False, True),
        ),
        ToolSpec(
            "interrupt_agent",
            t.InterruptAgentArgs,
            t.InterruptOutput,
            t.InterruptAgentResult,
            t.InterruptAgentParams,
            False,
            True,
            "Stop the current turn of a live continuable subagent below you (your child or a deeper"
            " descendant). It returns as soon as the stop is requested; the target may run briefly"
            " before it stops. Only that turn stops: messages already queued for the target are"
            " parked, and it resumes with them, in order, at its next waking input (your next"
            " `send_message` to it, or a report or settlement notice from one of its own"
            " children); agents it started keep running. If the target has nothing left to do it"
            " finishes and you get a notice. Interrupting an agent that is not running, not live"
            " or unknown is a harmless no-op. You cannot interrupt yourself, a sibling, or agents"
            " that are not below you.",
            ToolRules.interrupt_agent,
            title="Interrupt a subagent",
            hints=(False, True, True, False),
        ),
        ToolSpec(
            "list_agents",
            t.ListAgentsArgs,
            t.ListAgentsOutput,
            t.ListAgentsResult,
            t.ListAgentsParams,
            False,
            False,
            "List the continuable subagents below you with their status: `running` (working on a"
            " turn), `idle` (live, between turns: waiting on its own children, or holding parked"
            " messages, shown as `[idle, 2 parked]`) or `ready` (saved; resumable, not finished, and"
            " not a result waiting to be collected). Only depth-1 entries (your direct children)"
            " can take `send_message`; deeper entries can only be interrupted with"
            " `interrupt_agent`. Do not poll this list to learn when work is done: you are told"
            ' when a subagent reports or finishes. scope "children" (default) lists your direct'
            ' children; scope "descendants" lists the whole tree below you with parent and depth.'
            " A child whose saved state cannot be read is shown as a diagnostic line. The listing"
            " is a snapshot and may change right after.",
            ToolRules.list_agents,
            title="List subagents",
            hints=(True, False, True, False),
        ),
        ToolSpec(
            "report",
            t.ReportArgs,
            t.MessageIdOutput,
            t.ReportResult,
            t.ReportParams,
            True,
            True,
            "Send a message to the agent that started you (your direct parent only). It does not"
            " see your transcript, so make the report self-contained. Call it once before you"
            " finish with your answer, and earlier when a partial finding changes what the parent"
            " should do. Reporting does not end your turn. Success means the parent accepted the"
            " message, not that it has read it; it fails when your parent is not live.",
            ToolRules.report,
            title="Report to the parent agent",
            hints=(False, False, False, False),
        ),
        ToolSpec(
            "spawn_agent",
            t.SpawnAgentArgs,
            t.SpawnAgentOutput,
            t.SpawnAgentResult,
            t.SpawnAgentParams,
            True,
            True,
            "Start a background subagent on a task and return at once with its id; it works while"
            " you continue. A continuable subagent (the default) reports to you with `report`"
            " and you get a notice when it finishes; it does not see your conversation, so the"
            " prompt must say everything it needs. Give it more work later with `send_message`,"
            " stop it with `interrupt_agent`, collect its reports and notices with `wait_agents`."
            " It fails when you are too deep to start more agents, when your tree is being"
            " closed, or when `child_id` is already taken.",
            Delegation.spawn_agent,
            "delegation",
            title="Start a subagent",
            hints=(False, False, False, True),
        ),
        ToolSpec(
            "wait_agents",
            t.WaitAgentsArgs,
            t.WaitAgentsOutput,
            t.WaitAgentsResult,
            t.WaitAgentsParams,
            False,
            True,
            "Wait until your subagents have news: it returns as soon as one of them has reported"
            ' or finished (mode "any", the default) or once all of them have finished (mode'
            ' "all"), with their reports and finish notices, which then do not reach you again'
            " as separate turns: it consumes what it returns (a later wait does not return it"
            " again). On timeout it says which are still working; call it again to keep"
            " waiting. Use it instead of polling `list_agents`.",
            Delegation.wait_agents,
            "delegation",
            True,
            title="Wait for subagents' reports and notices",
            hints=(False, False, False, False),
        ),
        ToolSpec(
            "ask_parent",
            t.AskParentArgs,
            t.AskOutput,
            t.AskParentResult,
            t.AskParentParams,
            False,
            True,
            "Ask the agent that started you a question and wait for its answer, when you cannot"
            " go on well without a decision (which of two files to change, whether to delete"
            " something, what the task meant). The call blocks until that agent answers, and"
            " returns its answer as free text; `options` (at most 10 short strings) are offered"
            " choices. Ask one question at a time, self-contained (it does not see your"
            " transcript). If no answer comes (your turn is interrupted, that agent is"
            " interrupted or finishes, or nobody answers in time) the call fails and says why:"
            " then go on without the answer. For news that needs no answer use `report`.",
            Asking.ask_parent,
            "asking",
            True,
            title="Ask the parent agent",
            hints=(False, False, False, False),
        ),
        ToolSpec(
            "ask_user",
            t.AskUserArgs,
            t.AskUserOutput,
            t.AskUserResult,
            t.AskUserParams,
            False,
            True,
            "Ask the person behind the agent that started your tree a question and wait for"
            " their answer, only when a decision needs a person (what they meant, whether"
            " something may be deleted) and no agent above you can decide it. The call blocks"
            " until the person answers, declines or dismisses it, and returns what they did;"
            " `options` (at most 10 short strings) are offered choices. Ask one question at a"
            " time, self-contained (the person does not see your transcript). If no person can"
            " be reached the call fails at once and says so: then go on without the answer.",
            AskingUser.ask_user,
            "asking_user",
            True,
            title="Ask the person",
            hints=(False, False, False, True),
        ),
    )
}


def served_tool(name: str, served: Container[str]) -> ToolSpec:
    """The tool a tools/call names, if this server serves it (--tools); else "Unknown tool"."""
    spec = TOOLS.get(name)
    if spec is None or name not in served:
        raise InvalidParamsError(f"Unknown tool: {name}")
    return spec


@cache
def tool_definitions(names: tuple[str, ...], tasks: bool = False) -> list[t.Tool]:
    """The `Tool`s of these names, in TOOLS order (one list per distinct set offered); with
    `tasks` (a version that has MCP tasks), the delegations say they may be called as tasks."""
    return [
        t.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            inputSchema=object_schema(spec.args, arguments=True),
            outputSchema=object_schema(spec.output),
            annotations=t.ToolAnnotations(
                title=spec.title,
                readOnlyHint=spec.hints[0],
                destructiveHint=spec.hints[1],
                idempotentHint=spec.hints[2],
                openWorldHint=spec.hints[3],
            ),
            execution=OPTIONAL_TASK if tasks and spec.name in TASK_TOOLS else None,
        )
        for spec in TOOLS.values()
        if spec.name in names
    ]


class CallerIdentity(msgspec.Struct, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    idempotency_key: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")
    progress: str | int | None = None  # the client's `_meta.progressToken` (waiting tools)


def run_tool(
    service: Service,
    spec: ToolSpec,
    arguments: Any,
    identity: CallerIdentity,
) -> msgspec.Struct | Waiter:
    """Validate (SEMANTICS.md section 3), find the caller, then apply the tool's rules; a
    waiting tool may answer later (a Waiter, for `Call.wait_for`)."""
    args = check_arguments(spec.args, arguments)
    if not identity.caller:
        raise CallerUnauthorizedError(texts.NO_CALLER.format(tool=spec.name))
    caller, activation = identity.caller, identity.activation
    service.tools.check_tool_allowed(caller, spec.name)
    if not service.tracing.spans_tool_calls:  # off: no context entered around the rules
        return _apply(service, spec, caller, activation, args, identity)
    with service.tracing.tool_call(caller, spec.name):  # execute_tool
        return _apply(service, spec, caller, activation, args, identity)


def _apply(
    service: Service,
    spec: ToolSpec,
    caller: str,
    activation: str | None,
    args: msgspec.Struct,
    identity: CallerIdentity,
) -> msgspec.Struct | Waiter:
    """The tool's rules, for a caller found and allowed (run_tool)."""
    tools = service.tools if spec.rules == "tools" else getattr(service, spec.rules)
    if spec.waits:
        return spec.run(tools, caller, activation, args, identity.progress)  # type: ignore[no-any-return]
    if spec.idempotent and identity.idempotency_key is not None:  # without a key: just run
        return service.idempotent(
            caller,
            identity.idempotency_key,
            spec.name,
            msgspec.to_builtins(args),
            spec.result,
            lambda: spec.run(tools, caller, activation, args),
        )
    result: msgspec.Struct = spec.run(tools, caller, activation, args)
    return result


_IDENTITY = (
    "caller",
    "activation",
    "idempotency_key",
    "_meta",
)  # a direct method's, not the tool's


def direct_method(spec: ToolSpec) -> Callable[[Call, Any], Any]:
    """The tool as a direct method: its params are the arguments plus the caller's identity."""

    def run(call: Call, params: Any) -> Any:
        if not isinstance(params, dict):
            raise InvalidParamsError("params must be an object")
        identity = msgspec.convert({k: params.get(k) for k in _IDENTITY}, CallerIdentity)
        if spec.waits and identity.meta is not None:
            identity.progress = progress_token(identity.meta)
        arguments = {k: v for k, v in params.items() if k not in _IDENTITY}
        result = run_tool(call.service, spec, arguments, identity)
        if spec.waits and isinstance(result, Waiter):
            return call.wait_for(result, lambda a: a)
        return result

    return run


def progress_token(meta: dict[str, Any]) -> str | int | None:
    """MCP `_meta.progressToken` (a string or an integer; anything else is ignored)."""
    token = meta.get("progressToken")
    return token if isinstance(token, str) or type(token) is int else None


def call_tool_result(
    result: msgspec.Struct | None, error: SubagentdError | None
) -> t.CallToolResult:
    """An MCP CallToolResult: the text the model sees, and the structured fields."""
    if error is not None:
        return t.CallToolResult(content=[_text(error_text(error))], isError=True)
    assert result is not None
    # every tool result Struct has `text`; a shared base class holding it would reorder fields
    text: str = result.text  # type: ignore[attr-defined]  # see above
    return t.CallToolResult(
        # one block: a client that shows only the first loses nothing
        content=[{"type": "text", "text": text}],
        structuredContent=_structured(result),
        isError=type(result) is t.AskParentResult and not result.answered,  # no answer came
    )


def _structured(result: msgspec.Struct) -> dict[str, Any]:
    """The result's fields but `blocks` (the content, which `text` joins), one level deep: nested
    Structs (10k listing rows) are encoded straight to JSON later instead of being copied into
    dicts first."""
    out: dict[str, Any] = {}
    for name, wire_name, default in _output_fields(type(result)):
        value = getattr(result, name)
        if default is msgspec.NODEFAULT or value != default:  # defaults are omitted on the wire
            out[wire_name] = value
    return out


@cache
def _output_fields(result_type: type[msgspec.Struct]) -> tuple[tuple[str, str, Any], ...]:
    """(name, wire name, default) of every field but `blocks` (the content blocks), resolved
    once (resolving them costs ~100 us)."""
    return tuple(
        (
            f.name,
            f.encode_name,
            f.default_factory() if f.default_factory is not msgspec.NODEFAULT else f.default,
        )
        for f in msgspec.structs.fields(result_type)
        if f.name != "blocks"
    )


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}
