"""File descriptors: stdout diverted at start-up, stdin read without a thread hop per line."""

from __future__ import annotations

import os
import sys

import anyio

CHUNK = 256 * 1024


def divert_stdout() -> int:
    """Keep a private duplicate of fd 1 for protocol frames and point fd 1 (and print) at stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out_fd


class FdReader:
    """Reads a pipe, socket or regular file; waits on the event loop when the fd can poll."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pollable = True
        try:
            os.set_blocking(fd, False)
        except OSError:
            self._pollable = False

    async def read(self) -> bytes:
        """The next chunk; b"" at end of input."""
        while True:
            if self._pollable:
                try:
                    return os.read(self.fd, CHUNK)
                except BlockingIOError:
                    pass
                try:
                    await anyio.wait_readable(self.fd)
                except PermissionError:
                    self._pollable = False  # a regular file cannot be polled: plain reads
                continue
            return os.read(self.fd, CHUNK)


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
