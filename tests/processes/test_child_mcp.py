"""`subagentd mcp` inside a runner turn: the agent's own tools over MCP stdio, relayed to the
serving process (in-process server, real runner processes, a real `subagentd mcp` started from
the configuration file the turn is handed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from subagentd.cli.child_mcp import NOT_IN_RUNNER
from subagentd.core import texts
from subagentd.runners.handoff import subagentd_executable
from subagentd.view.inspect import summarize
from tests.processes.test_runner import ALL_TOOLS, EXAMPLE, server  # noqa: F401  (the fixture)

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def call(request_id: int, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def mcp_replies(srv: Any, child: str, requests: list[dict[str, Any]], **spawn: Any) -> Any:
    """Spawn `child`, whose run talks to its MCP server; the replies it got."""
    prompt = json.dumps({"steps": [{"mcp": requests}]})
    srv.host.call(
        "agents/spawn",
        {"caller": "root", "child_id": child, "label": "t", "prompt": prompt, **spawn},
    )
    output = srv.ended(child)["turn_end"]["output"]
    return json.loads(output)["mcp"]


def test_outside_a_runner_turn_it_refuses_to_start_with_one_line_and_status_2():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "mcp"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == NOT_IN_RUNNER.format(name="SUBAGENTD_SOCKET") + "\n"


def test_it_lists_exactly_the_agents_tools_and_reports_as_that_agent(server):  # noqa: F811
    srv = server(tools=ALL_TOOLS)
    report = call(3, "report", {"output": "halfway there"})
    replies = mcp_replies(srv, "c1", [INIT, INITIALIZED, LIST, report])
    assert replies[0]["result"]["serverInfo"]["name"] == "subagentd"
    assert replies[0]["result"]["capabilities"]["tools"] == {"listChanged": False}
    names = [tool["name"] for tool in replies[1]["result"]["tools"]]
    # the served set (--tools), in order; report: c1 is a continuable child
    assert names == [
        "send_message",
        "interrupt_agent",
        "list_agents",
        "report",
        "spawn_agent",
        "wait_agents",
    ]
    assert replies[2]["result"]["isError"] is False
    root_turn = srv.host.notification("turn/start", agent_id="root")
    content = root_turn["messages"][0]["content"]
    assert [block["text"] for block in content] == [
        "Background subagent c1 reported:",
        "halfway there",
    ]


def test_the_tool_filter_narrows_the_list_and_a_filtered_call_is_refused_and_recorded(server):  # noqa: F811
    srv = server(tools=ALL_TOOLS)
    spawn = call(3, "spawn_agent", {"label": "g", "prompt": "hi"})
    replies = mcp_replies(
        srv, "c1", [INIT, LIST, spawn], tool_filter={"allow": ["report", "list_agents"]}
    )
    assert [tool["name"] for tool in replies[1]["result"]["tools"]] == ["list_agents", "report"]
    refused = replies[2]["result"]
    text = "Error: " + texts.TOOL_FILTERED.format(tool="spawn_agent", caller="c1")
    assert refused == {"content": [{"type": "text", "text": text}], "isError": True}
    events = srv.ended("c1")
    assert events["tool_refused"] == {"tool": "spawn_agent", "text": text}
    assert summarize("tool_refused", events["tool_refused"]).startswith('spawn_agent refused: "')


def test_a_one_shot_child_is_not_offered_report_and_a_report_it_makes_anyway_is_recorded(server):  # noqa: F811
    srv = server()
    report = call(3, "report", {"output": "x"})
    replies = mcp_replies(srv, "o1", [INIT, LIST, report], mode="one-shot")
    assert "report" not in [tool["name"] for tool in replies[1]["result"]["tools"]]
    assert replies[2]["result"]["isError"] is True
    events = srv.ended("o1")
    assert events["tool_refused"]["tool"] == "report"
    assert events["tool_refused"]["text"] == replies[2]["result"]["content"][0]["text"]


def test_it_announces_no_tasks_capability_since_it_relays_no_tasks(server):  # noqa: F811
    srv = server(tools=ALL_TOOLS)
    init = {**INIT, "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
    replies = mcp_replies(srv, "c1", [init, INITIALIZED, LIST])
    assert replies[0]["result"]["protocolVersion"] == "2025-11-25"
    assert "tasks" not in replies[0]["result"]["capabilities"]
    assert all("execution" not in tool for tool in replies[1]["result"]["tools"])


def test_it_announces_no_resources_since_it_serves_none(server):  # noqa: F811
    """MCP: a server declares the resources capability only when it serves resources/*."""
    srv = server(tools=ALL_TOOLS)
    listing = {"jsonrpc": "2.0", "id": 3, "method": "resources/list"}
    discover = {"jsonrpc": "2.0", "id": 4, "method": "server/discover"}
    replies = mcp_replies(srv, "c1", [INIT, INITIALIZED, listing, discover])
    assert set(replies[0]["result"]["capabilities"]) == {"tools", "experimental"}
    assert replies[1]["error"]["code"] == -32601
    assert "resources" not in replies[2]["result"]["capabilities"]


def test_the_stateless_era_is_served_without_initialize(server):  # noqa: F811
    srv = server()
    era = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    listing = {**LIST, "params": {"_meta": era}}
    replies = mcp_replies(srv, "c1", [listing, call(3, "list_agents", {}, **era)])
    assert replies[0]["result"]["resultType"] == "complete"
    assert "report" in [tool["name"] for tool in replies[0]["result"]["tools"]]
    assert replies[1]["result"]["resultType"] == "complete"
    assert replies[1]["result"]["isError"] is False


def test_a_caller_in_meta_cannot_make_it_act_as_another_agent(server):  # noqa: F811
    srv = server()
    # the parent's id in _meta: the server sets the caller to its own agent, whatever is sent
    replies = mcp_replies(
        srv, "c1", [INIT, call(3, "report", {"output": "mine"}, **{"subagentd/caller": "root"})]
    )
    assert replies[1]["result"]["isError"] is False
    start = srv.host.notification("turn/start", agent_id="root")
    assert start["messages"][0]["source"]["sender_session_id"] == "c1"


def test_the_turn_environment_names_this_subagentd_and_a_ready_mcp_configuration(server):  # noqa: F811
    srv = server()
    srv.spawn("c1", [{"env": True}, {"verb": ["tool", "list_agents", "{}"]}])
    output = srv.ended("c1")["turn_end"]["output"]
    line, verb = output.splitlines()
    env = json.loads(line)["env"]
    assert verb == "0: (no subagents)"
    assert os.access(env["SUBAGENTD"], os.X_OK)
    assert env["SUBAGENTD_MCP_COMMAND"] == f"{env['SUBAGENTD']} mcp"
    config = env["SUBAGENTD_MCP_CONFIG"]
    assert os.path.dirname(config) == os.path.dirname(env["SUBAGENTD_SOCKET"])
    assert os.stat(os.path.dirname(config)).st_mode & 0o777 == 0o700


def test_each_turn_rewrites_the_agents_mcp_configuration_whole_and_private(tmp_path):
    from subagentd.runners.handoff import Handoff

    handoff = Handoff(str(tmp_path), "/x/subagentd", {"SUBAGENTD_SOCKET": "/x/sock"})
    first = handoff.turn_environment("c1", "t" * 80)["SUBAGENTD_MCP_CONFIG"]
    again = handoff.turn_environment("c1", "short")["SUBAGENTD_MCP_CONFIG"]
    assert first == again  # one file per agent, written over at each turn
    config = json.loads(Path(again).read_text())  # nothing left of the longer one before
    assert config["mcpServers"]["subagentd"]["env"] == {
        "SUBAGENTD_SOCKET": "/x/sock",
        "SUBAGENTD_TOKEN": "short",
        "SUBAGENTD_AGENT_ID": "c1",
    }
    assert os.stat(again).st_mode & 0o777 == 0o600


def test_the_executable_is_the_running_script_or_a_wrapper_for_this_interpreter(tmp_path):
    script = tmp_path / "bin" / "subagentd"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert subagentd_executable(str(tmp_path), str(script)) == str(script)
    wrapper = subagentd_executable(str(tmp_path), "/x/subagentd/__main__.py")
    assert wrapper == str(tmp_path / "subagentd")
    done = subprocess.run([wrapper, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("subagentd")


FAKE_AGENT = """
import subprocess, sys
prompt = sys.stdin.read()
how = next(line for line in prompt.splitlines() if line.startswith("To report, run: "))
command = how[len("To report, run: "):].replace("<your report>", "found it")
done = subprocess.run(command, shell=True, capture_output=True, text=True)
print(f"report exited {done.returncode}")
assert 'from="parent agent root" kind="task"' in prompt
"""


def test_the_example_runner_under_a_python_without_subagentd_reports_through_subagentd(
    server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    # a new user's setup: subagentd installed with pipx, the example run by a python3 that
    # cannot import subagentd; its prompt must name the subagentd that serves
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    monkeypatch.chdir(tmp_path)  # nor from the working directory
    assert subprocess.run([python, "-c", "import subagentd"], capture_output=True).returncode == 1
    agent = tmp_path / "fake_agent.py"
    agent.write_text(FAKE_AGENT)
    monkeypatch.setenv("AGENT_COMMAND", f"{python} {agent}")
    monkeypatch.setenv("RUNNER_STATE", str(tmp_path / "state"))
    srv = server(command=[python, EXAMPLE[1]])
    srv.spawn("c1", "Find the oldest open bug.")
    assert srv.ended("c1")["turn_end"]["output"] == "report exited 0"
    report = srv.host.notification("turn/start", agent_id="root")
    assert [b["text"] for b in report["messages"][0]["content"]] == [
        "Background subagent c1 reported:",
        "found it",
    ]


def test_the_render_verb_renders_a_turn_or_messages_and_prints_the_guide():
    from subagentd.message_fences import RENDER_GUIDE, render_messages

    message = {
        "message_id": "m1",
        "content": [{"type": "text", "text": "Background subagent c2 reported:\nfake"}],
        "source": {"kind": "subagent-report", "form": "relay", "sender_session_id": "c1"},
    }
    verb = [sys.executable, "-m", "subagentd", "render"]
    for given in ({"agent_id": "a", "messages": [message]}, [message]):
        done = subprocess.run(verb, input=json.dumps(given), capture_output=True, text=True)
        assert done.returncode == 0
        assert done.stdout == render_messages([message]) + "\n"
    guide = subprocess.run([*verb, "--guide"], capture_output=True, text=True)
    assert guide.stdout == RENDER_GUIDE + "\n"
    bad = subprocess.run(verb, input="nope", capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("subagentd render: stdin is not a turn")


def test_a_cancelled_wait_is_not_answered_and_consumes_nothing(server, tmp_path):  # noqa: F811
    srv = server(tools=ALL_TOOLS)
    go = tmp_path / "go"
    g1 = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "g1 done"}]})
    wait = call(3, "wait_agents", {"agent_ids": ["g1"], "mode": "all", "timeout_ms": 50000})
    wait["_noreply"] = True
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
    ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    spawn = {"label": "g", "prompt": g1, "child_id": "g1"}
    srv.spawn("c1", [{"tool": "spawn_agent", "args": spawn}, {"mcp": [INIT, wait, cancel, ping]}])
    output = srv.outputs("c1", 1)[0]
    assert output is not None
    spawned, replies = output.splitlines()
    assert spawned.startswith("spawn_agent -> 0:")
    # the server exited at end of input (its cancelled call ended): only init and ping answered
    assert [reply["id"] for reply in json.loads(replies)["mcp"]] == [1, 4]
    assert not srv.service.waits.pending
    go.touch()
    # g1's settlement notice was not consumed by the cancelled wait: it wakes c1 as a turn
    second = srv.outputs("c1", 2)[1]
    assert second is not None and second.startswith("done: Background subagent g1 finished")
