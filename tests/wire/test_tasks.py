"""MCP tasks (2025-11-25) over real pipes: a task-augmented spawn_agent / send_message, tasks/get,
tasks/result, tasks/list, tasks/cancel, the status notifications, subtree binding, ttl, the quota
(PROTOCOL.md section 5, Tasks).

Longer than ~300 lines on purpose: one test per rule of the task mapping, each driving the same
small host (serve, as_task, on) over the pipes; split, those helpers would be copied.
"""

from __future__ import annotations

from typing import Any

import pytest

from subagentd.client import RpcError
from subagentd.core.settings import served_tools

FINISHED = "Background subagent {} finished and will do no further work unless you send it more."
FAILED = "Background subagent {} failed before it finished."
CANCELLED = (
    "the task was cancelled (tasks/cancel); subagent {} was asked to stop its current turn,"
    " and what it sends later reaches you through wait_agents"
)


def initialize(host: Any, version: str = "2025-11-25") -> dict[str, Any]:
    result = host.call(
        "initialize", {"protocolVersion": version, "clientInfo": {"name": "t", "version": "0"}}
    )
    host.notify("notifications/initialized")
    return result


def serve(make_server: Any, version: str = "2025-11-25", **settings: Any) -> Any:
    host = make_server(initialize=False, tools=served_tools(None, True), **settings).host
    initialize(host, version)
    host.open("root")
    host.call("turns/begin", {"agent_id": "root", "messages": ["delegate"]})
    host.notification("turn/start", agent_id="root")  # root runs a turn: its news stay queued
    return host


def as_task(host: Any, name: str, caller: str = "root", ttl: int | None = None, **arguments: Any):
    task: dict[str, Any] = {} if ttl is None else {"ttl": ttl}
    return host.call(
        "tools/call",
        {"name": name, "arguments": arguments, "task": task, "_meta": {"subagentd/caller": caller}},
    )


def on(method: str, caller: str = "root", **params: Any) -> tuple[str, dict[str, Any]]:
    return method, {**params, "_meta": {"subagentd/caller": caller}}


def test_the_handshake_of_2025_11_25_announces_tasks_and_older_versions_do_not(make_server):
    host = make_server(initialize=False, tools=served_tools(None, True)).host
    caps = initialize(host)["capabilities"]
    assert caps["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    host.open("root")
    tools = host.call(*on("tools/list"))["tools"]
    assert {t["name"]: t.get("execution") for t in tools} == {
        "send_message": {"taskSupport": "optional"},
        "interrupt_agent": None,
        "list_agents": None,
        "spawn_agent": {"taskSupport": "optional"},
        "wait_agents": None,
    }
    old = make_server(initialize=False, tools=served_tools(None, True)).host
    assert "tasks" not in initialize(old, "2025-06-18")["capabilities"]
    old.open("root")
    assert all("execution" not in t for t in old.call(*on("tools/list"))["tools"])
    # a version without tasks ignores params.task: the call is answered as a plain call
    plain = as_task(old, "spawn_agent", label="l", prompt="p", child_id="c1")
    assert plain["content"] == [{"type": "text", "text": "started subagent c1"}]


def test_a_spawn_as_a_task_works_until_the_child_settles_then_its_result_is_what_a_wait_gives(
    make_server,
):
    host = serve(make_server)
    created = host.call(
        "tools/call",
        {
            "name": "spawn_agent",
            "arguments": {"label": "l", "prompt": "p", "child_id": "c1"},
            "task": {"ttl": 60000},
            "_meta": {"subagentd/caller": "root", "progressToken": "tok"},
        },
    )
    task = created["task"]
    task_id = task["taskId"]
    assert len(task_id) == 32 and task_id.replace("-", "").replace("_", "").isalnum()
    assert task == {
        "taskId": task_id,
        "status": "working",
        "statusMessage": "subagent c1 is working",
        "createdAt": task["createdAt"],
        "lastUpdatedAt": task["createdAt"],
        "ttl": 60000,
        "pollInterval": 1000,
    }
    assert created["_meta"] == {
        "io.modelcontextprotocol/model-immediate-response": "started subagent c1"
    }
    assert host.notification("notifications/progress", progressToken="tok") == {
        "progressToken": "tok",
        "progress": 0,
        "total": 1,
        "message": "subagent c1 is working",
    }
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    assert host.call(*on("tasks/get", taskId=task_id)) == task
    waiting = host.start(*on("tasks/result", taskId=task_id))
    assert host.call("ping") == {}  # tasks/result waits; the connection keeps serving
    assert waiting not in host.responses
    host.tool("report", "c1", output="half way")
    assert waiting not in host.responses  # a report does not end the task; the settling does
    host.end_turn("c1", turn, output="all done")
    blocks = [
        "Background subagent c1 reported:",
        "half way",
        FINISHED.format("c1"),
        "Its closing message:",
        "all done",
        "none of the subagents waited for is still working",
    ]
    assert host.result(waiting) == {
        "content": [{"type": "text", "text": "\n".join(blocks)}],
        "structuredContent": {
            "agents": [
                {
                    "agent_id": "c1",
                    "status": "ready",
                    "reason": "completed",
                    "output": "all done",
                    "reports": ["half way"],
                }
            ],
            "text": "\n".join(blocks),
            "child_id": "c1",
        },
        "isError": False,
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task_id}},
    }
    status = host.notification("notifications/tasks/status", taskId=task_id)
    assert status["status"] == "completed"
    assert status["statusMessage"] == FINISHED.format("c1")
    assert host.notification("notifications/progress", progressToken="tok", progress=1)[
        "message"
    ] == FINISHED.format("c1")
    assert host.call(*on("tasks/get", taskId=task_id)) == {
        k: v for k, v in status.items() if k != "_meta"
    }
    # the task consumed the news, as a wait does: a wait_agents now has nothing from c1
    waited = host.call(*on("tools/call", name="wait_agents", arguments={"timeout_ms": 0}))
    assert [b["text"] for b in waited["content"]] == [
        "none of the subagents waited for is still working"
    ]
    with pytest.raises(RpcError) as refused:
        host.call(*on("tasks/cancel", taskId=task_id))
    assert (refused.value.code, refused.value.message) == (
        -32602,
        f"task {task_id} is already completed; a finished task cannot be cancelled",
    )


