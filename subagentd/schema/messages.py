"""Inbox messages, their sources, and the child descriptor."""

from __future__ import annotations

from typing import Literal

import msgspec

from subagentd.schema.base import Wire

SourceKind = Literal[
    "user", "coordinator", "subagent-report", "subagent-settled", "subagent-question"
]
Mode = Literal["continuable", "one-shot"]
MessageState = Literal["queued", "parked", "claimed", "cancelled"]  # an inbox message's state


class TextBlock(Wire, tag_field="type", tag="text", kw_only=True):
    """A text content block (`{"type": "text", "text": ...}`)."""

    text: str


class Source(Wire, kw_only=True):
    """Who a message comes from; authority never derives from it."""

    kind: SourceKind
    form: str
    sender_session_id: str | None = None
    summary: str | None = None


class Message(Wire, kw_only=True):
    message_id: str
    content: list[TextBlock]
    source: Source


class ToolFilter(Wire, forbid_unknown_fields=True, kw_only=True):
    allow: list[str] | None = None
    deny: list[str] | None = None


class AgentChoice(Wire, forbid_unknown_fields=True, kw_only=True):
    """Where a subagent's turns run when not by the deployment's turn runner: `a2a` names one of
    the A2A agents the deployment lists (`--a2a-agent NAME=URL`; docs/a2a.md)."""

    a2a: str


class Descriptor(Wire, forbid_unknown_fields=True, kw_only=True):
    """A child's durable identity, written once with its session."""

    version: int
    mode: Mode
    label: str
    agent_provider: str | None = None
    agent_model: str | None = None
    persona: str | None = None
    tool_filter: ToolFilter | None = None
    agent: AgentChoice | None = None  # a remote child: its turns run on that A2A agent


DESCRIPTOR_VERSION = 1

descriptor_encoder = msgspec.json.Encoder()
descriptor_decoder: msgspec.json.Decoder[Descriptor] = msgspec.json.Decoder(Descriptor)
