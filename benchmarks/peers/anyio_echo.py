"""The anyio floor: the echo floor's loop (echo_server.py), reading stdin the way subagentd does.

Same tiny replies, but on anyio's default backend (asyncio) with the fds non-blocking: a read
that finds nothing waits in `anyio.wait_readable`, input already there is read at once with a
yield to the loop at least every YIELD_AFTER seconds, and a write the pipe does not take waits in
`anyio.wait_writable` (subagentd/wire/transport.py). It shows what that way of reading and
writing costs by itself, before any dispatch or storage.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
from echo_server import answer  # this directory is the script's: first on sys.path

CHUNK = 256 * 1024
YIELD_AFTER = 0.002


async def read(fd: int, since: list[float]) -> bytes:
    try:
        data = os.read(fd, CHUNK)
    except BlockingIOError:
        while True:
            await anyio.wait_readable(fd)
            since[0] = time.monotonic()
            try:
                return os.read(fd, CHUNK)
            except BlockingIOError:
                continue
    now = time.monotonic()
    if now - since[0] >= YIELD_AFTER:
        since[0] = now
        await anyio.lowlevel.checkpoint()
    return data


async def write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


async def serve(next_chunk: Callable[[], Awaitable[bytes]], name: str) -> None:
    """Answer the lines read from fd 0 (non-blocking) by `next_chunk` until end of input."""
    out = sys.stdout.fileno()
    os.set_blocking(0, False)
    os.set_blocking(out, False)
    buf = b""
    while True:
        chunk = await next_chunk()
        if not chunk:
            return
        buf += chunk
        if b"\n" not in buf:
            continue
        data, buf = answer(buf, name)
        if data:
            await write(out, data)


async def main() -> None:
    since = [time.monotonic()]
    await serve(lambda: read(0, since), "anyio-echo")


if __name__ == "__main__":
    anyio.run(main)
