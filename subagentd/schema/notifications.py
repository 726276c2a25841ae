"""Notifications subagentd sends to the host (PROTOCOL.md section 6)."""

from __future__ import annotations

from typing import Literal

from subagentd.schema.base import Wire
from subagentd.schema.listing import Status
from subagentd.schema.messages import Descriptor, Message


class TurnStart(Wire, kw_only=True):
    agent_id: str
    activation_id: str
    turn_id: str
    messages: list[Message]
    resume: Descriptor | None = None
    instructions: str | None = None
    traceparent: str | None = None  # the turn's span (W3C trace context) when tracing is on


InterruptKind = Literal["parent", "user", "shutdown", "deadline", "stop"]


class InterruptCause(Wire, kw_only=True):
    kind: InterruptKind
    by: str | None = None


class TurnInterrupt(Wire, kw_only=True):
    agent_id: str
    turn_id: str
    cause: InterruptCause


class AgentInject(Wire, kw_only=True):
    agent_id: str
    messages: list[Message]


class AgentSettled(Wire, kw_only=True):
    agent_id: str
    reason: str


class AgentStatus(Wire, kw_only=True):
    agent_id: str
    status: Status


class QuestionAsk(Wire, kw_only=True):
    """`question/ask`: a subagent's `ask_user` question for the person behind the root (a host
    that declared `experimental.subagentd.askUser`); answered with `question/answer`."""

    question_id: str
    root_id: str  # the root of the asking agent's tree
    agent_id: str  # the agent that asks
    label: str
    question: str
    options: list[str] | None = None  # offered choices (the answer is still free text)
    message: str  # the question as a person reads it (docs/semantics.md section 14)


class QuestionOver(Wire, kw_only=True):
    """`question/cancelled`: a `question/ask` that ended unanswered (its asker's turn ended or
    was interrupted, the timeout passed, shutdown); answering it now is refused."""

    question_id: str
    reason: Literal["interrupted", "ended", "timeout", "shutdown"]


class Progress(Wire, kw_only=True):
    """MCP `notifications/progress` for a waiting tools/call (wait_agents) that gave a token."""

    progressToken: str | int
    progress: float
    total: float | None = None
    message: str | None = None


NOTIFICATIONS: dict[str, type[Wire]] = {
    "turn/start": TurnStart,
    "turn/interrupt": TurnInterrupt,
    "agent/inject": AgentInject,
    "agent/settled": AgentSettled,
    "agent/status": AgentStatus,
    "notifications/progress": Progress,
    "question/ask": QuestionAsk,
    "question/cancelled": QuestionOver,
}
