"""Time as the rules read it: the system's, or a manual clock a test advances (`--clock manual`).

The rules that depend on time read it here: the report-rate and report-budget windows, the
deadlines of waits, lease expiry (and the store's clock, which judges other processes' leases),
idempotency retention. Timers (interrupt grace, wait deadlines and progress, the lease heartbeat)
run on the server's Timers, which under a manual clock fire only when the host advances it
(`clock/advance`), in due order, each at its own time.
"""

from __future__ import annotations

import time


class Clock:
    """The system clock: monotonic seconds for intervals, Unix seconds for stored times."""

    manual = False

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class ManualClock(Clock):
    """Stands still until `advance`: both readings start at the system's and move together."""

    manual = True

    def __init__(self) -> None:
        self._monotonic, self._wall = time.monotonic(), time.time()
        self.advanced = 0.0  # seconds moved forward since start

    def monotonic(self) -> float:
        return self._monotonic + self.advanced

    def wall(self) -> float:
        return self._wall + self.advanced

    def advance(self, seconds: float) -> None:
        self.advanced += max(0.0, seconds)

    def advance_to(self, monotonic: float) -> None:
        """Move forward to `monotonic` (never back)."""
        self.advanced = max(self.advanced, monotonic - self._monotonic)


SYSTEM = Clock()
