"""`subagentd inspect`: a read-only look into a database, for humans (or JSON for scripts).

It reads through storage's own queries over a read-only connection (storage/reader.py) and never
writes: one query per table, the tree is built in Python, and corrupt rows (bad descriptors, parent
cycles, unreadable event data) are shown as such instead of stopping the listing.

Longer than ~300 lines on purpose: `summarize` holds the one-line form of every event type the
transcript can hold (`watch` and the timeline show the same lines); split by type, a new event
type would have no single place to get its line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.storage.reader import StoreReader, UnreadableDatabaseError
from subagentd.view.terminal import json_text, printable

DRAWN_LEVELS = 40  # deeper prefixes are cut to their last levels, so corrupt chains stay cheap


@dataclass(slots=True)
class SessionRow:
    id: str
    parent_id: str | None
    label: str | None
    kind: str
    status: str
    queued: int
    parked: int
    last_reason: str | None
    created_at: str
    tokens: int = 0  # input and output tokens its own turns reported (PROTOCOL.md section 12)
    cost: float = 0.0  # the cost they reported, in the deployment's currency
    depth: int = 0  # edges from the root it is drawn under (not the stored depth)
    cycle: bool = False  # drawn as a root only because its ancestors form a cycle
    remote: str | None = None  # a remote child: the A2A agent's NAME (--a2a-agent) its turns run on

    def as_dict(self, *names: str) -> dict[str, Any]:
        return {name: getattr(self, name) for name in names or FIELDS}


FIELDS = tuple(f.name for f in fields(SessionRow))
HEADER_FIELDS = tuple(name for name in FIELDS if name not in ("depth", "cycle"))


def kind_of(session_kind: str, body: str | bytes | None) -> str:
    """ordinary / continuable / one-shot, or what is wrong with a subagent's descriptor (as the
    server finds it: core/descriptors.py)."""
    if session_kind != "subagent":
        return session_kind
    try:
        return parse_descriptor(body).mode
    except DescriptorProblem as problem:
        return f"{problem.reason} descriptor"


def remote_of(session_kind: str, body: str | bytes | None) -> str | None:
    """The NAME of the A2A agent a remote child's turns run on (docs/a2a.md); None otherwise."""
    if session_kind != "subagent":
        return None
    try:
        agent = parse_descriptor(body).agent
    except DescriptorProblem:
        return None
    return agent.a2a if agent is not None else None


def load(reader: StoreReader, only: str | Iterable[str] | None = None) -> dict[str, SessionRow]:
    """Every session (or only some) with its kind, status and inbox counts: one query per table
    (per session for some)."""
    if only is None:
        records = reader.all_sessions()
        bodies = reader.all_descriptors()
        counts = reader.all_inbox_counts()
        usage = reader.usage_of(None)
    else:
        ids = [only] if isinstance(only, str) else list(only)
        records = reader.sessions_of(ids)
        bodies = {i: reader.get_descriptor(i) for i in ids}
        counts = {i: reader.inbox_counts(i) for i in ids}
        usage = reader.usage_of(ids)
    sessions: dict[str, SessionRow] = {}
    for r in records:
        queued, parked = counts.get(r.id, (0, 0))
        sessions[r.id] = SessionRow(
            id=r.id,
            parent_id=r.parent_id,
            label=r.label,
            kind=kind_of(r.kind, bodies.get(r.id)),
            status="open turn" if r.open_turn_id else "ready",
            queued=queued,
            parked=parked,
            last_reason=r.last_reason,
            created_at=r.created_at or "",
            tokens=usage.get(r.id, (0, 0.0))[0],
            cost=usage.get(r.id, (0, 0.0))[1],
            remote=remote_of(r.kind, bodies.get(r.id)),
        )
    return sessions


def forest(
    sessions: dict[str, SessionRow],
) -> list[tuple[SessionRow, tuple[Any, ...] | None, bool]]:
    """Pre-order (session, prefix chain, is_last) for the whole forest; each session once."""
    children: dict[str, list[SessionRow]] = {}
    roots: list[SessionRow] = []
    for s in sessions.values():
        if s.parent_id is None or s.parent_id not in sessions or s.parent_id == s.id:
            roots.append(s)
        else:
            children.setdefault(s.parent_id, []).append(s)
    order = lambda s: (s.created_at, s.id)  # noqa: E731
    for kids in children.values():
        kids.sort(key=order)
    roots.sort(key=order)
    out: list[tuple[SessionRow, tuple[Any, ...] | None, bool]] = []
    seen: set[str] = set()

    def walk(root: SessionRow) -> None:
        # prefix chains are linked tuples (segment, parent chain) so deep trees stay linear
        stack: list[tuple[SessionRow, tuple[Any, ...] | None, bool, int]] = [(root, None, True, 0)]
        while stack:
            s, chain, last, depth = stack.pop()
            if s.id in seen:
                continue
            seen.add(s.id)
            s.depth = depth
            out.append((s, chain, last))
            kids = [k for k in children.get(s.id, ()) if k.id not in seen]
            below = None if depth == 0 else ("   " if last else "│  ", chain)
            for i in range(len(kids) - 1, -1, -1):
                stack.append((kids[i], below, i == len(kids) - 1, depth + 1))

    for root in roots:
        walk(root)
    # whatever is left hangs below a parent cycle: draw it from its earliest member
    for s in sorted((s for s in sessions.values() if s.id not in seen), key=order):
        if s.id not in seen:
            s.cycle = True
            walk(s)
    return out


