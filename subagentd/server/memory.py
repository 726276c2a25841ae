"""Giving memory back to the OS once a burst of requests is over (glibc only; a no-op elsewhere).

A burst (thousands of pipelined requests) leaves freed but still resident memory in the C heap:
Python's own allocator keeps only whole free arenas away, and glibc keeps freed heap pages until
asked. `malloc_trim(0)` returns them; it walks the heap (well under a millisecond at these sizes),
so it runs only when the connection is idle after at least TRIM_AFTER_BYTES of output.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

TRIM_AFTER_BYTES = 256 * 1024


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


class Trimmer:
    """Counts output since the last trim; trims when told the connection is idle."""

    def __init__(self, trim: Callable[[int], int] | None = None) -> None:
        self._trim = trim or _malloc_trim()
        self.pending = 0

    def note(self, nbytes: int) -> None:
        self.pending += nbytes

    def idle(self) -> None:
        if self.pending >= TRIM_AFTER_BYTES and self._trim is not None:
            self._trim(0)
            self.pending = 0
