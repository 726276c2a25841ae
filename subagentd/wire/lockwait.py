"""Waiting for another process's write lock without stalling the event loop (PROTOCOL.md §1).

SQLite's busy handler and PostgreSQL's lock wait both block the thread, and the loop must keep
serving heartbeats, the doorbell, timers and stdout meanwhile; so the lock is tried without waiting
(`Store.take_lock`), then waited for until it is taken or the patience (--lock-wait-ms) is spent:
then the store refuses writes busy until one gets it. PostgreSQL waits in its lock queue, first
come first served, in a worker thread (`Store.lend_lock`, storage/postgres/lockqueue.py); SQLite's
busy handler has no queue: the lock is tried again after a short sleep, doubling up to POLL_MAX.
A process waits in PostgreSQL's queue once: its other tasks that need the lock meanwhile wait for
that wait, and get their turn under the lock it takes before the task that waited goes on.

`run_when_locked` is the one way work outside a request does this and retries: every caller (the
timers, the doorbell, shutdown, the runners' turn ends and transcripts, the relay socket's tool
calls) waits in the lock queue first and again after each refusal, and never polls the write.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.lowlevel

from subagentd.schema.stats import LockWaits

POLL_MIN = 0.0005  # seconds before the first retry (a group elsewhere often ends within a few ms)
POLL_MAX = 0.004  # longest sleep between tries: short, to meet a sibling's gap between groups
BUSY_RETRY = 0.1  # seconds before work refused for another process's lock waits for it again


class Locks(Protocol):
    """What the connection reaches of the store: the write lock, the doorbell other processes
    ring, and the bounds on waiting for the database (storage implements it)."""

    def take_lock(self, tree: str | None = None) -> bool: ...
    def take_lock_for_frame(self, tree: str | None = None) -> bool: ...
    def set_scope(self, tree: str | None) -> None: ...
    def aim(self, tree: str | None) -> None: ...
    def give_up_lock(self) -> None: ...
    def lend_lock(self, seconds: float) -> Callable[[], None] | None: ...
    def settle_lent(self, keep: bool) -> None: ...
    def doorbell(self) -> int | None: ...
    def drain_doorbell(self) -> list[str]: ...
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
_LENT: dict[int, anyio.Event] = {}  # a store's wait in the lock queue: set once it is settled


async def wait_for_lock(store: Locks, patience: float) -> None:
    """Return once this connection holds the write lock, or once `patience` seconds went by."""
    began = time.perf_counter()  # the wall clock of the wait, whatever clock the service reads
    if store.take_lock():
        return
    deadline = anyio.current_time() + patience
    delay = POLL_MIN
    while True:
        lent = _LENT.get(id(store))
        queued = (
            None
            if lent is not None
            else store.lend_lock(max(deadline - anyio.current_time(), 0.001))
        )
        if lent is not None:  # another task of this process waits in the queue: wait with it
            with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
                await lent.wait()
        elif queued is None:
            await anyio.sleep(delay)
            delay = min(delay * 2, POLL_MAX)
        else:
            await _in_queue(store, queued)
        if store.take_lock():
            LOCK_WAITS.record(time.perf_counter() - began, taken=True)
            return
        if anyio.current_time() >= deadline:
            store.give_up_lock()
            LOCK_WAITS.record(time.perf_counter() - began, taken=False)
            return


async def _in_queue(store: Locks, queued: Callable[[], None]) -> None:
    """Wait in the database's lock queue (`queued`, in a worker thread); the lock it takes opens
    the group, and the other tasks that waited with it run under it first. Cancelled meanwhile
    (shutdown, a timer's cancel), the wait is ended and the lock let go: nobody would write and
    commit under it."""
    key = id(store)
    _LENT[key] = settled = anyio.Event()
    waited = False
    try:
        await anyio.to_thread.run_sync(queued, abandon_on_cancel=True)
        waited = True
    finally:
        store.settle_lent(keep=waited)
        del _LENT[key]
        settled.set()
    await anyio.lowlevel.cancel_shielded_checkpoint()


async def run_when_locked(lock: Callable[[], Awaitable[None]], run: Callable[[], bool]) -> None:
    """Wait for another process's write lock (`lock`: in the lock queue, the event loop serving
    on), then do the work (`run`: False when the lock refused it, having stayed held past the
    patience); refused, wait in the queue again BUSY_RETRY later, until it is done."""
    await lock()
    while not run():
        await anyio.sleep(BUSY_RETRY)
        await lock()