def test_a_child_that_fails_fails_its_task_with_an_error_result(make_server):
    host = serve(make_server)
    task_id = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]["taskId"]
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    host.end_turn("c1", turn, reason="error", output="boom")
    got = host.call(*on("tasks/get", taskId=task_id))
    assert (got["status"], got["statusMessage"]) == ("failed", FAILED.format("c1"))
    result = host.call(*on("tasks/result", taskId=task_id))
    assert result["isError"] is True
    (block,) = result["content"]
    assert block["text"].split("\n")[:3] == [
        FAILED.format("c1"),
        "Its closing message:",
        "boom",
    ]


def test_a_refused_spawn_is_a_failed_task_whose_result_is_the_tool_error(make_server):
    host = serve(make_server)
    as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")
    task = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]
    assert (task["status"], task["statusMessage"]) == (
        "failed",
        'an agent with id "c1" already exists',
    )
    assert host.call(*on("tasks/result", taskId=task["taskId"])) == {
        "content": [{"type": "text", "text": 'Error: an agent with id "c1" already exists'}],
        "isError": True,
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task["taskId"]}},
    }


def test_tasks_cancel_interrupts_the_childs_turn_then_marks_the_task(make_server):
    host = serve(make_server)
    task_id = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]["taskId"]
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    waiting = host.start(*on("tasks/result", taskId=task_id))
    cancelled = host.call(*on("tasks/cancel", taskId=task_id))
    assert (cancelled["status"], cancelled["statusMessage"]) == (
        "cancelled",
        CANCELLED.format("c1"),
    )
    assert host.notification("turn/interrupt", agent_id="c1")["cause"] == {
        "kind": "parent",
        "by": "root",
    }
    assert host.result(waiting) == {
        "content": [{"type": "text", "text": CANCELLED.format("c1")}],
        "isError": True,
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task_id}},
    }
    host.end_turn("c1", turn, reason="aborted")
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "cancelled"  # stays so
    # what the child sent after the cancel is the caller's, through wait_agents
    waited = host.call(*on("tools/call", name="wait_agents", arguments={"timeout_ms": 0}))
    assert waited["content"][0]["text"].startswith(
        "Background subagent c1 was stopped before it finished.\n"
    )


def test_a_waiting_tasks_result_is_cancellable(make_server):
    host = serve(make_server)
    task_id = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]["taskId"]
    waiting = host.start(*on("tasks/result", taskId=task_id))
    host.notify("notifications/cancelled", {"requestId": waiting})
    assert host.response(waiting)["error"] == {"code": -32800, "message": "request cancelled"}
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "working"


def test_a_task_outside_the_callers_subtree_is_not_found_like_one_that_does_not_exist(
    make_server,
):
    host = serve(make_server)
    host.open("other")
    theirs = as_task(host, "spawn_agent", "other", label="l", prompt="p", child_id="o1")["task"]
    mine = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]
    host.notification("turn/start", agent_id="c1")
    # a task c1 asks for is its own and its ancestors'
    deep = as_task(host, "spawn_agent", "c1", label="l", prompt="p", child_id="g1")["task"]

    def refusal(method: str, caller: str, task_id: str) -> tuple[int, str, Any]:
        with pytest.raises(RpcError) as refused:
            host.call(*on(method, caller, taskId=task_id))
        return refused.value.code, refused.value.message, refused.value.data

    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        hidden = refusal(method, "root", theirs["taskId"])
        assert hidden == (-32602, f"task not found: {theirs['taskId']}", hidden[2])
        missing = refusal(method, "root", "x" * 32)
        assert (hidden[0], hidden[2]) == (missing[0], missing[2])
        assert refusal(method, "c1", mine["taskId"])[1] == f"task not found: {mine['taskId']}"
    assert host.call(*on("tasks/get", taskId=deep["taskId"]))["status"] == "working"
    assert [t["taskId"] for t in host.call(*on("tasks/list"))["tasks"]] == sorted(
        [mine["taskId"], deep["taskId"]],
        key=lambda i: [t for t in (mine, deep) if t["taskId"] == i][0]["createdAt"],
    )
    assert [t["taskId"] for t in host.call(*on("tasks/list", "c1"))["tasks"]] == [deep["taskId"]]
    assert [t["taskId"] for t in host.call(*on("tasks/list", "other"))["tasks"]] == [
        theirs["taskId"]
    ]


