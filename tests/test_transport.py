"""The transport's own habits: stdin stays registered while reads keep coming, and memory freed
after a burst is handed back once the connection has been quiet for a while."""

from __future__ import annotations

import asyncio
import json
import os
import time

import anyio

from subagentd.server.memory import IDLE_SECONDS, TRIM_AFTER_BYTES, Trimmer
from subagentd.server.transport import FdReader
from tests.host import InProcessServer


def test_trimmer_trims_only_when_quiet_after_enough_output():
    calls = []
    clock = [100.0]
    trimmer = Trimmer(trim=lambda pad: calls.append(pad) or 1, clock=lambda: clock[0])
    trimmer.note(TRIM_AFTER_BYTES - 1)
    clock[0] += IDLE_SECONDS
    trimmer.tick()
    assert calls == []  # not enough output since the last trim
    trimmer.note(1)
    clock[0] += IDLE_SECONDS / 2
    trimmer.tick()
    assert calls == []  # output too recent: the burst may not be over
    clock[0] += IDLE_SECONDS / 2
    trimmer.tick()
    assert calls == [0] and trimmer.pending == 0
    clock[0] += IDLE_SECONDS
    trimmer.tick()
    assert calls == [0]  # nothing new since


def test_stdin_stays_registered_between_round_trips_and_is_released_at_end_of_input():
    r, w = os.pipe()

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        reader = FdReader(r)
        # the writes run on the loop, so only once the read has found nothing and waits on it
        loop.call_soon(os.write, w, b"one")
        got = [await reader.read()]  # waited: registers the fd with the loop
        assert loop.remove_reader(r) is True  # still registered after the round trip ...
        loop.add_reader(r, reader._on_readable)  # (put back as it was)
        loop.call_soon(os.write, w, b"two")
        got.append(await reader.read())  # ... so the next wait needs no new registration
        os.write(w, b"three")
        got.append(await reader.read())  # data was there: read at once
        os.close(w)
        got.append(await reader.read())
        assert loop.remove_reader(r) is False  # released at end of input
        return got

    try:
        assert anyio.run(main) == [b"one", b"two", b"three", b""]
    finally:
        os.close(r)


def test_the_server_trims_after_a_burst_once_its_output_is_written():
    server = InProcessServer()
    calls: list[int] = []
    server.connection.trimmer._trim = lambda pad: calls.append(pad) or 1
    host = server.host
    try:
        host.initialize()
        count = TRIM_AFTER_BYTES // 30 + 100  # each ping reply is ~40 bytes
        frames = [{"jsonrpc": "2.0", "id": 10 + i, "method": "ping"} for i in range(count)]
        host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        for frame in frames:
            host.response(frame["id"])
        deadline = time.monotonic() + 30  # polls a condition; IDLE_SECONDS is the real wait
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == [0]  # once it has been quiet for IDLE_SECONDS
        assert host.call("ping", {}) == {}  # and the connection keeps working
    finally:
        server.stop()
