"""What an ACP session's `session/update`s add to a turn's transcript (docs/acp.md).

Message and thought chunks are joined until another kind of update comes (`acp_message`,
`acp_thought`: one event per message, not per chunk); tool calls (`acp_tool_call`, an update
carrying its call's title), plans (`acp_plan`), the permission and form questions (`acp_permission`, `acp_elicitation`) and
any other update (`acp_update`, its kind only) are one event each. The last agent message is the
turn's output.

Every event is bounded: a joined message or thought keeps its first `limit` UTF-8 bytes
(--max-text-bytes) and says `cut: true`; the strings an update carries keep their first
TOOL_TEXT characters, a plan its first PLAN_ENTRIES entries. At most PENDING events wait to be
written: the agent's reader waits meanwhile (`room`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import anyio

TOOL_TEXT = 4096  # characters of a tool call's content (and of any string an update carries)
PLAN_ENTRIES = 100  # entries of a plan kept in its transcript event
KIND_TEXT = 64  # characters of an unknown update's kind kept
TITLES = 256  # tool call titles remembered for their updates (the oldest forgotten first)
PENDING = 64  # events waiting to be written before the agent's reader waits for room


@dataclass(slots=True, eq=False)
class TurnProgress:
    """What one turn's `session/update`s add to the transcript, and the agent's last message."""

    limit: int = 0  # UTF-8 bytes of a joined message or thought (--max-text-bytes; 0: none)
    events: list[tuple[str, Any]] = field(default_factory=list)
    chunk_kind: str | None = None  # "acp_message" or "acp_thought" while chunks arrive
    chunk: list[str] = field(default_factory=list)
    chunk_bytes: int = 0  # UTF-8 bytes in `chunk`
    chunk_cut: bool = False  # the chunks went past `limit`: the rest was dropped
    last_message: str = ""
    replaying: bool = False  # session/load replays the history: not this turn's work
    changed: anyio.Event = field(default_factory=anyio.Event)  # events to write
    titles: dict[str, Any] = field(default_factory=dict)  # tool call id -> its title
    cost: Any = None  # the last `usage_update` cost (the session's cumulative cost)
    reported: Any = None  # the prompt reply's `usage` (the session's running token totals)
    totals: Any = None  # the session's totals once this turn is charged (runners/acp_usage.py)
    written: anyio.Event = field(default_factory=anyio.Event)  # the writer took the events
    ended: bool = False  # the turn ended: nothing more waits for room

    def update(self, update: dict[str, Any]) -> None:
        if self.replaying:
            return
        self._update(update)
        if self.events:
            self.changed.set()

    async def room(self) -> None:
        """Until fewer than PENDING events wait to be written (or the turn ended)."""
        while len(self.events) >= PENDING and not self.ended:
            self.written = anyio.Event()
            await self.written.wait()

    def take(self) -> list[tuple[str, Any]]:
        """The events waiting to be written (the reader may go on)."""
        events, self.events = self.events, []
        self.written.set()
        return events

    def end(self) -> None:
        """The turn ended: the reader does not wait for room any more."""
        self.ended = True
        self.written.set()

    def _update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            event = "acp_message" if kind == "agent_message_chunk" else "acp_thought"
            if event != self.chunk_kind:
                self.close_chunk()
                self.chunk_kind = event
            content = update.get("content")
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                self._add_chunk(content["text"])
            return
        self.close_chunk()
        if kind in ("tool_call", "tool_call_update"):
            fields = ("toolCallId", "title", "kind", "status")
            call = {k: update[k][:TOOL_TEXT] for k in fields if isinstance(update.get(k), str)}
            call_id = str(call.get("toolCallId"))
            if "title" in call:
                self.titles.pop(call_id, None)
                if len(self.titles) >= TITLES:
                    del self.titles[next(iter(self.titles))]
                self.titles[call_id] = call["title"]
            elif call_id in self.titles:  # an update names its call as the start did
                call["title"] = self.titles[call_id]
            text = _content_text(update.get("content"))
            if text:
                call["text"] = text[:TOOL_TEXT]
            self.events.append(("acp_tool_call", call))
        elif kind == "plan":
            entries = update.get("entries")
            kept = entries[:PLAN_ENTRIES] if isinstance(entries, list) else []
            self.events.append(("acp_plan", {"entries": [_clipped(e) for e in kept]}))
        elif kind == "usage_update":
            if update.get("cost") is not None:
                self.cost = update.get("cost")
            self.events.append(("acp_update", {"sessionUpdate": kind}))
        elif kind in ("permission", "elicitation"):  # what subagentd asked for the agent
            asked = {k: v for k, v in update.items() if k != "sessionUpdate"}
            self.events.append((f"acp_{kind}", _clipped(asked)))
        elif isinstance(kind, str):
            self.events.append(("acp_update", {"sessionUpdate": kind[:KIND_TEXT]}))

    def _add_chunk(self, text: str) -> None:
        """A chunk joined to the message, up to `limit` bytes (never half a character)."""
        if self.chunk_cut:
            return
        size = len(text) if text.isascii() else len(text.encode())
        if self.limit and self.chunk_bytes + size > self.limit:
            left = self.limit - self.chunk_bytes
            text = text.encode()[:left].decode("utf-8", errors="ignore")
            size = len(text.encode())
            self.chunk_cut = True
        self.chunk.append(text)
        self.chunk_bytes += size

    def close_chunk(self) -> None:
        if self.chunk_kind is None:
            return
        text = "".join(self.chunk)
        data: dict[str, Any] = {"text": text}
        if self.chunk_cut:
            data["cut"] = True
        self.events.append((self.chunk_kind, data))
        if self.chunk_kind == "acp_message":
            self.last_message = text
        self.chunk_kind, self.chunk, self.chunk_bytes, self.chunk_cut = None, [], 0, False


def _clipped(value: Any, depth: int = 3) -> Any:
    """JSON data an agent sent, bounded: strings to TOOL_TEXT characters, lists and objects to
    PLAN_ENTRIES items, nesting to `depth` levels (deeper: dropped, as None)."""
    if isinstance(value, str):
        return value[:TOOL_TEXT]
    if depth == 0 or not isinstance(value, list | dict):
        return value if isinstance(value, int | float | bool) or value is None else None
    if isinstance(value, list):
        return [_clipped(v, depth - 1) for v in value[:PLAN_ENTRIES]]
    items = itertools.islice(value.items(), PLAN_ENTRIES)
    return {str(k)[:KIND_TEXT]: _clipped(v, depth - 1) for k, v in items}


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
