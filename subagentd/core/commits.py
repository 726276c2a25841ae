"""A tiny in-memory recorder of group commits: how many, and the latency of the recent ones."""

from __future__ import annotations

import time
from collections import deque
from typing import Protocol

WINDOW = 4096  # the most recent commits the percentiles are taken over


class Committable(Protocol):
    @property
    def dirty(self) -> bool: ...
    def commit(self) -> None: ...


class CommitRecorder:
    """Counts group commits that wrote something and keeps their latencies (seconds)."""

    def __init__(self) -> None:
        self.count = 0
        self.recent: deque[float] = deque(maxlen=WINDOW)

    def commit(self, store: Committable) -> None:
        """`store.commit()`, timed when it has writes to commit (an empty commit is not one)."""
        if not store.dirty:
            store.commit()
            return
        started = time.perf_counter()
        store.commit()
        self.recent.append(time.perf_counter() - started)
        self.count += 1

    def percentile(self, fraction: float) -> float | None:
        """The latency (seconds) below which `fraction` of the recent commits fell (nearest rank)."""
        if not self.recent:
            return None
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


COMMITS = CommitRecorder()  # this process's (one service per process)
