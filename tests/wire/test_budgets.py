"""Budgets over real pipes: the 1011 refusal's shape, spawn_agent's tool error, a runner's usage
file, and two processes sharing one database racing for one tree's budget."""

from __future__ import annotations

import threading

import pytest

from subagentd.client.errors import RpcError
from subagentd.core.settings import TOOL_NAMES
from tests.processes.test_runner import RunnerServer
from tests.spawned import InProcessServer, ServerProcess


def test_a_refused_spawn_is_1011_with_the_budget_named_in_data():
    server = InProcessServer(tree_max_spawns=1, tools=TOOL_NAMES)
    try:
        host = server.host
        host.initialize()
        host.open("root")
        host.spawn("root", "c1")
        with pytest.raises(RpcError) as refused:
            host.call("agents/spawn", {"caller": "root", "label": "t", "prompt": "go"})
        assert refused.value.code == 1011
        assert refused.value.message == (
            'agent "root" spent its spawns budget: 1 of 1 spawns used, 0 left (what its subagents'
            " spend counts against it); nothing more starts under it until the user raises the"
            " budget"
        )
        assert refused.value.data == {
            "reason": "budget",
            "budget": "spawns",
            "agent_id": "root",
            "limit": 1,
            "spent": 1,
            "left": 0,
        }
        result = host.call(
            "tools/call",
            {
                "name": "spawn_agent",
                "arguments": {"label": "t", "prompt": "go"},
                "_meta": {"subagentd/caller": "root"},
            },
        )
        assert result["isError"] is True
        assert result["content"][0]["text"] == "Error: " + refused.value.message
        raised = host.call("agents/budget", {"agent_id": "root", "budget": {"max_spawns": 2}})
        assert raised["budget"] == {"max_turns": 10_000, "max_spawns": 2}
        assert raised["tree_usage"]["spawns"] == 1
    finally:
        server.stop()


def test_spawn_agent_is_served_with_its_budget_parameter():
    server = InProcessServer(tools=("spawn_agent",))
    try:
        host = server.host
        host.initialize()
        host.open("root")
        [tool] = host.call("tools/list", {"_meta": {"subagentd/caller": "root"}})["tools"]
        budget = tool["inputSchema"]["properties"]["budget"]
        assert "max_turns" in str(budget) and "description" in budget
        result = host.call(
            "tools/call",
            {
                "name": "spawn_agent",
                "arguments": {"label": "t", "prompt": "go", "child_id": "c1", "budget": "all"},
                "_meta": {"subagentd/caller": "root"},
            },
        )
        assert (
            result["content"][0]["text"] == 'Error: invalid arguments: "budget" must be an object'
        )
    finally:
        server.stop()


def test_a_runner_command_reports_usage_through_its_usage_file():
    server = RunnerServer()
    try:
        server.spawn(
            "c1",
            [
                {"usage": '{"input_tokens": 120, "output_tokens": 30, "cost": 0.5}'},
                {"usage": '{"output_tokens": 5, "cost": 0.25}'},
                {"usage": "not json"},
                {"print": "done"},
            ],
        )
        events = server.ended("c1")
        usage = {"input_tokens": 120, "output_tokens": 35, "cost": 0.75}
        assert events["turn_end"]["usage"] == usage
        assert events["runner_exit"] == {"exit_code": 0, "usage": usage, "usage_refused": 1}
        tree = server.host.call("agents/get", {"agent_id": "root"})["tree_usage"]
        assert (tree["input_tokens"], tree["output_tokens"], tree["cost"]) == (120, 35, 0.75)
    finally:
        server.stop()


def _race(
    proc: ServerProcess,
    caller: str,
    outcome: dict[str, list],
    key: str,
    step: threading.Barrier,
) -> None:
    """Spawn below `caller` until a budget refuses; count what was admitted and refused. Each
    attempt starts together with the other process's (`step`), so the two really contend."""
    try:
        for _ in range(200):
            try:
                step.wait(timeout=30)
            except threading.BrokenBarrierError:
                pass  # the other one is done: go on alone
            try:
                proc.host.call("agents/spawn", {"caller": caller, "label": "t", "prompt": "go"})
            except RpcError as exc:
                assert exc.code == 1011, exc.message
                if exc.data.get("reason") == "busy":
                    continue  # the other process held the write lock past --lock-wait-ms
                outcome[key].append(exc.data)
                return
            outcome[key + "_ok"].append(1)
    finally:
        step.abort()


@pytest.mark.parametrize("budget, limit", [("max_spawns", 40), ("max_turns", 40)])
def test_two_processes_racing_for_one_trees_budget_never_pass_it(tmp_path, budget, limit):
    db = str(tmp_path / "race.db")
    first = ServerProcess(db=db)
    second = ServerProcess(db=db)
    try:
        for proc in (first, second):
            proc.host.initialize()
        first.host.open("root", budget={budget: limit})
        second.host.open("fork", parent_id="root")  # its turns and spawns count against root
        outcome: dict[str, list] = {"a": [], "a_ok": [], "b": [], "b_ok": []}
        step = threading.Barrier(2)
        threads = [
            threading.Thread(target=_race, args=(first, "root", outcome, "a", step)),
            threading.Thread(target=_race, args=(second, "fork", outcome, "b", step)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        admitted = len(outcome["a_ok"]) + len(outcome["b_ok"])
        assert admitted == limit, outcome
        name = budget.removeprefix("max_")
        for data in outcome["a"] + outcome["b"]:
            assert (data["budget"], data["agent_id"], data["left"]) == (name, "root", 0)
        usage = first.host.call("agents/get", {"agent_id": "root"})["tree_usage"]
        assert usage[name] == limit
        assert outcome["a_ok"] and outcome["b_ok"], "both processes spawned"
    finally:
        first.stop()
        second.stop()
