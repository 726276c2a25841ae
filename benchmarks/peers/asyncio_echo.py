"""The asyncio floor: the anyio floor's loop (anyio_echo.py) with stdin registered with the event
loop once, as an asyncio-only transport could, instead of anyio's
`wait_readable`, which adds the fd to the selector and removes it again on every wait.

Not used by subagentd: it prices the transport's use of anyio's public fd readiness functions in the
one-in-flight round trip (`benchmarks/server_cpu.py --peer anyio --peer asyncio`).
"""

from __future__ import annotations

import asyncio
import os

import anyio
from anyio_echo import CHUNK, serve  # this directory is the script's: first on sys.path


class Stdin:
    """Reads fd 0; waits on a future that the loop's reader callback, added once, completes."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.registered = False

    def _readable(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def read(self) -> bytes:
        while True:
            try:
                return os.read(0, CHUNK)
            except BlockingIOError:
                pass
            loop = asyncio.get_running_loop()
            if not self.registered:
                loop.add_reader(0, self._readable)
                self.registered = True
            self.waiter = loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None


async def main() -> None:
    await serve(Stdin().read, "asyncio-echo")


if __name__ == "__main__":
    anyio.run(main)
