"""The four model-facing tools: arguments, structured outputs, direct-method results, MCP shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from subagentd.schema.base import Params, Wire
from subagentd.schema.budgets import Budget
from subagentd.schema.host_methods import Scope
from subagentd.schema.listing import AgentRow, Status
from subagentd.schema.messages import Mode

CALLER_META = "subagentd/caller"
"""`_meta` key naming the calling agent of `tools/list` and `tools/call`."""
ACTIVATION_META = "subagentd/activation"
"""`_meta` key naming the caller's activation (optional: a stale one is refused)."""
IDEMPOTENCY_META = "subagentd/idempotency_key"
"""`_meta` key of a `tools/call` idempotency key."""

# --- tool arguments (validated with the exact texts of SEMANTICS.md section 3) ---


WAIT_DEFAULT_MS = 30_000
"""wait_agents' `timeout_ms` when absent."""
WAIT_MAX_MS = 600_000
"""The longest wait_agents (and agents/wait_idle) may wait."""


SubagentId = Annotated[
    str,
    msgspec.Meta(
        description="Id of one of your own direct children: a depth-1 entry of list_agents (deeper entries"
        " cannot take send_message)."
    ),
]
MessageText = Annotated[
    str,
    msgspec.Meta(
        description="The message. It runs as the child's next turn; the child sees only this text."
    ),
]
InterruptTarget = Annotated[
    str,
    msgspec.Meta(
        description="Id of a live agent below you: one of your children or a deeper descendant."
    ),
]
ListScope = Annotated[
    Scope,
    msgspec.Meta(
        description='"children" (default): your direct children, the ones send_message can reach;'
        ' "descendants": the whole tree below you, each line with its parent and depth.'
    ),
]
ReportText = Annotated[
    str,
    msgspec.Meta(
        description="Your report: self-contained, since the agent that started you does not see your transcript."
    ),
]
SpawnLabel = Annotated[
    str,
    msgspec.Meta(description="A short name for the subagent, shown in list_agents."),
]
SpawnPrompt = Annotated[
    str,
    msgspec.Meta(
        description="The task, as the subagent's first message. It sees nothing else of your conversation,"
        " so say everything it needs."
    ),
]
SpawnMode = Annotated[
    Mode,
    msgspec.Meta(
        description='"continuable" (default): it reports to you, you are told when it finishes, and'
        ' send_message gives it more work; "one-shot": one turn, then it is gone, without a'
        " report or a notice to you (only for work you do not need to hear back from)."
    ),
]
SpawnChildId = Annotated[
    str | None,
    msgspec.Meta(
        description="Id for the new subagent; it must not exist yet. Omit it to get a fresh one."
    ),
]
SpawnBudget = Annotated[
    Budget | None,
    msgspec.Meta(
        description="Limits for the subagent and everything it starts: max_turns, max_spawns,"
        " max_tokens (input and output), max_cost, max_seconds (a wall-clock deadline from now)."
        " Each is cut to what you have left yourself. Omit it to share your own budget."
    ),
]
WaitIds = Annotated[
    list[str] | None,
    msgspec.Meta(
        description="Ids of your own subagents to wait for. Default: all your direct children."
    ),
]
WaitTimeout = Annotated[
    int,
    msgspec.Meta(
        ge=0,
        le=WAIT_MAX_MS,
        description=f"The longest to wait, in milliseconds: default {WAIT_DEFAULT_MS}, at most {WAIT_MAX_MS};"
        " 0 only collects what has already arrived.",
    ),
]
WaitMode = Annotated[
    Literal["any", "all"],
    msgspec.Meta(
        description='"any" (default): return as soon as one of them has reported or finished;'
        ' "all": return once every one of them has finished.'
    ),
]


class SendMessageArgs(Wire, kw_only=True):
    subagent_id: SubagentId
    message: MessageText


class InterruptAgentArgs(Wire, kw_only=True):
    agent_id: InterruptTarget


class ListAgentsArgs(Wire, kw_only=True):
    scope: ListScope = "children"


class ReportArgs(Wire, kw_only=True):
    output: ReportText


class SpawnAgentArgs(Wire, kw_only=True):
    label: SpawnLabel
    prompt: SpawnPrompt
    mode: SpawnMode = "continuable"
    child_id: SpawnChildId = None
    budget: SpawnBudget = None


class WaitAgentsArgs(Wire, kw_only=True):
    agent_ids: WaitIds = None
    timeout_ms: WaitTimeout = WAIT_DEFAULT_MS
    mode: WaitMode = "any"


# --- structured outputs (MCP structuredContent) ---


class MessageIdOutput(Wire, kw_only=True):
    message_id: str


class InterruptOutput(Wire, kw_only=True):
    accepted: bool
    previous_status: Status | None = None


class ListAgentsOutput(Wire, kw_only=True):
    agents: list[AgentRow]


class SpawnAgentOutput(Wire, kw_only=True):
    child_id: str


class WaitedAgent(Wire, kw_only=True):
    """One waited-for subagent: its status now, and what this wait collected from it."""

    agent_id: str
    status: Status
    reason: str | None = None  # how its last turn ended, when its settlement notice was collected
    output: str | None = None  # that notice's closing message
    reports: list[str] | None = None  # the reports collected, in order


class WaitAgentsOutput(Wire, kw_only=True):
    agents: list[WaitedAgent]
    timed_out: bool = False


# --- direct methods: arguments plus the caller's identity ---


class SendMessageParams(SendMessageArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    idempotency_key: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class InterruptAgentParams(InterruptAgentArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class ListAgentsParams(ListAgentsArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class ReportParams(ReportArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    idempotency_key: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class SpawnAgentParams(SpawnAgentArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    idempotency_key: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class WaitAgentsParams(WaitAgentsArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class SendMessageResult(MessageIdOutput, kw_only=True):
    text: str


class InterruptAgentResult(InterruptOutput, kw_only=True):
    text: str


class ListAgentsResult(ListAgentsOutput, kw_only=True):
    text: str


class ReportResult(MessageIdOutput, kw_only=True):
    text: str


class SpawnAgentResult(SpawnAgentOutput, kw_only=True):
    text: str


class WaitAgentsResult(WaitAgentsOutput, kw_only=True):
    text: str
    blocks: list[str] = msgspec.field(default_factory=list)  # the text blocks, `text` joined


class ToolErrorData(Wire, kw_only=True):
    """`data` of a direct tool method's JSON-RPC error."""

    reason: str
    text: str


# --- MCP bridge shapes ---


class ToolsListParams(Params, kw_only=True):
    cursor: str | None = None


class Tool(Wire, kw_only=True):
    name: str
    description: str
    inputSchema: dict[str, Any]
    outputSchema: dict[str, Any] | None = None


class ToolsListResult(Wire, kw_only=True, omit_defaults=False):
    """MCP ListToolsResult; `report` depends on the caller, so the list is private and never fresh."""

    tools: list[Tool]
    ttlMs: int = 0
    cacheScope: Literal["private", "public"] = "private"


class ToolsCallParams(Params, kw_only=True):
    name: str
    arguments: Any = None


class CallToolResult(Wire, kw_only=True):
    content: list[dict[str, Any]]
    structuredContent: dict[str, Any] | None = None
    isError: bool
