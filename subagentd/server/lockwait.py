"""Waiting for another process's write lock without stalling the event loop (PROTOCOL.md §1).

SQLite's busy handler and PostgreSQL's lock wait both block the thread, and the loop must keep
serving heartbeats, the doorbell, timers and stdout meanwhile; so the lock is tried without waiting
(`Store.take_lock`) and tried again after a short sleep, doubling up to POLL_MAX, until it is taken
or the patience (--lock-wait-ms) is spent: then the store refuses writes busy until one gets it.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

from subagentd.schema.stats import LockWaits

POLL_MIN = 0.0005  # seconds before the first retry (a group elsewhere often ends within a few ms)
POLL_MAX = 0.004  # longest sleep between tries: short, to meet a sibling's gap between groups


class Locks(Protocol):
    """What the connection reaches of the store: the write lock, the doorbell other processes
    ring, and the bounds on waiting for the database (storage implements it)."""

    def take_lock(self) -> bool: ...
    def give_up_lock(self) -> None: ...
    def doorbell(self) -> int | None: ...
    def drain_doorbell(self) -> None: ...
    def transient(self, exc: BaseException) -> bool: ...
    def give_up_after(self, seconds: float) -> None: ...


class LockWaitRecorder:
    """This process's waits for another process's write lock: how many, how long in all, the
    longest, and how many ran out of patience (server/stats `lock_waits`)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self.gave_up = 0

    def record(self, seconds: float, taken: bool) -> None:
        self.count += 1
        self.total += seconds
        self.longest = max(self.longest, seconds)
        self.gave_up += not taken

    def figures(self) -> LockWaits:
        return LockWaits(
            count=self.count,
            total_ms=round(self.total * 1000, 3),
            max_ms=round(self.longest * 1000, 3),
            gave_up=self.gave_up,
        )


LOCK_WAITS = LockWaitRecorder()  # this process's (one service per process)


async def wait_for_lock(store: Locks, patience: float) -> None:
    """Return once this connection holds the write lock, or once `patience` seconds went by."""
    if store.take_lock():
        return
    began = time.perf_counter()  # the wall clock of the wait, whatever clock the service reads
    deadline = anyio.current_time() + patience
    delay = POLL_MIN
    while True:
        await anyio.sleep(delay)
        if store.take_lock():
            LOCK_WAITS.record(time.perf_counter() - began, taken=True)
            return
        if anyio.current_time() >= deadline:
            store.give_up_lock()
            LOCK_WAITS.record(time.perf_counter() - began, taken=False)
            return
        delay = min(delay * 2, POLL_MAX)
