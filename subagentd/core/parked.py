"""Parked messages made visible in listings: `[idle, 2 parked]` (PROTOCOL.md section 5)."""

from __future__ import annotations

from subagentd.core.store import Store
from subagentd.schema.listing import AgentRow, ChildRow


def mark_parked(store: Store, rows: list[AgentRow]) -> list[AgentRow]:
    """Set `parked` on the rows of agents holding parked messages (few: one indexed query)."""
    counts = store.parked_counts()
    if counts:
        for row in rows:
            if isinstance(row, ChildRow) and row.id in counts:
                row.parked = counts[row.id]
    return rows
