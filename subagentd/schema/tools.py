"""The four model-facing tools: arguments, structured outputs, direct-method results, MCP shapes."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from subagentd.schema.base import Params, Wire
from subagentd.schema.host_methods import Scope
from subagentd.schema.listing import AgentRow, Status

CALLER_META = "subagentd/caller"
"""`_meta` key naming the calling agent of `tools/list` and `tools/call`."""
ACTIVATION_META = "subagentd/activation"
"""`_meta` key naming the caller's activation (optional: a stale one is refused)."""
IDEMPOTENCY_META = "subagentd/idempotency_key"
"""`_meta` key of a `tools/call` idempotency key."""

# --- tool arguments (validated with the exact texts of SEMANTICS.md section 3) ---


class SendMessageArgs(Wire, kw_only=True):
    subagent_id: str
    message: str


class InterruptAgentArgs(Wire, kw_only=True):
    agent_id: str


class ListAgentsArgs(Wire, kw_only=True):
    scope: Scope = "children"


class ReportArgs(Wire, kw_only=True):
    output: str


# --- structured outputs (MCP structuredContent) ---


class MessageIdOutput(Wire, kw_only=True):
    message_id: str


class InterruptOutput(Wire, kw_only=True):
    accepted: bool
    previous_status: Status | None = None


class ListAgentsOutput(Wire, kw_only=True):
    agents: list[AgentRow]


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


class SendMessageResult(MessageIdOutput, kw_only=True):
    text: str


class InterruptAgentResult(InterruptOutput, kw_only=True):
    text: str


class ListAgentsResult(ListAgentsOutput, kw_only=True):
    text: str


class ReportResult(MessageIdOutput, kw_only=True):
    text: str


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