def test_tasks_list_pages_with_an_opaque_cursor(make_server):
    host = serve(make_server)
    ids = []
    for _ in range(101):  # refused spawns are failed tasks: a page's worth without children
        ids.append(as_task(host, "spawn_agent", label="l", prompt="p", child_id="@x")["task"])
    first = host.call(*on("tasks/list"))
    assert len(first["tasks"]) == 100 and "nextCursor" in first
    second = host.call(*on("tasks/list", cursor=first["nextCursor"]))
    assert len(second["tasks"]) == 1 and "nextCursor" not in second
    listed = [t["taskId"] for t in first["tasks"] + second["tasks"]]
    assert sorted(listed) == sorted(t["taskId"] for t in ids)
    with pytest.raises(RpcError) as refused:
        host.call(*on("tasks/list", cursor="nope"))
    assert (refused.value.code, refused.value.message) == (-32602, 'invalid cursor "nope"')


def test_a_task_whose_ttl_passed_is_not_found(make_server):
    host = serve(make_server)
    task = as_task(host, "spawn_agent", ttl=0, label="l", prompt="p", child_id="c1")["task"]
    assert task["ttl"] == 0
    with pytest.raises(RpcError) as refused:
        host.call(*on("tasks/get", taskId=task["taskId"]))
    assert refused.value.message == f"task not found: {task['taskId']}"
    assert host.call(*on("tasks/list"))["tasks"] == []
    long = as_task(host, "spawn_agent", ttl=10**12, label="l", prompt="p", child_id="c2")
    assert long["task"]["ttl"] == 30 * 24 * 3600 * 1000  # the longest lifetime granted


def test_working_tasks_count_against_max_tasks(make_server):
    host = serve(make_server, max_tasks=1)
    as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")
    refused = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c2")
    assert refused == {
        "content": [
            {
                "type": "text",
                "text": 'Error: agent "root" already has 1 working tasks (the limit per agent,'
                " --max-tasks); wait until some of them finish",
            }
        ],
        "isError": True,
    }
    with pytest.raises(RpcError) as missing:
        host.call("agents/get", {"agent_id": "c2"})
    assert missing.value.code == 1009  # nothing was spawned


def test_send_message_to_a_ready_child_as_a_task_ends_when_it_settles_again(make_server):
    host = serve(make_server)
    spawn = {"label": "l", "prompt": "p", "child_id": "c1"}
    host.call(*on("tools/call", name="spawn_agent", arguments=spawn))
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    host.end_turn("c1", turn, output="first")
    host.call(*on("tools/call", name="wait_agents", arguments={"timeout_ms": 0}))  # take it
    created = as_task(host, "send_message", subagent_id="c1", message="again")
    task_id = created["task"]["taskId"]
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "working"
    host.end_turn("c1", turn, output="second")
    result = host.call(*on("tasks/result", taskId=task_id))
    (block,) = result["content"]
    assert block["text"].split("\n") == [
        FINISHED.format("c1"),
        "Its closing message:",
        "second",
        "none of the subagents waited for is still working",
    ]
    message_id = result["structuredContent"]["message_id"]
    assert host.call("messages/get", {"message_id": message_id})["agent_id"] == "c1"


def test_a_tool_without_task_support_called_as_a_task_is_method_not_found(make_server):
    host = serve(make_server)
    with pytest.raises(RpcError) as refused:
        as_task(host, "list_agents")
    assert refused.value.code == -32601


def test_a_spawn_refused_by_another_quota_is_a_failed_task(make_server):
    host = serve(make_server, max_children=1)
    as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")
    task = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c2")["task"]
    assert (task["status"], task["statusMessage"]) == (
        "failed",
        'agent "root" already has 1 live subagents (the limit per parent);'
        " wait until some of them finish",
    )


def test_the_python_clients_typed_task_methods(make_server):
    host = serve(make_server)
    task_id = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]["taskId"]
    assert host.tasks_get(task_id, caller="root").status == "working"
    assert [t.taskId for t in host.tasks_list(caller="root").tasks] == [task_id]
    cancelled = host.tasks_cancel(task_id, caller="root")
    assert (cancelled.status, cancelled.ttl, cancelled.pollInterval) == (
        "cancelled",
        86400000,
        1000,
    )
    result = host.tasks_result(task_id, caller="root")
    assert (result.isError, result.content) == (
        True,
        [{"type": "text", "text": CANCELLED.format("c1")}],
    )
