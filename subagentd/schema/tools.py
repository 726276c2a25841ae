"""The model-facing tools: arguments, structured outputs, direct-method results, MCP shapes.

Longer than ~300 lines on purpose: each tool's argument, output, params and result Structs sit
side by side, since the input and output schemas, the argument validation and the direct methods
are all generated from them; split by kind, one tool's shapes would be read across modules.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from subagentd.schema.base import Params, Wire
from subagentd.schema.budgets import Budget, Held
from subagentd.schema.host_methods import Scope
from subagentd.schema.listing import AgentRow, Status
from subagentd.schema.messages import AgentChoice, Mode
from subagentd.schema.tasks import TaskMetadata, ToolExecution

CALLER_META = "subagentd/caller"
"""`_meta` key naming the calling agent of `tools/list` and `tools/call`."""
ACTIVATION_META = "subagentd/activation"
"""`_meta` key naming the caller's activation (optional: a stale one is refused)."""
IDEMPOTENCY_META = "subagentd/idempotency_key"
"""`_meta` key of a `tools/call` idempotency key."""

# --- tool arguments (validated with the exact texts of SEMANTICS.md section 3) ---


WAIT_DEFAULT_MS = 25_000
"""wait_agents' `timeout_ms` when absent: under the MCP clients' request timeouts (the TypeScript
SDK's and Claude Desktop's 60 s, Claude Code's 120 s; PROTOCOL.md section 5)."""
WAIT_MAX_MS = 50_000
"""The longest wait_agents may wait: under 60 s too, so no client times out a call the model
asked for; a model that wants to wait longer calls it again."""
WAIT_IDLE_MAX_MS = 600_000
"""The longest agents/wait_idle (the host's own API, no MCP client in between) may wait."""


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
SpawnAgent = Annotated[
    AgentChoice | None,
    msgspec.Meta(
        description='Where the subagent runs: {"a2a": "NAME"} runs its turns on the remote A2A'
        " agent this deployment lists under NAME (its list is in the error when NAME is not in it)."
        " Omit it to run the subagent here."
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


QuestionText = Annotated[
    str,
    msgspec.Meta(
        description="Your question: self-contained, since the agent that started you does not see"
        " your transcript."
    ),
]
QuestionOptions = Annotated[
    list[str] | None,
    msgspec.Meta(
        description="Up to 10 short choices to offer (each at most 200 characters); the answer"
        " is still free text."
    ),
]


class AskParentArgs(Wire, kw_only=True):
    question: QuestionText
    options: QuestionOptions = None


UserQuestionText = Annotated[
    str,
    msgspec.Meta(
        description="Your question to the person: self-contained, since they do not see your"
        " transcript."
    ),
]


class AskUserArgs(Wire, kw_only=True):
    question: UserQuestionText
    options: QuestionOptions = None


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
    agent: SpawnAgent = None


class WaitAgentsArgs(Wire, kw_only=True):
    agent_ids: WaitIds = None
    timeout_ms: WaitTimeout = WAIT_DEFAULT_MS
    mode: WaitMode = "any"


# --- structured outputs (MCP structuredContent) ---
# Every one carries `text`: the exact text of the content blocks (joined with a newline), so a
# client that shows its model only structuredContent gives it the same texts (PROTOCOL.md §5).

ToolText = Annotated[
    str,
    msgspec.Meta(description="The text the tool's content blocks hold, joined with a newline."),
]


class MessageIdOutput(Wire, kw_only=True):
    message_id: str
    text: ToolText


class InterruptOutput(Wire, kw_only=True):
    accepted: bool
    previous_status: Status | None = None
    text: ToolText


class ListAgentsOutput(Wire, kw_only=True):
    agents: list[AgentRow]
    text: ToolText


class SpawnAgentOutput(Wire, kw_only=True):
    child_id: str
    text: ToolText


class WaitedAgent(Wire, kw_only=True):
    """One waited-for subagent: its status now, and what this wait collected from it."""

    agent_id: str
    status: Status
    reason: str | None = None  # how its last turn ended, when its settlement notice was collected
    output: str | None = None  # that notice's closing message
    reports: list[str] | None = None  # the reports collected, in order
    # its questions (ask_parent, permission questions) and their cancellations collected, each
    # its blocks joined by \n
    questions: list[str] | None = None
    held: Held | None = None  # the spent budget that holds its tree (nothing of it runs)


class AskOutput(Wire, kw_only=True):
    """ask_parent's answer: the answer's text, or (answered false) why the question ended."""

    answered: bool
    answer: str | None = None  # the answer's whole text, when answered
    ended: Literal["interrupted", "ended", "parent", "timeout", "shutdown", "declined"] | None = (
        None
    )
    text: ToolText


class AskUserOutput(Wire, kw_only=True):
    """ask_user's answer: the person's action, and the answer's text when they accepted."""

    action: Literal["accept", "decline", "cancel"] | None = None  # None: the question ended
    answer: str | None = None  # the answer's whole text, when accepted
    ended: Literal["interrupted", "ended", "timeout", "shutdown"] | None = None
    text: ToolText


class WaitAgentsOutput(Wire, kw_only=True):
    agents: list[WaitedAgent]
    timed_out: bool = False
    still_working: list[str] = msgspec.field(default_factory=list)  # the live ones, in order
    text: ToolText


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


class AskParentParams(AskParentArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class AskUserParams(AskUserArgs, kw_only=True):
    caller: str | None = None
    activation: str | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class AskUserResult(AskUserOutput, kw_only=True):
    pass


class SendMessageResult(MessageIdOutput, kw_only=True):
    pass


class AskParentResult(AskOutput, kw_only=True):
    pass


class InterruptAgentResult(InterruptOutput, kw_only=True):
    pass


class ListAgentsResult(ListAgentsOutput, kw_only=True):
    pass


class ReportResult(MessageIdOutput, kw_only=True):
    pass


class SpawnAgentResult(SpawnAgentOutput, kw_only=True):
    pass


class WaitAgentsResult(WaitAgentsOutput, kw_only=True):
    blocks: list[str] = msgspec.field(default_factory=list)  # the text blocks, `text` joined


class ToolErrorData(Wire, kw_only=True):
    """`data` of a direct tool method's JSON-RPC error."""

    reason: str
    text: str


# --- MCP bridge shapes ---


class ToolsListParams(Params, kw_only=True):
    cursor: str | None = None


class ToolAnnotations(Wire, kw_only=True, omit_defaults=False):
    """MCP ToolAnnotations: hints for clients (approval prompts), every one stated."""

    title: str
    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool


class Tool(Wire, kw_only=True):
    name: str
    title: str | None = None
    description: str
    inputSchema: dict[str, Any]
    outputSchema: dict[str, Any] | None = None
    annotations: ToolAnnotations | None = None
    execution: ToolExecution | None = None  # tasks (2025-11-25): spawn_agent, send_message


class ToolsListResult(Wire, kw_only=True, omit_defaults=False):
    """MCP ListToolsResult; `report` depends on the caller, so the list is private and never fresh."""

    tools: list[Tool]
    ttlMs: int = 0
    cacheScope: Literal["private", "public"] = "private"


class ToolsCallParams(Params, kw_only=True):
    name: str
    arguments: Any = None
    task: TaskMetadata | None = None  # a task-augmented call (schema/tasks.py)


class CallToolResult(Wire, kw_only=True):
    content: list[dict[str, Any]]
    structuredContent: dict[str, Any] | None = None
    isError: bool
