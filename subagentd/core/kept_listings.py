"""Listings answered again: what a list_agents reading may be reused for, and while what holds."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from subagentd.core.registry import LiveAgent
from subagentd.core.store import Store
from subagentd.schema.listing import AgentRow, Status


def live_statuses(
    rows: list[AgentRow], live: Callable[[str], LiveAgent | None]
) -> list[Status | None]:
    """The status of each row's agent in this process's registry (None: not live here): all a
    listing takes from memory, so a listing read earlier with the same statuses is still true
    while storage has not moved (Agents.kept)."""
    statuses: list[Status | None] = []
    append = statuses.append
    for row in rows:
        agent = live(row.id)
        append(None if agent is None else agent.status)
    return statuses


class KeptChildren(msgspec.Struct):
    """A children listing as read, and what it was read from (`Listings`)."""

    changes: int  # store.changes() then
    outside: object | None  # store.outside_commits() just before it was read (None: not taken)
    statuses: list[Status | None]  # live_statuses of its rows then
    rows: list[AgentRow]
    text: str


class Listings:
    """The last children listing of each caller, answered again while nothing it was read from
    can have moved: this process wrote nothing since (`store.changes()`), no other connection
    committed (`store.outside_commits()`, taken before the read), every listed agent has the
    status it had here, and no row was judged by another process's lease (it lapses by the
    clock). Where the store cannot tell other connections' commits apart (PostgreSQL), or while
    this process writes between listings, nothing is reused and no extra statement is run: the
    look at other connections' commits is made only once this process has written nothing since
    the caller's last listing. Small listings only, of a bounded number of callers."""

    CALLERS = 64
    ROWS = 128

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[str, KeptChildren] = {}

    def get(
        self, caller: str, live: Callable[[str], LiveAgent | None]
    ) -> tuple[KeptChildren | None, int, object | None]:
        """(the kept listing if it still holds, else None; changes(); outside_commits() if taken)."""
        store = self.store
        changes = store.changes()
        kept = self._kept.get(caller)
        if kept is None or kept.changes != changes or store.dirty:
            return None, changes, None
        outside = store.outside_commits()
        if (
            outside is None
            or outside != kept.outside
            or kept.statuses != live_statuses(kept.rows, live)
        ):
            return None, changes, outside
        return kept, changes, outside

    def keep(
        self,
        caller: str,
        changes: int,
        outside: object | None,
        rows: list[AgentRow],
        text: str,
        live: Callable[[str], LiveAgent | None],
    ) -> None:
        """Keep a listing read after `changes` and `outside` were taken."""
        if len(rows) > self.ROWS or self.store.dirty:
            self._kept.pop(caller, None)
            return
        if len(self._kept) >= self.CALLERS and caller not in self._kept:
            self._kept.clear()
        self._kept[caller] = KeptChildren(changes, outside, live_statuses(rows, live), rows, text)

    def forget(self, caller: str) -> None:
        self._kept.pop(caller, None)
