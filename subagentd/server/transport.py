"""File descriptors: stdin read without a thread hop per line, frames written to stdout."""

from __future__ import annotations

import asyncio
import os

import anyio
import anyio.lowlevel

CHUNK = 256 * 1024


class FdReader:
    """Reads a pipe, socket or regular file; waits on the event loop when the fd can poll.

    The fd stays registered with the loop while reads keep coming (no epoll add/remove per round
    trip); it is unregistered when it becomes readable with nobody waiting (reading paused).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pollable = True
        self._registered = False
        self._waiter: asyncio.Future[None] | None = None
        try:
            os.set_blocking(fd, False)
        except OSError:
            self._pollable = False

    async def read(self) -> bytes:
        """The next chunk; b"" at end of input. Yields to the loop once per call, so input that
        never runs dry cannot starve the other tasks."""
        data = await self._next()
        if not data:
            self.close()
        return data

    async def _next(self) -> bytes:
        if self._pollable:
            try:
                data = os.read(self.fd, CHUNK)
            except BlockingIOError:
                pass
            else:
                await anyio.lowlevel.checkpoint()
                return data
            while self._pollable:
                await self._readable()
                try:
                    return os.read(self.fd, CHUNK)
                except BlockingIOError:
                    continue
        await anyio.lowlevel.checkpoint()
        return os.read(self.fd, CHUNK)

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        if not self._registered:
            try:
                loop.add_reader(self.fd, self._on_readable)
            except PermissionError:
                self._pollable = False  # a regular file cannot be polled: plain reads
                return
            self._registered = True
        self._waiter = loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _on_readable(self) -> None:
        if self._waiter is None:
            asyncio.get_running_loop().remove_reader(self.fd)
            self._registered = False
        elif not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        """Stop polling the fd (the loop may already be gone)."""
        if self._registered:
            self._registered = False
            try:
                asyncio.get_running_loop().remove_reader(self.fd)
            except RuntimeError:
                pass


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
