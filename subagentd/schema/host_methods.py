"""Params and results of the trusted host API (PROTOCOL.md section 4)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from subagentd.schema.base import AgentId, HostParams, PageSize, Seq, Wire
from subagentd.schema.budgets import Budget, BudgetInfo, Held, Spent, Usage
from subagentd.schema.listing import AgentRow, Status
from subagentd.schema.messages import AgentChoice, MessageState, Mode, Source, ToolFilter

TurnReason = Literal["completed", "aborted", "max-tokens", "refusal", "error"]
Scope = Literal["children", "descendants"]
AgentKind = Literal["ordinary", "continuable", "one-shot", "unknown"]
ClosePolicy = Literal["drain", "finish"]


class Empty(Wire, kw_only=True):
    """An empty result `{}`."""


Caller = Annotated[str, msgspec.Meta(min_length=1)]


class OpenParams(HostParams, kw_only=True):
    agent_id: AgentId | None = None
    label: str | None = None
    parent_id: str | None = None
    traceparent: str | None = None  # W3C trace context: the host's span for this agent's turns
    budget: Budget | None = None  # the tree's (or fork's) own budget; else the serve defaults


class OpenResult(Wire, kw_only=True):
    agent_id: str
    activation_id: str


class AgentParams(HostParams, kw_only=True):
    agent_id: str


class SpawnParams(HostParams, kw_only=True):
    caller: Caller
    activation: str | None = None
    label: str
    prompt: str
    mode: Mode = "continuable"
    child_id: AgentId | None = None
    agent_provider: str | None = None
    agent_model: str | None = None
    persona: str | None = None
    tool_filter: ToolFilter | None = None
    agent: AgentChoice | None = None  # a remote child: its turns run on that A2A agent
    budget: Budget | None = None  # the child's own, cut to what the caller's lineage has left
    on_parent_close: ClosePolicy = "drain"  # what a close of its root does to its open turn
    idempotency_key: str | None = None
    traceparent: str | None = None  # W3C trace context: the host's span for the child's turns


class SpawnResult(Wire, kw_only=True):
    child_id: str
    activation_id: str
    message_id: str
    text: str


class TurnBeginParams(HostParams, kw_only=True):
    agent_id: str
    messages: list[str] | None = None
    traceparent: str | None = None  # W3C trace context: the host's span for this turn


class TurnBeginResult(Wire, kw_only=True):
    turn_id: str


class FollowupParams(HostParams, kw_only=True):
    agent_id: str
    message: str
    idempotency_key: str | None = None


class MessageIdResult(Wire, kw_only=True):
    message_id: str


class InterruptResult(Wire, kw_only=True):
    accepted: bool
    previous_status: Status


class TurnEndParams(HostParams, kw_only=True):
    agent_id: str
    turn_id: str
    reason: TurnReason
    output: str | None = None
    usage: Usage | None = None  # what the turn used: charged to the agent and every ancestor


class Event(Wire, kw_only=True):
    type: str
    data: Any = None


class TranscriptAppendParams(HostParams, kw_only=True):
    agent_id: str
    turn_id: str | None = None
    events: list[Event]


class SeqResult(Wire, kw_only=True):
    seq: int


class TranscriptReadParams(HostParams, kw_only=True):
    agent_id: str
    after: Seq | None = None
    limit: PageSize | None = None


class StoredEvent(Wire, kw_only=True):
    seq: int
    type: str
    data: Any = None
    at: str
    turn_id: str | None = None


class TranscriptReadResult(Wire, kw_only=True):
    events: list[StoredEvent]
    next: int | None = None


class AgentInfo(Wire, kw_only=True):
    agent_id: str
    parent_id: str | None = None
    kind: AgentKind
    mode: Mode | None = None
    label: str | None = None
    status: Status
    depth: int
    created_at: str
    queued: int
    parked: int
    usage: Spent | None = None  # its own turns, spawns, tokens and cost
    tree_usage: Spent | None = None  # the same summed over it and everything below it
    budget: BudgetInfo | None = None  # its own budget (ancestors' bind it too)
    held: Held | None = None  # its queued input starts no turn: this budget is spent
    on_parent_close: ClosePolicy | None = None  # "finish" when it was spawned so


class ListParams(HostParams, kw_only=True):
    root_id: str
    scope: Scope = "children"
    include_one_shot: bool = True
    cursor: str | None = None
    limit: PageSize | None = None
    usage: bool = False  # each child row gains its own usage


class ListResult(Wire, kw_only=True):
    agents: list[AgentRow]  # one-shot children included
    next_cursor: str | None = None


class MessageGetParams(HostParams, kw_only=True):
    message_id: str


class MessageInfo(Wire, kw_only=True):
    message_id: str
    agent_id: str
    state: MessageState
    turn_id: str | None = None
    source: Source


WaitMs = Annotated[int, msgspec.Meta(ge=0, le=600_000)]  # schema/tools.py WAIT_IDLE_MAX_MS


class WaitIdleParams(HostParams, kw_only=True):
    agent_id: str
    timeout_ms: WaitMs = 30_000


class ClockAdvanceParams(HostParams, kw_only=True):
    """clock/advance (`--clock manual` only): seconds to move the clock forward."""

    seconds: Annotated[float, msgspec.Meta(gt=0, le=366 * 86400)]


class ClockAdvanceResult(Wire, kw_only=True):
    """The seconds the manual clock was advanced since start, in all."""

    advanced: float


class WaitIdleResult(Wire, kw_only=True):
    """agents/wait_idle: `idle`, or (on timeout) the agents still running or with input to run."""

    idle: bool
    running: list[str] | None = None
    runnable: list[str] | None = None


class QuestionAnswerParams(HostParams, kw_only=True):
    """`question/answer`: the person's answer to a `question/ask` (`accept` with `answer`, or
    `decline` / `cancel`)."""

    question_id: str
    action: Literal["accept", "decline", "cancel"]
    answer: str | None = None