def prefix(chain: tuple[Any, ...] | None, last: bool, depth: int) -> str:
    if depth == 0:
        return ""
    parts: list[str] = []
    while chain is not None and len(parts) < DRAWN_LEVELS:
        parts.append(chain[0])
        chain = chain[1]
    head = "…" if chain is not None else ""
    return head + "".join(reversed(parts)) + ("└─ " if last else "├─ ")


def describe(s: SessionRow) -> str:
    label = f' "{s.label}"' if s.label else ""
    cycle = " (parent cycle)" if s.cycle else ""
    remote = f" (remote: A2A agent {s.remote})" if s.remote else ""
    return (
        f"{s.id}{label} {s.kind}{remote}, {s.status}, queued {s.queued}, parked {s.parked},"
        f" last {s.last_reason or '—'}{cycle}"
    )


def short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def blocks_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    return " | ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def summarize(event_type: str, data: Any) -> str:
    """One line per event: what a human wants to see first."""
    if not isinstance(data, dict):
        return short(json.dumps(data, ensure_ascii=False)) if data is not None else ""
    turn = str(data.get("turn_id", ""))[:8]
    if event_type in ("message", "notice"):
        source = data.get("source") or {}
        origin = f"{source.get('kind', '?')}/{source.get('form', '?')}"
        if source.get("sender_session_id"):
            origin += f" from {source['sender_session_id']}"
        return f'{origin}: "{short(blocks_text(data), 60)}"'
    if event_type == "turn_start":
        return f"turn {turn} with {len(data.get('message_ids') or [])} message(s)"
    if event_type == "turn_end":
        text = f"turn {turn} {data.get('reason')}"
        if data.get("cause"):
            text += f" (cause {data['cause']})"
        if data.get("output") is not None:
            text += f': "{short(str(data["output"]), 50)}"'
        return text + runner_said(data.get("runner"))
    if event_type == "activated":
        resumed = " (cold resume)" if data.get("resume") else ""
        return f"activation {str(data.get('activation_id', ''))[:8]}{resumed}"
    if event_type == "settled":
        return f"settled (last turn {data.get('reason')}{runner_said(data.get('runner'), ';')})"
    if event_type == "runner_exit" and "exit_code" in data:
        return f"exit status {data['exit_code']}" + runner_said(
            {"stderr_tail": data.get("stderr")}, ";"
        )
    if event_type == "interrupt":
        by = f" by {data['by']}" if data.get("by") else ""
        return f"interrupt (cause {data.get('cause')}{by})"
    if event_type == "report":
        return f'reported as message {str(data.get("message_id", ""))[:8]}: "{short(str(data.get("output")), 50)}"'
    if event_type == "closed":
        return "closed by the host"
    if event_type == "acp_tool_call":
        said = f': "{short(str(data["text"]), 50)}"' if data.get("text") else ""
        status = f" {data['status']}" if data.get("status") else ""
        return f"tool call {data.get('title') or data.get('toolCallId')}{status}{said}"
    if event_type == "acp_plan":
        steps = "; ".join(
            str(e.get("content")) for e in data.get("entries") or [] if isinstance(e, dict)
        )
        return f'plan: "{short(steps, 60)}"'
    if event_type == "acp_permission":
        extra = data.get("optionId") or data.get("parent") or ""
        if data.get("by"):
            extra += f" by {data['by']}"
        if data.get("why"):
            extra += f" ({data['why']})"
        return f"permission for {data.get('title')}: {data.get('outcome')} {extra.strip()}".rstrip()
    if event_type == "acp_elicitation":
        why = f" ({data['why']})" if data.get("why") else ""
        asked = f'form question "{short(str(data.get("message")), 50)}": {data.get("outcome")}'
        return f"{asked} {data.get('parent') or ''}".rstrip() + why
    if event_type == "acp_session":
        return f"ACP session {str(data.get('session_id'))[:12]} ({'loaded' if data.get('loaded') else 'new'})"
    if event_type == "acp_end" and data.get("error"):
        return f'ACP prompt failed: "{short(str(data["error"]), 60)}"'
    if event_type == "acp_end":
        return f"ACP prompt stopped: {data.get('stop_reason')}"
    if event_type == "a2a_task":
        return f"A2A task {short(str(data.get('task_id')), 40)} at {data.get('agent')}"
    if event_type == "a2a_status":
        said = f': "{short(str(data["text"]), 50)}"' if data.get("text") else ""
        return f"A2A {data.get('state')}{said}"
    if event_type == "a2a_artifact":
        return f'A2A artifact {data.get("name") or ""}: "{short(str(data.get("text")), 50)}"'
    if event_type == "a2a_end":
        return f"A2A task ended {data.get('state')}"
    if event_type == "tool_refused":
        return f'{data.get("tool")} refused: "{short(str(data.get("text")), 60)}"'
    if event_type == "descriptor":
        agent = data.get("agent")
        name = agent.get("a2a") if isinstance(agent, dict) else None
        remote = f", remote: A2A agent {name}" if name else ""
        label = json.dumps(data.get("label"), ensure_ascii=False)
        return f"mode {data.get('mode')}, label {label}{remote}"
    if isinstance(data.get("text"), str):
        return f'"{short(data["text"])}"'
    if "content" in data:
        return f'"{short(blocks_text(data))}"'
    return short(json.dumps(data, ensure_ascii=False))


