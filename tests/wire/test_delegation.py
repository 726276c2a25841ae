"""spawn_agent, wait_agents and agents/wait_idle over real pipes (PROTOCOL.md sections 4 and 5)."""

from __future__ import annotations

import signal
from typing import Any

from subagentd.core.settings import served_tools

FINISHED = "Background subagent {} finished and will do no further work unless you send it more."


def tool_call(host: Any, name: str, caller: str, **extra_meta: Any) -> Any:
    """Start a tools/call as `caller`; the arguments are the keyword `arguments`."""
    arguments = extra_meta.pop("arguments", {})
    meta = {"subagentd/caller": caller, **extra_meta}
    return host.start("tools/call", {"name": name, "arguments": arguments, "_meta": meta})


def test_a_model_spawns_waits_and_its_news_does_not_wake_it_again(spawn_process):
    proc = spawn_process("--spawn-tool", "on")
    host = proc.host
    host.initialize()
    host.open("root")
    host.call("turns/begin", {"agent_id": "root", "messages": ["delegate"]})
    root_turn = host.notification("turn/start", agent_id="root")["turn_id"]
    spawned = host.result(
        tool_call(
            host, "spawn_agent", "root", arguments={"label": "l", "prompt": "p", "child_id": "c1"}
        )
    )
    assert spawned == {
        "content": [{"type": "text", "text": "started subagent c1"}],
        "structuredContent": {"child_id": "c1", "text": "started subagent c1"},
        "isError": False,
    }
    c1_turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    waiting = tool_call(host, "wait_agents", "root", progressToken="p1")
    progress = host.notification("notifications/progress", progressToken="p1")
    assert progress == {
        "progressToken": "p1",
        "progress": 0,
        "total": 25000,
        "message": "waiting for c1",
    }
    assert host.call("ping") == {}  # the connection keeps serving while the wait is pending
    assert waiting not in host.responses
    host.end_turn("c1", c1_turn, output="done")
    assert host.result(waiting) == {
        "content": [  # one block: a client that shows only the first loses nothing
            {
                "type": "text",
                "text": "\n".join(
                    [
                        FINISHED.format("c1"),
                        "Its closing message:",
                        "done",
                        "none of the subagents waited for is still working",
                    ]
                ),
            }
        ],
        "structuredContent": {
            "agents": [
                {"agent_id": "c1", "status": "ready", "reason": "completed", "output": "done"}
            ],
            "text": "\n".join(
                [
                    FINISHED.format("c1"),
                    "Its closing message:",
                    "done",
                    "none of the subagents waited for is still working",
                ]
            ),
        },
        "isError": False,
    }
    host.end_turn("root", root_turn)
    info = host.call("agents/get", {"agent_id": "root"})
    assert (info["status"], info["queued"], info["parked"]) == ("idle", 0, 0)
    assert not [n for n in host.drain_notifications() if n["method"] == "turn/start"]


def test_a_cancelled_wait_is_answered_and_leaves_the_news_for_a_turn(make_server):
    server = make_server(tools=served_tools(None, True))
    host = server.host
    host.open("root")
    host.spawn("root", "c1")
    waiting = tool_call(host, "wait_agents", "root", arguments={"timeout_ms": 50000})
    host.notify("notifications/cancelled", {"requestId": waiting})
    assert host.response(waiting)["error"] == {"code": -32800, "message": "request cancelled"}
    host.tool("report", "c1", output="for a turn")
    start = host.notification("turn/start", agent_id="root")  # not consumed by the dead wait
    assert [b["text"] for m in start["messages"] for b in m["content"]] == [
        "Background subagent c1 reported:",
        "for a turn",
    ]


def test_wait_agents_refusals_are_tool_errors(make_server):
    host = make_server().host
    host.open("root")
    host.open("other")
    host.spawn("other", "o1")
    result = host.result(tool_call(host, "wait_agents", "root", arguments={"agent_ids": ["o1"]}))
    assert result == {
        "content": [
            {
                "type": "text",
                "text": 'Error: subagent "o1" was not started by agent "root";'
                " wait_agents waits only for your own subagents",
            }
        ],
        "isError": True,
    }
    bad = host.result(tool_call(host, "wait_agents", "root", arguments={"timeout_ms": 50001}))
    assert bad["content"][0]["text"] == (
        'Error: invalid arguments: "timeout_ms" must be an integer from 0 to 50000'
    )
    direct = host.tool("wait_agents", "root", timeout_ms=0)  # also a direct method
    assert direct == {"agents": [], "text": 'agent "root" has no subagents to wait for'}


