"""The timeline of a run, read from a database: lanes, turns and the marks between them.

Plain data (JSON-ready) built from one read of each table through storage/reader.py; the HTML
page (page.py) draws it. Times are milliseconds since the first thing the run did.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from subagentd.storage.reader import EventRow, MessageRow, StoreReader
from subagentd.view.inspect import SessionRow, blocks_text, forest, load, summarize

TEXT_LIMIT = 4000  # characters kept of each message text and turn output
# what a turn did while it ran (an ACP session's updates, a refused tool call): its "working" lines
WORKING = frozenset(
    {"acp_message", "acp_thought", "acp_tool_call", "acp_plan", "acp_permission", "tool_refused"}
)


def millis(at: str | None) -> float | None:
    """An ISO time as epoch milliseconds (None when missing or unreadable)."""
    if not at:
        return None
    try:
        return datetime.fromisoformat(at).timestamp() * 1000
    except ValueError:
        return None


def clip(text: str | None) -> str | None:
    if text is None or len(text) <= TEXT_LIMIT:
        return text
    return text[:TEXT_LIMIT] + f"… ({len(text) - TEXT_LIMIT} more characters)"


def decoded(raw: str | bytes | None) -> Any:
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, TypeError):
        return None


def kind_of_message(source: dict[str, Any]) -> str:
    """task, follow-up, report, notice, message (agent to agent) or input (from the host)."""
    form, kind = source.get("form"), source.get("kind")
    if form == "spawn":
        return "task"
    if form in ("notice", "permission", "question") or kind in (
        "subagent-settled",
        "subagent-question",
    ):
        return "notice"
    if form == "followup":
        return "follow-up"
    if kind == "subagent-report":
        return "report"
    return "message" if source.get("sender_session_id") else "input"


def subtree(sessions: dict[str, SessionRow], root: str) -> dict[str, SessionRow]:
    """`root` and every session below it."""
    children: dict[str, list[str]] = {}
    for s in sessions.values():
        if s.parent_id is not None:
            children.setdefault(s.parent_id, []).append(s.id)
    keep: dict[str, SessionRow] = {}
    stack = [root]
    while stack:
        sid = stack.pop()
        if sid in sessions and sid not in keep:
            keep[sid] = sessions[sid]
            stack.extend(children.get(sid, ()))
    return keep


class Builder:
    """Turns rows into lanes, turns and marks; agent references are lane indexes."""

    def __init__(self, sessions: dict[str, SessionRow]) -> None:
        drawn = forest(sessions)
        self.lane = {s.id: i for i, (s, _, _) in enumerate(drawn)}
        self.agents = [
            {
                "id": s.id,
                "label": s.label,
                "kind": s.kind,
                "status": s.status,
                "parent": self.lane.get(s.parent_id) if s.parent_id else None,
                "depth": s.depth,
                "queued": s.queued,
                "parked": s.parked,
                "last": s.last_reason,
                "created": millis(s.created_at),
                "tokens": s.tokens,
                "cost": s.cost,
            }
            for s, _, _ in drawn
        ]
        self.turns: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.open_turns: dict[str, dict[str, Any]] = {}
        self.turn_start: dict[str, float | None] = {}
        self.interrupts: dict[str, list[float]] = {}
        self.seen_messages: set[str] = set()

    def events(self, rows: list[EventRow]) -> None:
        for session_id, _seq, turn_id, kind, raw, at in rows:
            lane = self.lane.get(session_id)
            if lane is None:
                continue
            data = decoded(raw)
            data = data if isinstance(data, dict) else {}
            when = millis(at)
            if kind == "turn_start" and turn_id:
                turn: dict[str, Any] = {
                    "agent": lane,
                    "id": turn_id,
                    "start": when,
                    "end": None,
                    "reason": None,
                    "inputs": list(data.get("message_ids") or []),
                }
                self.turns.append(turn)
                self.open_turns[turn_id] = turn
                self.turn_start[turn_id] = when
            elif kind == "turn_end" and turn_id:
                ended = self.open_turns.pop(turn_id, None)
                if ended is None:  # a start we cannot see: a zero-length bar at its end
                    ended = {"agent": lane, "id": turn_id, "start": when, "inputs": []}
                    self.turns.append(ended)
                ended.update(
                    end=when,
                    reason=str(data.get("reason")),
                    cause=data.get("cause"),
                    output=clip(_text(data.get("output"))),
                    usage=data.get("usage") if isinstance(data.get("usage"), dict) else None,
                    runner=runner_text(data.get("runner")),
                )
            elif kind == "interrupt":
                by = data.get("by")
                source = self.lane.get(by) if by else None
                self.mark("interrupt", when, source, lane, by=by, cause=data.get("cause"))
                if when is not None:
                    self.interrupts.setdefault(session_id, []).append(when)
            elif kind == "settled":
                self.mark(
                    "settled", when, lane, lane, text=f"settled (last turn {data.get('reason')})"
                )
            elif kind == "activated" and data.get("resume"):
                self.mark("resumed", when, lane, lane, text="cold resume: rebuilt from storage")
            elif kind == "closed":
                self.mark("closed", when, lane, lane, text="closed by the host")
            elif kind in ("message", "notice"):
                self.message_event(lane, data, when)
            elif kind in WORKING and turn_id in self.open_turns:
                steps = self.open_turns[turn_id].setdefault("working", [])
                steps.append(summarize(kind, data))

    def message_event(self, lane: int, data: dict[str, Any], when: float | None) -> None:
        """A message seen in a transcript with no inbox row (injected, or a notice only recorded)."""
        message_id = str(data.get("message_id", ""))
        if message_id in self.seen_messages:
            return
        self.seen_messages.add(message_id)
        source = data.get("source")
        source = source if isinstance(source, dict) else {}
        sender = source.get("sender_session_id")
        self.mark(
            kind_of_message(source),
            when,
            self.lane.get(sender) if sender else None,
            lane,
            by=sender,
            text=clip(blocks_text(data)),
            message=message_id,
            state="recorded",
        )

    def messages(self, rows: list[MessageRow]) -> None:
        for _pos, message_id, session_id, content, raw_source, state, turn_id, at in rows:
            lane = self.lane.get(session_id)
            if lane is None:
                continue
            source = decoded(raw_source)
            source = source if isinstance(source, dict) else {}
            sender = source.get("sender_session_id")
            sent = millis(at)
            claimed = self.turn_start.get(turn_id) if turn_id else None
            parked = None
            if state == "parked" or claimed is not None:
                stops = [
                    t for t in self.interrupts.get(session_id, ()) if sent is None or t >= sent
                ]
                stops = [t for t in stops if claimed is None or t <= claimed]
                parked = stops[0] if stops else None
            self.mark(
                kind_of_message(source),
                sent,
                self.lane.get(sender) if sender else None,
                lane,
                by=sender,
                text=clip(blocks_text({"content": decoded(content)})),
                message=message_id,
                state=state,
                claimed=claimed,
                parkedAt=parked,
            )

    def mark(
        self, kind: str, at: float | None, source: int | None, target: int, **more: Any
    ) -> None:
        self.marks.append({"kind": kind, "at": at, "from": source, "to": target, **more})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) or value is None else json.dumps(value)


def build(reader: StoreReader, root: str | None = None) -> dict[str, Any]:
    """The timeline of the whole database, or of the tree below `root`."""
    sessions = load(reader)
    if root is not None:
        sessions = subtree(sessions, root)
    builder = Builder(sessions)
    messages = reader.all_messages()
    builder.seen_messages.update(row[1] for row in messages)  # drawn from their inbox rows
    builder.events(reader.all_events())
    builder.messages(messages)
    times = [t["start"] for t in builder.turns] + [t.get("end") for t in builder.turns]
    times += [m["at"] for m in builder.marks] + [a["created"] for a in builder.agents]
    known = [t for t in times if t is not None]
    t0 = min(known, default=0.0)
    t1 = max(known, default=0.0)
    shift(builder, t0)
    return {
        "root": root,
        "start": datetime.fromtimestamp(t0 / 1000).astimezone().isoformat() if known else None,
        "span": t1 - t0,
        "agents": builder.agents,
        "turns": builder.turns,
        "marks": builder.marks,
    }


def shift(builder: Builder, t0: float) -> None:
    """Every time relative to the run's first (rounded to 0.1 ms)."""
    for record, keys in (
        *((t, ("start", "end")) for t in builder.turns),
        *((m, ("at", "claimed", "parkedAt")) for m in builder.marks),
        *((a, ("created",)) for a in builder.agents),
    ):
        for key in keys:
            value = record.get(key)
            if value is not None:
                record[key] = round(value - t0, 1)


def runner_text(runner: Any) -> str | None:
    """A failed runner's status and the last lines of its stderr (`turn_end`'s `runner`)."""
    if not isinstance(runner, dict):
        return None
    tail = runner.get("stderr_tail")
    return f"{runner.get('status')}" + (f"; its stderr ended:\n{clip(str(tail))}" if tail else "")