def runner_said(runner: Any, joint: str = ",") -> str:
    """A failed runner's status and its stderr's last line (`turn_end`/`settled`'s `runner`)."""
    if not isinstance(runner, dict):
        return ""
    status = f" runner {runner['status']}" if runner.get("status") else ""
    lines = str(runner.get("stderr_tail") or "").strip().splitlines()
    said = f' stderr ends "{short(lines[-1], 80)}"' if lines else ""
    return joint + status + ("," if status and said else "") + said if status or said else ""


def transcript(reader: StoreReader, agent_id: str) -> list[dict[str, Any]]:
    events = []
    for event in reader.transcript(agent_id):
        raw = event.data
        try:
            data, summary = json.loads(raw) if raw is not None else None, None
        except (ValueError, TypeError):
            data, summary = raw, "(unreadable data)"
        if summary is None:
            summary = summarize(event.type, data)
        events.append(
            {
                "seq": event.seq,
                "at": event.at,
                "type": event.type,
                "turn_id": event.turn_id,
                "data": data,
                "summary": summary,
            }
        )
    return events


def write_lines(lines: list[str]) -> None:
    sys.stdout.write("\n".join(printable(line) for line in lines) + "\n")


def show_forest(path: str, sessions: dict[str, SessionRow], as_json: bool) -> None:
    drawn = forest(sessions)
    if as_json:
        rows = [s.as_dict() for s, _, _ in drawn]
        sys.stdout.write(json_text({"db": path, "sessions": rows}) + "\n")
        return
    lines = [
        f"{len(sessions)} session(s) in {path} (status as stored; a running server may hold some live)"
    ]
    lines += [prefix(chain, last, s.depth) + describe(s) for s, chain, last in drawn]
    write_lines(lines)


def show_agent(reader: StoreReader, session: SessionRow, as_json: bool) -> None:
    events = transcript(reader, session.id)
    if as_json:
        header = session.as_dict(*HEADER_FIELDS)
        sys.stdout.write(json_text({"agent": header, "events": events}) + "\n")
        return
    parent = session.parent_id or "—"
    kids = reader.children(session.id)
    lines = [
        describe(session),
        f"parent {parent}, created {session.created_at}, {len(events)} event(s)",
    ]
    if kids:
        lines.append("children " + ", ".join(kids))
    for e in events:
        at = str(e["at"]).replace("T", " ")[:23]
        lines.append(f"{e['seq']:>6}  {at}  {e['type']:<11} {e['summary']}")
    write_lines(lines)


def open_reader(path: str) -> StoreReader | None:
    """The database opened read-only, or None once stderr says why it cannot be read."""
    try:
        return StoreReader(path)
    except UnreadableDatabaseError as exc:
        print(f"subagentd inspect: {exc}", file=sys.stderr)
        return None


def run(path: str, agent_id: str | None, as_json: bool = False) -> int:
    if hasattr(sys.stdout, "reconfigure"):  # labels and tree lines on a non-UTF-8 terminal
        sys.stdout.reconfigure(errors="replace")
    reader = open_reader(path)
    if reader is None:
        return 2
    path = reader.name  # a PostgreSQL URL is shown without its password
    try:
        sessions = load(reader, agent_id)
        if agent_id is None:
            show_forest(path, sessions, as_json)
            return 0
        session = sessions.get(agent_id)
        if session is None:
            print(f"subagentd inspect: no agent {agent_id!r} in {path}", file=sys.stderr)
            return 1
        show_agent(reader, session, as_json)
        return 0
    except reader.errors as exc:
        print(f"subagentd inspect: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `subagentd inspect ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        reader.close()