def test_spawn_agent_is_served_only_when_asked_and_every_parameter_is_described(make_server):
    plain = make_server().host
    plain.open("root")
    names = [
        t["name"]
        for t in plain.call("tools/list", {"_meta": {"subagentd/caller": "root"}})["tools"]
    ]
    assert names == ["send_message", "interrupt_agent", "list_agents", "wait_agents"]
    refused = plain.response(
        tool_call(plain, "spawn_agent", "root", arguments={"label": "l", "prompt": "p"})
    )
    assert refused["error"]["message"] == "Unknown tool: spawn_agent"
    served = make_server(tools=served_tools(None, True)).host
    served.open("root")
    tools = served.call("tools/list", {"_meta": {"subagentd/caller": "root"}})["tools"]
    assert [t["name"] for t in tools] == [
        "send_message",
        "interrupt_agent",
        "list_agents",
        "spawn_agent",
        "wait_agents",
    ]
    for tool in tools:
        for name, schema in tool["inputSchema"]["properties"].items():
            assert schema.get("description"), (tool["name"], name)
    spawn_schema = next(t for t in tools if t["name"] == "spawn_agent")["inputSchema"]
    assert spawn_schema["required"] == ["label", "prompt"]


def test_wait_idle_answers_when_the_tree_is_quiet_and_names_the_busy_on_timeout(make_server):
    host = make_server().host
    host.open("root")
    c1 = host.spawn("root", "c1")
    assert host.call("agents/wait_idle", {"agent_id": "root", "timeout_ms": 0}) == {
        "idle": False,
        "running": ["c1"],
    }
    waiting = host.start("agents/wait_idle", {"agent_id": "root", "timeout_ms": 600000})
    host.end_turn("c1", c1["turn_id"], output="ok")  # c1 settles, root runs its notice
    root_turn = host.notification("turn/start", agent_id="root")["turn_id"]
    assert waiting not in host.responses
    host.end_turn("root", root_turn)
    assert host.result(waiting) == {"idle": True}
    refused = host.response(host.start("agents/wait_idle", {"agent_id": "root", "timeout_ms": -1}))
    assert refused["error"]["code"] == -32602


def test_a_parked_child_shows_in_agents_list_and_list_agents(make_server):
    host = make_server().host
    host.open("root")
    c1 = host.spawn("root", "c1", label="worker")
    host.spawn("c1", "g1")
    host.tool("send_message", "root", subagent_id="c1", message="queued")
    host.tool("interrupt_agent", "root", agent_id="c1")
    host.end_turn("c1", c1["turn_id"], reason="aborted")
    assert host.tool("list_agents", "root")["text"] == "c1 [idle, 1 parked] — worker"
    [row] = host.call("agents/list", {"root_id": "root"})["agents"]
    assert (row["status"], row["parked"]) == ("idle", 1)


def test_list_agents_and_interrupt_agent_descriptions_say_what_seed_000_says(make_server):
    host = make_server().host
    host.open("root")
    tools = {
        t["name"]: t["description"]
        for t in host.call("tools/list", {"_meta": {"subagentd/caller": "root"}})["tools"]
    }
    listing = tools["list_agents"]
    assert "Only depth-1 entries (your direct children) can take `send_message`" in listing
    assert "deeper entries can only be interrupted with `interrupt_agent`" in listing
    assert "Do not poll this list to learn when work is done" in listing
    assert "not a result waiting to be collected" in listing
    assert "`[idle, 2 parked]`" in listing
    interrupt = tools["interrupt_agent"]
    assert "it resumes with them, in order, at its next waking input" in interrupt


def test_a_childs_tool_filter_binds_spawn_agent_and_wait_agents(make_server):
    host = make_server(tools=served_tools(None, True)).host
    host.open("root")
    host.spawn("root", "c1", tool_filter={"deny": ["spawn_agent", "wait_agents"]})
    names = [
        t["name"] for t in host.call("tools/list", {"_meta": {"subagentd/caller": "c1"}})["tools"]
    ]
    assert names == ["send_message", "interrupt_agent", "list_agents", "report", "ask_parent"]
    for name, arguments in [("spawn_agent", {"label": "l", "prompt": "p"}), ("wait_agents", {})]:
        result = host.result(tool_call(host, name, "c1", arguments=arguments))
        assert result == {
            "content": [
                {
                    "type": "text",
                    "text": f'Error: tool "{name}" is not available to agent "c1":'
                    " its tool_filter excludes it",
                }
            ],
            "isError": True,
        }


def test_a_pending_wait_is_answered_at_a_signalled_shutdown(spawn_process):
    proc = spawn_process("--caller", "root", "--spawn-tool", "on")
    host = proc.host
    host.initialize()
    spawned = tool_call(host, "spawn_agent", "root", arguments={"label": "l", "prompt": "p"})
    child = host.result(spawned)["structuredContent"]["child_id"]
    waiting = tool_call(host, "wait_agents", "root", arguments={"timeout_ms": 50000})
    assert host.call("ping") == {}
    # SIGTERM: the tree drains, the root leaves, the wait is answered (at EOF it would end
    # unanswered: tests/wire/test_mcp_caller_traffic.py); the child's notice stays queued for root
    proc.proc.send_signal(signal.SIGTERM)
    answer = host.result(waiting)
    assert answer == {
        "content": [{"type": "text", "text": "none of the subagents waited for is still working"}],
        "structuredContent": {
            "agents": [{"agent_id": child, "status": "ready"}],
            "text": "none of the subagents waited for is still working",
        },
        "isError": False,
    }
    assert proc.wait() == 0
