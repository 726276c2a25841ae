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
}
