"""core's timers and the lease heartbeat, as tasks of the connection's task group.

Each callback waits for the write lock if another process holds it (`lock`, the event loop serving
on), then runs as its own piece of work in the current commit group (`run`, which is
Connection.run_work); work refused because the lock stayed held past the patience waits for it
again (wire/lockwait.py run_when_locked).

Under a manual clock (`--clock manual`, for tests) nothing sleeps: `call_later` files the callback
by its due time and `advance` (the host's `clock/advance`) moves the clock forward, running each
callback due on the way in due order, at its own time, inside the request's work.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from subagentd.core.clock import SYSTEM, Clock, ManualClock
from subagentd.core.service import Service
from subagentd.wire.lockwait import run_when_locked

Work = Callable[[Callable[[], None]], bool]  # runs a callback; False when the lock refused it


class Timers:
    """core.settings.Timers: `call_later` on the task group `start` hands over."""

    def __init__(
        self, run: Work, lock: Callable[[], Awaitable[None]], clock: Clock = SYSTEM
    ) -> None:
        self._run = run
        self._lock = lock
        self._tg: anyio.abc.TaskGroup | None = None
        self.clock = clock
        self._due: list[list[Any]] = []  # manual clock: [due, order, callback or None], a heap
        self._order = itertools.count()
        self.resynced: Callable[[], None] = lambda: None  # after the live state was read back

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        if self.clock.manual:
            entry = [self.clock.monotonic() + delay, next(self._order), callback]
            heapq.heappush(self._due, entry)
            return lambda: entry.__setitem__(2, None)
        scope = anyio.CancelScope()

        async def later() -> None:
            with scope:
                await anyio.sleep(delay)
                await run_when_locked(self._lock, lambda: self._run(callback))

        assert self._tg is not None, "timers run only while the connection serves"
        self._tg.start_soon(later)
        return scope.cancel

    def advance(self, seconds: float) -> float:
        """Manual clock: move it `seconds` forward, running every callback that falls due on the
        way (those they schedule within the span too), each with the clock at its due time; the
        seconds advanced since start."""
        clock = self.clock
        assert isinstance(clock, ManualClock)
        target = clock.monotonic() + seconds
        while self._due and self._due[0][0] <= target:
            due, _, callback = heapq.heappop(self._due)
            if callback is not None:
                clock.advance_to(due)
                callback()
        clock.advance_to(target)
        return clock.advanced

    async def heartbeat(self, service: Service) -> None:
        """Reap what processes that died or stalled left; a fenced idle process finds out here."""
        if self.clock.manual:  # every third of the TTL of manual time, as `advance` passes it

            def beat() -> None:
                service.recovery.heartbeat()
                self.call_later(service.settings.lease_ttl / 3, beat)

            self.call_later(service.settings.lease_ttl / 3, beat)
            return
        while True:
            await anyio.sleep(service.settings.lease_ttl / 3)
            was_stale = service.recovery.stale
            if not service.recovery.resync():  # the database is not answering yet
                continue
            if was_stale:
                self.resynced()
            if service.per_tree and not service.recovery.heartbeat_due():
                continue  # nothing to write: every tree's lock is not taken for nothing
            await self._lock()
            # refused (the lock held past the patience): the next one retries
            self._run(service.recovery.heartbeat)
