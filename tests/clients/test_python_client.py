"""subagentd.client against a real subagentd over real pipes: typed calls (blocking and async),
errors, notifications, concurrent requests, both turn loops, and the example host end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from subagentd.client import (
    AgentHost,
    AsyncAgentHost,
    AsyncClient,
    AsyncTurnControl,
    CannotStart,
    Client,
    ConnectionClosed,
    RequestTimeout,
    RpcError,
    TurnControl,
    TurnOutcome,
    frames,
    server_command,
)
from subagentd.client.methods import AsyncMethods, BlockingMethods
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema import tools as t
from subagentd.schema.codes import Code
from subagentd.schema.listing import ChildRow
from subagentd.schema.notifications import AgentSettled, AgentStatus, TurnInterrupt, TurnStart

ROOT = Path(__file__).resolve().parents[2]
SETTLED_ERROR = "Background subagent c1 failed before it finished."


@pytest.fixture
def client():
    with Client.spawn(db=":memory:") as c:
        c.initialize(client_name="test")
        yield c
    assert c.process is not None and c.process.returncode == 0, c.stderr_text()


def texts(start: TurnStart) -> list[str]:
    return [block.text for message in start.messages for block in message.content]


def test_spawn_builds_the_serve_command_line():
    assert server_command(["--log-level", "debug"], db="x.db", caller="root") == [
        sys.executable,
        "-m",
        "subagentd",
        "serve",
        "--db",
        "x.db",
        "--caller",
        "root",
        "--log-level",
        "debug",
    ]
    assert server_command(command=["subagentd"], db=":memory:") == ["subagentd", "--db", ":memory:"]


def test_every_host_method_is_typed_and_round_trips(client):
    assert isinstance(client.ping(), h.Empty)
    assert client.server_discover().serverInfo.name == "subagentd"
    opened = client.agents_open("root", label="coordinator")
    assert isinstance(opened, h.OpenResult) and opened.agent_id == "root"
    assert len(opened.activation_id) == 36  # a UUID
    spawned = client.agents_spawn("root", "worker", "do it", child_id="c1")
    assert spawned.child_id == "c1" and spawned.text == "started subagent c1"
    start = client.wait_for(TurnStart, agent_id="c1")
    assert texts(start) == ["do it"] and start.activation_id == spawned.activation_id
    info = client.agents_get("c1")
    stats = client.server_stats()  # typed: the open root and the running child are live here
    assert stats.live_here == 2 and stats.sessions.running == 1 and stats.sessions.idle == 1
    assert stats.commits and stats.commit_latency is not None
    assert (info.status, info.parent_id, info.mode, info.depth) == (
        "running",
        "root",
        "continuable",
        1,
    )
    queued = client.agents_followup("c1", "and more")
    assert client.messages_get(queued.message_id).state == "queued"
    assert client.messages_cancel(queued.message_id).state == "cancelled"
    listing = client.agents_list("root")
    assert [(row.id, row.status) for row in listing.agents if isinstance(row, ChildRow)] == [
        ("c1", "running")
    ]
    seq = client.transcript_append(
        "c1", [h.Event(type="note", data={"n": 1})], turn_id=start.turn_id
    )
    events = client.transcript_read("c1", after=seq.seq - 1).events
    assert [(e.seq, e.type, e.data) for e in events] == [(seq.seq, "note", {"n": 1})]
    stopped = client.agents_interrupt("c1")
    assert stopped == h.InterruptResult(accepted=True, previous_status="running")
    interrupt = client.wait_for(TurnInterrupt, agent_id="c1")
    assert interrupt.cause.kind == "user" and interrupt.turn_id == start.turn_id
    assert client.turns_end("c1", start.turn_id, "aborted") == h.Empty()
    client.agents_open("solo")
    begun = client.turns_begin("solo", ["hello"])
    client.turns_end("solo", begun.turn_id, output="hi")
    assert client.agents_close("solo") == h.Empty()


def test_the_four_tools_direct_and_through_tools_call(client):
    client.agents_open("root")
    client.agents_spawn("root", "worker", "go", child_id="c1")
    start = client.wait_for(TurnStart, agent_id="c1")
    sent = client.send_message("c1", "next", caller="root")
    assert isinstance(sent, t.SendMessageResult)
    assert sent.text == "message queued as the next turn for subagent c1"
    assert client.list_agents(caller="root").text == "c1 [running] — worker"
    reported = client.report("found it", caller="c1")
    assert reported.text and client.messages_get(reported.message_id).agent_id == "root"
    stopped = client.interrupt_agent("c1", caller="root")
    assert (stopped.accepted, stopped.previous_status) == (True, "running")
    client.turns_end("c1", start.turn_id, "aborted")

    names = {tool.name for tool in client.tools_list(caller="root").tools}
    assert {"send_message", "interrupt_agent", "list_agents"} <= names
    listed = client.tools_call("list_agents", {"scope": "children"}, caller="root")
    assert listed.isError is False
    assert listed.content == [{"type": "text", "text": "c1 [idle, 1 parked] — worker"}]
    refused = client.tools_call(
        "send_message", {"subagent_id": "nobody", "message": "x"}, caller="root"
    )
    assert refused.isError is True and refused.content[0]["text"].startswith("Error: ")


def test_errors_carry_the_json_rpc_code_message_and_data(client):
    with pytest.raises(RpcError) as caught:
        client.agents_get("nope")
    error = caught.value
    assert (error.code, error.message, error.method) == (
        Code.UNKNOWN_AGENT,
        'agent "nope" does not exist',
        "agents/get",
    )
    assert error.data == {"reason": "UNKNOWN_AGENT"}
    assert str(error) == 'agents/get: agent "nope" does not exist (code 1009)'
    with pytest.raises(RpcError) as caught:
        client.send_message("c9", "hi", caller="ghost")
    assert caught.value.code == Code.NOT_RESUMABLE
    assert caught.value.message == 'message not delivered: subagent "c9" is unavailable'
    assert set(caught.value.data) == {"reason", "text"}
    assert caught.value.data["text"].startswith("Error: ")
    with pytest.raises(RpcError) as caught:
        client.call("no/such/method")
    assert caught.value.code == Code.METHOD_NOT_FOUND
    assert client.ping() == h.Empty()  # the connection keeps working


def test_requests_in_flight_are_matched_by_id_in_any_order(client):
    client.agents_open("root")
    ids = [
        client.start("agents/get", {"agent_id": "root"}),
        client.start("ping"),
        client.start("nope"),
    ]
    assert len(set(ids)) == 3
    with pytest.raises(RpcError):
        client.result(ids[2], method="nope")
    assert client.result(ids[1]) == {}
    assert client.result(ids[0], h.AgentInfo).agent_id == "root"


def test_raw_bytes_are_an_escape_hatch_and_garbage_gets_a_parse_error(client):
    client.send_bytes(b"{not json\n")
    reply = client.next_frame()
    assert reply["id"] is None and reply["error"]["code"] == Code.PARSE_ERROR
    client.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"}])
    assert client.next_frame() == [{"jsonrpc": "2.0", "result": {}, "id": "a"}]


def test_notifications_queue_typed_or_go_to_a_handler():
    with Client.spawn(db=":memory:") as client:
        client.initialize(capabilities={"experimental": {"subagentd": {"statusEvents": True}}})
        statuses: list[dict[str, Any]] = []
        client.on("agent/status", statuses.append)
        client.agents_open("root")
        client.agents_spawn("root", "w", "go", child_id="c1")
        start = client.wait_for(TurnStart, agent_id="c1")
        client.turns_end("c1", start.turn_id, "error", "it broke")
        assert client.wait_for(AgentSettled, agent_id="c1") == AgentSettled(
            agent_id="c1", reason="error"
        )
        client.barrier()
        assert AgentStatus(agent_id="c1", status="running") in [AgentStatus(**s) for s in statuses]
        assert not [n for n in client.notifications if n["method"] == "agent/status"]
        with pytest.raises(RequestTimeout):
            client.wait_for(TurnStart, timeout=0.2, agent_id="c1")


def test_a_closed_connection_raises_connection_closed():
    client = Client.spawn(db=":memory:")
    assert client.close() == 0
    with pytest.raises(ConnectionClosed):
        client.next_frame(5)


def test_agent_host_runs_turns_and_reports_a_throwing_turn(client):
    client.agents_open("root")
    seen: list[tuple[str, list[str]]] = []
    errors: list[tuple[BaseException, str]] = []
    ended: list[tuple[str, TurnOutcome]] = []

    def turn(start: TurnStart, control: TurnControl) -> TurnOutcome | None:
        seen.append((start.agent_id, texts(start)))
        assert not control.interrupted
        if start.agent_id == "c1":
            raise ValueError("the model is unreachable")
        return None

    host = AgentHost(
        client,
        turn,
        on_error=lambda error, start: errors.append((error, start.agent_id)),
        on_turn_end=lambda start, outcome: ended.append((start.agent_id, outcome)),
    )
    client.agents_spawn("root", "w", "go", child_id="c1")
    host.run(until=lambda: len(seen) == 2)
    assert [(type(e), str(e), who) for e, who in errors] == [
        (ValueError, "the model is unreachable", "c1")
    ]
    assert ended == [
        ("c1", TurnOutcome("error", "the model is unreachable")),
        ("root", TurnOutcome()),
    ]
    assert seen[1] == (
        "root",
        [SETTLED_ERROR, "Its closing message:", "the model is unreachable"],
    )


def test_agent_host_default_on_error_prints_to_stderr_and_an_interrupt_aborts(capfd):
    with Client.spawn(db=":memory:") as client:
        client.initialize()
        client.agents_open("root")
        outcomes: dict[str, TurnOutcome] = {}

        def turn(start: TurnStart, control: TurnControl) -> TurnOutcome | None:
            if start.agent_id == "c2":  # the model notices the interrupt, stops, and raises
                client.agents_interrupt("c2")
                assert control.interrupted and control.interrupt is not None
                raise RuntimeError("stopped midway")
            if start.agent_id == "c1":
                raise KeyError("boom")
            return None

        def record(start: TurnStart, outcome: TurnOutcome) -> None:
            outcomes.setdefault(start.agent_id, outcome)

        host = AgentHost(client, turn, on_turn_end=record)
        client.agents_spawn("root", "w", "go", child_id="c1")
        assert host.run_turn() is not None
        client.agents_spawn("root", "w", "go", child_id="c2")
        host.run(until=lambda: "c2" in outcomes)
        assert outcomes["c1"] == TurnOutcome("error", "'boom'")
        assert outcomes["c2"] == TurnOutcome("aborted")
    err = capfd.readouterr().err
    assert (
        "subagentd: turn " in err and ' of agent "c1" failed:' in err and "KeyError: 'boom'" in err
    )
    assert "stopped midway" not in err  # an interrupted turn's exception is not reported


async def _async_round(seen: list[str], errors: list[str]) -> dict[str, Any]:
    async with AsyncClient.spawn(db=":memory:") as client:
        initialized = await client.initialize()
        assert isinstance(initialized, lc.InitializeResult)
        await client.agents_open("root")
        settled = anyio.Event()

        async def turn(start: TurnStart, control: AsyncTurnControl) -> TurnOutcome:
            seen.append(start.agent_id)
            if start.agent_id == "c1":
                raise ValueError("async failure")
            if start.agent_id == "c2":
                await anyio.sleep_forever()  # until interrupted: the loop cancels it
            settled.set()
            return TurnOutcome(output="read")

        async with AsyncAgentHost(
            client, turn, on_error=lambda error, start: errors.append(f"{start.agent_id}: {error}")
        ) as host:
            await client.agents_spawn("root", "w", "go", child_id="c1")
            with anyio.fail_after(30):
                await settled.wait()
                await client.agents_spawn("root", "w", "go", child_id="c2")
                while not any(c.start.agent_id == "c2" for c in host.active.values()):
                    await anyio.sleep(0.01)
                await client.agents_interrupt("c2")
                await host.idle()
            async with anyio.create_task_group() as tasks:  # many requests in flight at once
                for _ in range(20):
                    tasks.start_soon(client.ping)
            got = await client.agents_get("c2")
            with pytest.raises(RpcError) as caught:
                await client.agents_get("nope")
        return {"c2": got, "error": caught.value}


def test_async_client_and_agent_host():
    seen: list[str] = []
    errors: list[str] = []
    result = anyio.run(_async_round, seen, errors)
    assert seen[:2] == ["c1", "root"] and "c2" in seen
    assert errors == ["c1: async failure"]
    assert result["c2"].status != "running"
    assert result["error"].code == Code.UNKNOWN_AGENT


def test_async_client_attaches_to_existing_streams():
    async def main() -> dict[str, Any]:
        process = await anyio.open_process(server_command(db=":memory:"))
        assert process.stdin is not None and process.stdout is not None
        async with AsyncClient(process.stdin, process.stdout) as client:
            await client.initialize()
            result = await client.ping()
            with pytest.raises(RequestTimeout):
                await client.wait_for(TurnStart, timeout=0.1)
        assert await process.wait() == 0
        return {"ping": result}

    assert anyio.run(main) == {"ping": h.Empty()}


def test_blocking_client_is_safe_to_share_between_threads(client):
    client.agents_open("root")
    failures: list[BaseException] = []

    def hammer() -> None:
        try:
            for _ in range(50):
                assert client.agents_get("root").agent_id == "root"
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == [] and not any(thread.is_alive() for thread in threads)


@pytest.mark.parametrize("mode", [[], ["--async"]], ids=["blocking", "async"])
def test_the_example_host_runs_end_to_end(mode):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "python_host.py"), *mode],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "researcher: Find the oldest open bug.",
        "root: Background subagent researcher reported: / Oldest open bug: #12 (2019).",
        "root: Background subagent researcher finished and will do no further work unless you"
        " send it more. / Its closing message: / Oldest open bug: #12 (2019).",
    ]


def test_the_blocking_and_async_clients_offer_the_same_typed_methods():
    import inspect

    def api(cls: type) -> dict[str, inspect.Signature]:
        own = [n for n in vars(cls) if not n.startswith("_") and inspect.isfunction(vars(cls)[n])]
        return {name: inspect.signature(getattr(cls, name)) for name in own}

    blocking = api(BlockingMethods)
    asynchronous = api(AsyncMethods)
    assert blocking == asynchronous
    assert all(inspect.iscoroutinefunction(getattr(AsyncClient, n)) for n in asynchronous)
    # one method per request method of the exported schema (notifications are not requests)
    schema = json.loads((ROOT / "clients" / "openrpc.json").read_text())
    requests = {m["name"] for m in schema["methods"] if not m["name"].startswith(("$/", "notif"))}
    requests -= set(frames.METHOD_OF.values())  # what subagentd sends, not what it serves
    assert set(asynchronous) == {name.replace("/", "_") for name in requests}


def test_an_error_in_the_async_body_propagates_as_it_is_and_subagentd_still_exits():
    async def main() -> AsyncClient:
        client = AsyncClient.spawn(db=":memory:")
        with pytest.raises(RpcError) as caught:  # not an exception group
            async with client:
                await client.initialize()
                async with AsyncAgentHost(client, lambda start, control: anyio.sleep(0)):
                    await client.agents_get("nope")
        assert caught.value.code == Code.UNKNOWN_AGENT
        return client

    client = anyio.run(main)
    assert client.process is not None and client.process.returncode == 0


def test_agent_host_run_stops_when_told_or_when_no_turn_starts_within_its_timeout(client):
    host = AgentHost(client, lambda start, control: None)
    host.run(until=lambda: True)  # checked before waiting: returns at once
    with pytest.raises(RequestTimeout):
        host.run(timeout=0.3)  # nothing was spawned: no turn/start comes


def test_agents_wait_idle_blocks_until_the_tree_is_quiet(client):
    client.agents_open("root")
    client.agents_spawn("root", "task", "go", child_id="c1")
    start = client.wait_for(TurnStart, agent_id="c1")
    busy = client.agents_wait_idle("root", timeout_ms=0)
    assert busy == h.WaitIdleResult(idle=False, running=["c1"])
    answer: list[h.WaitIdleResult] = []
    waiter = threading.Thread(target=lambda: answer.append(client.agents_wait_idle("root")))
    waiter.start()
    client.turns_end("c1", start.turn_id, output="done")  # settles; root runs the notice
    root_turn = client.wait_for(TurnStart, agent_id="root")
    assert answer == []  # the root's turn is open: not quiet yet
    client.turns_end("root", root_turn.turn_id)
    waiter.join(timeout=30)
    assert answer == [h.WaitIdleResult(idle=True)]


def test_async_agents_wait_idle():
    async def main() -> tuple[h.WaitIdleResult, h.WaitIdleResult]:
        async with AsyncClient.spawn(db=":memory:") as client:
            await client.initialize()
            await client.agents_open("root")
            await client.agents_spawn("root", "task", "go", child_id="c1")
            start = await client.wait_for(TurnStart, agent_id="c1")
            busy = await client.agents_wait_idle("root", timeout_ms=10)
            await client.turns_end("c1", start.turn_id)
            root_turn = await client.wait_for(TurnStart, agent_id="root")
            async with anyio.create_task_group() as tasks:
                quiet: list[h.WaitIdleResult] = []

                async def wait() -> None:
                    quiet.append(await client.agents_wait_idle("root"))

                tasks.start_soon(wait)
                await client.ping()  # the wait is pending on the server now
                await client.turns_end("root", root_turn.turn_id)
            return busy, quiet[0]

    busy, quiet = anyio.run(main)
    assert busy == h.WaitIdleResult(idle=False, running=["c1"])
    assert quiet == h.WaitIdleResult(idle=True)


def test_spawn_agent_and_wait_agents_direct(client):
    client.agents_open("root")
    client.turns_begin("root", ["delegate"])  # root's model is at work: news waits for it
    spawned = client.spawn_agent("worker", "go", child_id="c1", caller="root")
    assert (spawned.child_id, spawned.text) == ("c1", "started subagent c1")
    start = client.wait_for(TurnStart, agent_id="c1")
    quick = client.wait_agents(timeout_ms=0, caller="root")
    assert (quick.text, quick.timed_out) == (
        "wait_agents timed out after 0 ms; still working: c1; call wait_agents again to keep waiting",
        True,
    )
    client.report("found", caller="c1")
    got = client.wait_agents(["c1"], caller="root")
    assert got.blocks == ["Background subagent c1 reported:", "found", "still working: c1"]
    assert got.agents == [t.WaitedAgent(agent_id="c1", status="running", reports=["found"])]
    client.turns_end("c1", start.turn_id)


def not_a_database(tmp_path: Path) -> str:
    path = tmp_path / "bad.db"
    path.write_text("not a database\n")
    path.chmod(0o600)
    return str(path)


CANNOT_START = "cannot start: {} is not a SQLite database"


def test_a_subagentd_that_cannot_start_raises_its_own_line(tmp_path):
    db = not_a_database(tmp_path)
    with pytest.raises(ConnectionClosed) as raised:
        with Client.spawn(db=db) as client:
            client.initialize()
    assert type(raised.value) is CannotStart
    assert str(raised.value) == CANNOT_START.format(db)


def test_a_subagentd_that_cannot_start_raises_its_own_line_async(tmp_path):
    db = not_a_database(tmp_path)

    async def main() -> None:
        async with AsyncClient.spawn("--log-format", "json", db=db) as client:
            await client.initialize()

    with pytest.raises(CannotStart) as raised:
        anyio.run(main)
    assert str(raised.value) == CANNOT_START.format(db)


def test_without_its_stderr_the_closed_connection_is_plain(tmp_path):
    db = not_a_database(tmp_path)
    with pytest.raises(ConnectionClosed) as raised:
        with Client.spawn(db=db, stderr="discard") as client:
            client.initialize()
    assert type(raised.value) is ConnectionClosed
    assert str(raised.value) == "subagentd closed its stdout"
