"""File descriptors: stdin read without a thread hop per line, frames written to stdout."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel

CHUNK = 256 * 1024
YIELD_AFTER = 0.002  # seconds input may be read back to back before the other tasks get a turn


class FdReader:
    """Reads a pipe, socket or regular file; waits for input through anyio's `wait_readable`, so
    it runs on any anyio backend (asyncio, uvloop, trio). A regular file, which cannot be polled,
    is read with plain reads."""

    def __init__(self, fd: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.fd = fd
        self._pollable = True
        self._clock = clock
        self._yielded = clock()  # when the loop last ran the other tasks for us
        try:
            os.set_blocking(fd, False)
        except OSError:
            self._pollable = False

    async def read(self) -> bytes:
        """The next chunk; b"" at end of input. Input that is already there is read without
        yielding to the loop (a yield is a whole loop iteration: most of a round trip's CPU),
        but at least every YIELD_AFTER seconds, so input that never runs dry cannot starve the
        other tasks."""
        if self._pollable:
            try:
                data = os.read(self.fd, CHUNK)
            except BlockingIOError:
                pass
            else:
                await self._fair()
                return data
            while self._pollable:
                try:
                    await anyio.wait_readable(self.fd)
                except PermissionError:  # a regular file cannot be polled: plain reads
                    self._pollable = False
                    break
                self._yielded = self._clock()
                try:
                    return os.read(self.fd, CHUNK)
                except BlockingIOError:
                    continue
        await self._fair()
        return os.read(self.fd, CHUNK)

    async def _fair(self) -> None:
        """Yield to the loop if it has not run the other tasks for YIELD_AFTER seconds."""
        now = self._clock()
        if now - self._yielded >= YIELD_AFTER:
            self._yielded = now
            await anyio.lowlevel.checkpoint()


class FdWriter:
    """Writes whole buffers to a pipe, socket or file, waiting on the loop when the pipe is full."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False
        self._pollable = True
        try:
            os.set_blocking(fd, False)
        except OSError:
            self._pollable = False

    def write_now(self, data: bytes) -> int:
        """Write what the fd takes without waiting; the number of bytes written."""
        if self.broken:
            return len(data)
        if not self._pollable:
            return 0  # a blocking fd is left to write(), which may wait
        view = memoryview(data)
        done = 0
        while done < len(data):
            try:
                done += os.write(self.fd, view[done:])
            except BlockingIOError:
                break
        return done

    async def write(self, data: bytes) -> None:
        if self.broken:
            return
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                try:
                    await anyio.wait_writable(self.fd)
                except PermissionError:
                    self._pollable = False
                    os.set_blocking(self.fd, True)
                continue
            view = view[written:]

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
