"""core's timers and the lease heartbeat, as tasks of the connection's task group.

Each callback waits for the write lock if another process holds it (`lock`, the event loop serving
on), then runs as its own piece of work in the current commit group (`run`, which is
Connection.run_work); work refused because the lock stayed held past the patience runs again
BUSY_RETRY later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from subagentd.core.service import Service

BUSY_RETRY = 0.1  # seconds before a timer's work refused for another process's lock runs again

Work = Callable[[Callable[[], None]], bool]  # runs a callback; False when the lock refused it


class Timers:
    """core.settings.Timers: `call_later` on the task group `start` hands over."""

    def __init__(self, run: Work, lock: Callable[[], Awaitable[None]]) -> None:
        self._run = run
        self._lock = lock
        self._tg: anyio.abc.TaskGroup | None = None
        self.resynced: Callable[[], None] = lambda: None  # after the live state was read back

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        scope = anyio.CancelScope()

        async def later() -> None:
            with scope:
                await anyio.sleep(delay)
                await self._lock()
                if not self._run(callback):
                    self.call_later(BUSY_RETRY, callback)

        assert self._tg is not None, "timers run only while the connection serves"
        self._tg.start_soon(later)
        return scope.cancel

    async def heartbeat(self, service: Service) -> None:
        """Reap what processes that died or stalled left; a fenced idle process finds out here."""
        while True:
            await anyio.sleep(service.settings.lease_ttl / 3)
            was_stale = service.recovery.stale
            if not service.recovery.resync():  # the database is not answering yet
                continue
            if was_stale:
                self.resynced()
            await self._lock()
            # refused (the lock held past the patience): the next one retries
            self._run(service.recovery.heartbeat)
