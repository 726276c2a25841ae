"""What an agent's MCP resource reads of storage (mcp/resources.py asks): whether an agent is in a
caller's subtree by durable parents (the resources' authorization rule), and its last report,
looked for in a bounded tail of its transcript."""

from __future__ import annotations

from typing import Any

import msgspec

from subagentd.core.store import Store

MAX_SEQ = 2**63 - 1  # the largest sequence number (schema/base.py Seq)
REPORT_TAIL = 1000  # an agent resource's last_report: looked for among this many newest events
REPORT_BYTES = 1024 * 1024  # event data read per page while looking


def in_subtree(store: Store, agent_id: str, root: str) -> bool:
    """Whether agent_id is stored and is root or below it through durable parents (bounded:
    corrupt cycles)."""
    if store.get_session(agent_id) is None:
        return False
    seen = 0
    while agent_id != root:
        record = store.get_session(agent_id)
        if record is None or record.parent_id is None or seen > 10_000:
            return False
        agent_id, seen = record.parent_id, seen + 1
    return True


def last_report(store: Store, agent_id: str) -> str | None:
    """The output of the last `report` among the agent's newest REPORT_TAIL events (None when
    there is none there). A read stays bounded however long the transcript: the newest event is
    found by a binary search over sequence numbers, then windows of sequence numbers are read
    newest first, each holding at most what is left of REPORT_TAIL events (a window holding more
    is halved), until a report is found or REPORT_TAIL events were looked at."""
    newest = _newest_seq(store, agent_id)
    budget, top, width = REPORT_TAIL, newest or 0, REPORT_TAIL
    while budget > 0 and top > 0:
        bottom = max(top - width, 0)
        events = _window(store, agent_id, bottom, top, budget)
        if events is None:  # more than the budget in it: a narrower window
            width = max(width // 2, 1)
            continue
        reports = [e for e in events if e.type == "report" and e.data is not None]
        if reports:
            data = msgspec.json.decode(reports[-1].data or "null")
            output = data.get("output") if isinstance(data, dict) else None
            return output if isinstance(output, str) else None
        budget, top, width = budget - len(events), bottom, width * 2
    return None


def _newest_seq(store: Store, agent_id: str) -> int | None:
    """The agent's newest event's sequence number: at most 64 one-row index reads."""
    first, _ = store.read_events(agent_id, 0, 1, 0)
    if not first:
        return None
    low, high = first[0].seq, MAX_SEQ  # an event at `low`; none above `high`
    while low < high:
        middle = (low + high + 1) // 2
        found, _ = store.read_events(agent_id, middle - 1, 1, 0)
        if found:
            low = found[0].seq
        else:
            high = middle - 1
    return low


def _window(store: Store, agent_id: str, bottom: int, top: int, budget: int) -> list[Any] | None:
    """The agent's events with bottom < seq <= top, or None when there are more than `budget`."""
    events: list[Any] = []
    after = bottom
    while True:
        page, more = store.read_events(agent_id, after, budget - len(events) + 1, REPORT_BYTES)
        inside = [e for e in page if e.seq <= top]
        events += inside
        if len(events) > budget:
            return None
        if len(inside) < len(page) or not more or not page:
            return events
        after = page[-1].seq
