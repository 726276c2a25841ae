"""--report-rate (SEMANTICS.md section 7): at most N report wakeups per child per minute."""

from __future__ import annotations

from collections.abc import Callable

from subagentd.core.registry import LiveAgent
from subagentd.core.settings import Settings

WINDOW = 60.0  # seconds of the sliding window


class ReportRate:
    """The recent wakeup times of each live child; past the rate a report arrives quietly."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._wakeups: dict[str, list[float]] = {}  # child id -> recent report wakeup times

    def wakeup_allowed(self, child: LiveAgent) -> bool:
        """Whether this report may wake the parent (counted when it may)."""
        limit = self.settings.report_rate
        if limit <= 0:
            return True
        now_s = self.settings.clock.monotonic()
        recent = [t for t in self._wakeups.get(child.agent_id, ()) if now_s - t < WINDOW]
        if len(recent) >= limit:
            self._wakeups[child.agent_id] = recent
            return False
        self._wakeups[child.agent_id] = [*recent, now_s]
        return True

    def forget(self, agent_id: str) -> None:
        """The agent left: its window goes with it (a new activation starts afresh)."""
        self._wakeups.pop(agent_id, None)

    def keep(self, live: Callable[[str], object]) -> None:
        """Only the windows of agents `live` finds stay (after the registry was rebuilt)."""
        self._wakeups = {k: v for k, v in self._wakeups.items() if live(k)}

    def clear(self) -> None:
        self._wakeups.clear()
