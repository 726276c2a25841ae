"""Replies core owes later (wait_agents, agents/wait_idle): checked after every write transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from subagentd.core.agents import Agents
from subagentd.schema.notifications import Progress

PROGRESS_EVERY = 5.0  # seconds between progress notifications of a wait that gave a token

Check = Callable[[bool], Any]  # (timed out) -> the answer once the wait is over, else None


@dataclass(eq=False)
class Waiter:
    """One wait: how to judge it, and where its answer goes (set by the server)."""

    check: Check
    deadline: float  # monotonic seconds
    total_ms: int
    token: str | int | None = None  # the client's progress token
    describe: Callable[[], str] | None = None  # the progress message
    done: Callable[[Any], None] | None = None
    timed_out: bool = False
    stop_timer: Callable[[], None] | None = None
    stop_progress: Callable[[], None] | None = None
    abandoned: Callable[[], None] | None = None  # the client cancelled it before its answer


class Waits:
    """Pending waits. Every write transaction ends with `check` while any is pending, so a wait
    is judged after the whole change that may end it (a report, a settlement, a turn's end) and
    its answer, with what it consumed, commits in that same group."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents
        self.pending: list[Waiter] = []

    def add(
        self,
        check: Check,
        timeout_ms: int,
        token: str | int | None = None,
        describe: Callable[[], str] | None = None,
    ) -> Waiter:
        waiter = Waiter(
            check,
            self.agents.settings.clock.monotonic() + timeout_ms / 1000,
            timeout_ms,
            token,
            describe,
        )
        self._arm(waiter, timeout_ms / 1000)
        if token is not None:
            self._progress(waiter, first=True)
        return waiter

    def _arm(self, waiter: Waiter, delay: float) -> None:
        self.pending.append(waiter)
        waiter.stop_timer = self.agents.timers.call_later(delay, lambda: self._expire(waiter))

    def _expire(self, waiter: Waiter) -> None:
        """The timeout: the transaction this runs in ends with `check`, which answers it."""
        waiter.timed_out = True

    def _progress(self, waiter: Waiter, first: bool = False) -> None:
        """One progress notification now (progress: milliseconds waited, 0 the first time), the
        next in PROGRESS_EVERY seconds."""
        assert waiter.token is not None
        elapsed = (
            0.0
            if first
            else waiter.total_ms - (waiter.deadline - self.agents.settings.clock.monotonic()) * 1000
        )
        self.agents.emit(
            "notifications/progress",
            Progress(
                progressToken=waiter.token,
                progress=round(max(0.0, elapsed)),
                total=waiter.total_ms,
                message=waiter.describe() if waiter.describe is not None else None,
            ),
        )
        waiter.stop_progress = self.agents.timers.call_later(
            PROGRESS_EVERY, lambda: self._progress(waiter)
        )

    def check(self) -> None:
        """Answer every pending wait that is over (called inside a write transaction); again
        after an answer, since consuming news may end another wait (e.g. a child settles)."""
        answered = True
        while answered:
            answered = False
            for waiter in list(self.pending):
                if waiter.done is None:
                    continue  # its own request is still running: it was judged just now
                answer = waiter.check(waiter.timed_out)
                if answer is not None:
                    done = waiter.done
                    self.cancel(waiter)
                    done(answer)
                    answered = True

    def cancel(self, waiter: Waiter, abandoned: bool = False) -> None:
        """Forget a wait (answered, or `abandoned`: cancelled by the client): it consumes
        nothing more."""
        if waiter in self.pending:
            self.pending.remove(waiter)
            if abandoned and waiter.abandoned is not None:
                waiter.abandoned()
        for stop in (waiter.stop_timer, waiter.stop_progress):
            if stop is not None:
                stop()
        waiter.stop_timer = waiter.stop_progress = None

    def rearm(self, waiter: Waiter, done: Callable[[Any], None]) -> None:
        """Its answer was lost with a commit group (rolled back): wait again until the deadline."""
        waiter.done = done
        self._arm(waiter, max(0.0, waiter.deadline - self.agents.settings.clock.monotonic()))
        if waiter.token is not None:
            self._progress(waiter)
