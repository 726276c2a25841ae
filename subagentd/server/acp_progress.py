"""What an ACP session's `session/update`s add to a turn's transcript (docs/acp.md).

Message and thought chunks are joined until another kind of update comes (`acp_message`,
`acp_thought`: one event per message, not per chunk); tool calls (`acp_tool_call`, an update
carrying its call's title), plans (`acp_plan`), the permission answers (`acp_permission`) and
any other update (`acp_update`, its kind only) are one event each. The last agent message is the
turn's output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

TOOL_TEXT = 4096  # characters of a tool call's content kept in its transcript event


@dataclass(slots=True, eq=False)
class TurnProgress:
    """What one turn's `session/update`s add to the transcript, and the agent's last message."""

    events: list[tuple[str, Any]] = field(default_factory=list)
    chunk_kind: str | None = None  # "acp_message" or "acp_thought" while chunks arrive
    chunk: list[str] = field(default_factory=list)
    last_message: str = ""
    replaying: bool = False  # session/load replays the history: not this turn's work
    changed: anyio.Event = field(default_factory=anyio.Event)  # events to write
    titles: dict[str, Any] = field(default_factory=dict)  # tool call id -> its title
    cost: Any = None  # the last `usage_update` cost (the session's cumulative cost)
    reported: Any = None  # the prompt reply's `usage` (the session's running token totals)
    totals: Any = None  # the session's totals once this turn is charged (server/acp_usage.py)

    def update(self, update: dict[str, Any]) -> None:
        if self.replaying:
            return
        self._update(update)
        if self.events:
            self.changed.set()

    def _update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            event = "acp_message" if kind == "agent_message_chunk" else "acp_thought"
            if event != self.chunk_kind:
                self.close_chunk()
                self.chunk_kind = event
            content = update.get("content")
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                self.chunk.append(content["text"])
            return
        self.close_chunk()
        if kind in ("tool_call", "tool_call_update"):
            fields = ("toolCallId", "title", "kind", "status")
            call = {k: update[k] for k in fields if k in update}
            call_id = str(update.get("toolCallId"))
            if "title" in call:
                self.titles[call_id] = call["title"]
            elif call_id in self.titles:  # an update names its call as the start did
                call["title"] = self.titles[call_id]
            text = _content_text(update.get("content"))
            if text:
                call["text"] = text[:TOOL_TEXT]
            self.events.append(("acp_tool_call", call))
        elif kind == "plan":
            self.events.append(("acp_plan", {"entries": update.get("entries") or []}))
        elif kind == "usage_update":
            if update.get("cost") is not None:
                self.cost = update.get("cost")
            self.events.append(("acp_update", {"sessionUpdate": kind}))
        elif kind == "permission":
            self.events.append(
                ("acp_permission", {k: v for k, v in update.items() if k != "sessionUpdate"})
            )
        elif isinstance(kind, str):
            self.events.append(("acp_update", {"sessionUpdate": kind}))

    def close_chunk(self) -> None:
        if self.chunk_kind is None:
            return
        text = "".join(self.chunk)
        self.events.append((self.chunk_kind, {"text": text}))
        if self.chunk_kind == "acp_message":
            self.last_message = text
        self.chunk_kind, self.chunk = None, []


def _content_text(content: Any) -> str:
    """The text of a tool call's `content` (ToolCallContent items of type "content")."""
    if not isinstance(content, list):
        return ""
    texts = []
    for item in content:
        block = item.get("content") if isinstance(item, dict) else None
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "\n".join(texts)
