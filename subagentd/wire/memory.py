"""Giving memory back to the OS once a burst of requests is over (glibc only; a no-op elsewhere).

A burst (thousands of pipelined requests) leaves freed but still resident memory in the C heap:
Python's own allocator keeps only whole free arenas away, and glibc keeps freed heap pages until
asked. `malloc_trim(0)` returns them. Only when the connection has been quiet for IDLE_SECONDS
after at least TRIM_AFTER_BYTES of output: trimming during active use would make the next burst
fault every page back in (measured: +40 ms on a 10k-row listing).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

TRIM_AFTER_BYTES = 256 * 1024
IDLE_SECONDS = 0.5


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up among the symbols the process has loaded (not through
    ctypes.util.find_library, which imports ~0.8 MiB of modules and may run `ldconfig -p`).
    Looked up at the first trim, not at start: ctypes is ~0.4 MiB an idle server does not need."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


class Trimmer:
    """Counts output since the last trim and when the last output was; trims when quiet."""

    def __init__(
        self,
        trim: Callable[[int], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim  # None: looked up when first due (or not glibc: nothing to trim)
        self._look_up = trim is None
        self._clock = clock
        self.pending = 0
        self.last_output = clock()

    def note(self, nbytes: int) -> None:
        self.pending += nbytes
        self.last_output = self._clock()

    def tick(self) -> None:
        """Called every IDLE_SECONDS while nothing is being written."""
        if self.pending < TRIM_AFTER_BYTES or self._clock() - self.last_output < IDLE_SECONDS:
            return
        if self._trim is None and self._look_up:
            self._trim, self._look_up = _malloc_trim(), False
        if self._trim is not None:
            self._trim(0)
            self.pending = 0

    async def run(self, quiet: Callable[[], bool]) -> None:
        """Tick every IDLE_SECONDS while `quiet()` (nothing waiting to be written)."""
        while True:
            await anyio.sleep(IDLE_SECONDS)
            if quiet():
                self.tick()
