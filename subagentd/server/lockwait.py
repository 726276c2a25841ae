"""Waiting for another process's write lock without stalling the event loop (PROTOCOL.md §1).

SQLite's busy handler and PostgreSQL's lock wait both block the thread, and the loop must keep
serving heartbeats, the doorbell, timers and stdout meanwhile; so the lock is tried without waiting
(`Store.take_lock`) and tried again after a short sleep, doubling up to POLL_MAX, until it is taken
or the patience (--lock-wait-ms) is spent: then the store refuses writes busy until one gets it.
"""

from __future__ import annotations

from typing import Protocol

import anyio

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


async def wait_for_lock(store: Locks, patience: float) -> None:
    """Return once this connection holds the write lock, or once `patience` seconds went by."""
    if store.take_lock():
        return
    deadline = anyio.current_time() + patience
    delay = POLL_MIN
    while True:
        await anyio.sleep(delay)
        if store.take_lock():
            return
        if anyio.current_time() >= deadline:
            store.give_up_lock()
            return
        delay = min(delay * 2, POLL_MAX)
