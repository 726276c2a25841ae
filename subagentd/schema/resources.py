"""MCP resources: each agent of the caller's subtree, its state and last outcome, and its
transcript, paged (PROTOCOL.md section 5). Reading consumes nothing."""

from __future__ import annotations

from subagentd.schema.base import Params, Wire
from subagentd.schema.host_methods import AgentInfo, StoredEvent

AGENT_URI = "subagentd://agent/{agent_id}"
TRANSCRIPT_URI = "subagentd://agent/{agent_id}/transcript"
MIME = "application/json"


class ResourcesListParams(Params, kw_only=True):
    cursor: str | None = None


class Resource(Wire, kw_only=True):
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mimeType: str


class ResourcesListResult(Wire, kw_only=True):
    resources: list[Resource]
    nextCursor: str | None = None


class ResourceTemplate(Wire, kw_only=True):
    uriTemplate: str
    name: str
    title: str
    description: str
    mimeType: str


class ResourceTemplatesListResult(Wire, kw_only=True):
    resourceTemplates: list[ResourceTemplate]


class ResourceUriParams(Params, kw_only=True):
    uri: str


class ResourceText(Wire, kw_only=True):
    uri: str
    mimeType: str
    text: str  # JSON: an AgentResource or a TranscriptPage


class ResourcesReadResult(Wire, kw_only=True):
    contents: list[ResourceText]


class LastOutcome(Wire, kw_only=True):
    """How the agent's last turn ended: its reason and closing message (output)."""

    reason: str
    output: str | None = None


class AgentResource(AgentInfo, kw_only=True):
    """An agent's state (agents/get) and its last outcome: the last turn's end and last report."""

    last_turn: LastOutcome | None = None
    last_report: str | None = None


class TranscriptPage(Wire, kw_only=True):
    """One page of an agent's transcript (transcript/read); `next` is the next page's URI."""

    agent_id: str
    events: list[StoredEvent]
    next: str | None = None


class ResourceUpdated(Wire, kw_only=True):
    """notifications/resources/updated: a subscribed resource changed."""

    uri: str
