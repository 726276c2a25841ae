"""The transport's own habits: input is awaited through anyio on any backend, and memory freed
after a burst is handed back once the connection has been quiet for a while."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from subagentd.wire.memory import IDLE_SECONDS, TRIM_AFTER_BYTES, Trimmer
from subagentd.wire.transport import YIELD_AFTER, FdReader
from tests.spawned import InProcessServer


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


def _backends() -> list[Any]:
    """Every anyio backend this machine can run: asyncio, uvloop (the `fast` extra), trio."""
    found: list[Any] = ["asyncio"]
    for module, backend in (("uvloop", ("asyncio", {"use_uvloop": True})), ("trio", "trio")):
        if importlib.util.find_spec(module) is not None:
            found.append(pytest.param(backend, id=module))
    return found


def _run(backend: Any, main: Any) -> Any:
    name, options = backend if isinstance(backend, tuple) else (backend, {})
    return anyio.run(main, backend=name, backend_options=options)


@pytest.mark.parametrize("backend", _backends())
def test_the_reader_waits_for_input_on_every_anyio_backend(backend):
    r, w = os.pipe()

    async def main() -> list[bytes]:
        reader = FdReader(r)
        got = []
        async with anyio.create_task_group() as tg:

            async def write_later(data: bytes | None) -> None:
                await anyio.lowlevel.checkpoint()  # once the read below found nothing and waits
                if data is None:
                    os.close(w)
                else:
                    os.write(w, data)

            tg.start_soon(write_later, b"one")
            got.append(await reader.read())  # waited for readiness
            os.write(w, b"two")
            got.append(await reader.read())  # data was there: read at once
            tg.start_soon(write_later, None)
            got.append(await reader.read())  # end of input
        return got

    try:
        assert _run(backend, main) == [b"one", b"two", b""]
    finally:
        os.close(r)


@pytest.mark.parametrize("backend", [b for b in _backends() if getattr(b, "id", "") != "trio"])
def test_input_already_there_is_read_at_once_but_never_starves_the_other_tasks(backend):
    """A yield to the loop is most of a round trip's CPU: input waiting is read without one,
    but after YIELD_AFTER seconds without a turn the other tasks get theirs. (asyncio's loops
    only: trio may run a yielding task again before the others, on purpose, to shake out
    ordering assumptions.)"""
    r, w = os.pipe()
    clock = [0.0]

    async def main() -> list[Any]:
        reader = FdReader(r, clock=lambda: clock[0])
        seen: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def other() -> None:
                seen.append("other ran")

            tg.start_soon(other)  # runs at the loop's next turn
            for data in (b"a", b"b"):
                os.write(w, data)
                seen.append(await reader.read())
            clock[0] += YIELD_AFTER
            os.write(w, b"c")
            seen.append(await reader.read())
        return seen

    try:
        assert _run(backend, main) == [b"a", b"b", "other ran", b"c"]
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("backend", _backends())
def test_the_whole_server_serves_a_host_on_every_anyio_backend(backend):
    """initialize, a spawn (a write, committed before its reply), a ping; EOF shuts it down."""
    from subagentd.core.service import Service
    from subagentd.core.settings import Settings
    from subagentd.server.connection import Connection
    from subagentd.server.handlers import METHODS
    from subagentd.storage.database import SqliteStore
    from subagentd.wire.transport import FdWriter

    to_server_r, to_server_w = os.pipe()
    from_server_r, from_server_w = os.pipe()
    service = Service(SqliteStore(":memory:"), Settings())
    service.recovery.recover()
    service.commit()
    connection = Connection(
        service,
        FdReader(to_server_r),
        FdWriter(from_server_w),
        locks=service.store,
        methods=METHODS,
        handle_signals=False,
        grace=1.0,
    )
    frames = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "agents/open", "params": {"agent_id": "root"}},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    os.write(to_server_w, b"".join(json.dumps(f).encode() + b"\n" for f in frames))
    os.close(to_server_w)
    try:
        _run(backend, connection.serve)  # returns at end of input, once everything is written
        os.close(from_server_w)
        with os.fdopen(from_server_r, "rb") as out:
            replies = [json.loads(line) for line in out.read().splitlines()]
    finally:
        os.close(to_server_r)
    by_id = {r["id"]: r for r in replies if "id" in r}
    assert by_id[1]["result"]["serverInfo"]["name"] == "subagentd"
    assert set(by_id[2]["result"]) >= {"activation_id"}
    assert by_id[3] == {"jsonrpc": "2.0", "result": {}, "id": 3}
    assert service.agents.registry.get("root") is None  # stopped by the shutdown ...
    assert service.store.get_session("root") is not None  # ... and stored, committed


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


def test_an_event_loop_whose_package_is_missing_is_refused_naming_the_extra(monkeypatch):
    from subagentd.wire import loops

    assert loops.event_loop("asyncio") == ("asyncio", {})
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if the fast extra were not installed
    with pytest.raises(ValueError) as refused:
        loops.event_loop("uvloop")
    assert str(refused.value) == (
        "--event-loop uvloop needs uvloop, from the fast extra: pip install '.[fast]' in your"
        " clone of subagentd (with pipx: pipx inject subagentd uvloop)"
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(
        loops.importlib.util, "find_spec", lambda name: None if name == "trio" else real(name)
    )
    with pytest.raises(ValueError) as refused:
        loops.event_loop("trio")
    assert str(refused.value) == (
        "--event-loop trio needs the trio package: pip install trio"
        " (with pipx: pipx inject subagentd trio)"
    )
