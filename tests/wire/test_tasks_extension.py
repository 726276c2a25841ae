"""MCP tasks as the 2026-07-28 extension `io.modelcontextprotocol/tasks` over real pipes: a
delegation answered as a `resultType: "task"` result to a stateless request that declares the
extension, `tasks/get` with DetailedTasks, `tasks/cancel` and `tasks/update` acknowledgements,
-32021 for an undeclared request, no `tasks/result` / `tasks/list`; the 2025-11-25 shape on the
same server and rows (PROTOCOL.md section 5, Tasks).
"""

from __future__ import annotations

from typing import Any

import pytest

from subagentd.client import RpcError
from subagentd.core.settings import served_tools
from tests.wire.test_tasks import CANCELLED, FAILED, FINISHED, as_task, on, serve

EXTENSION = "io.modelcontextprotocol/tasks"
REQUIRED: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


def modern(method: str, declared: bool = True, **params: Any) -> tuple[str, dict[str, Any]]:
    """A stateless-era (2026-07-28) request of root's, declaring the tasks extension or not."""
    hint = {"subagentd/task": True} if params.pop("hint", False) else {}
    meta: dict[str, Any] = {
        **hint,
        "subagentd/caller": params.pop("caller", "root"),
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}
        if declared
        else {},
    }
    return method, {**params, "_meta": meta}


def spawn(
    host: Any, child: str, declared: bool = True, caller: str = "root", hint: bool = True
) -> dict[str, Any]:
    """spawn_agent, asking for a task (`_meta["subagentd/task"]`) unless hint is False."""
    arguments = {"label": "l", "prompt": "p", "child_id": child}
    call = modern(
        "tools/call", declared, caller=caller, hint=hint, name="spawn_agent", arguments=arguments
    )
    return host.call(*call)


def refused(host: Any, method: str, declared: bool = True, **params: Any) -> tuple[int, str, Any]:
    with pytest.raises(RpcError) as error:
        host.call(*modern(method, declared, **params))
    return error.value.code, error.value.message, error.value.data


def test_discover_announces_the_extension_and_a_declaring_spawn_is_a_task_result(make_server):
    host = serve(make_server)
    found = host.call(*modern("server/discover"))
    assert found["capabilities"]["extensions"] == {EXTENSION: {}}
    assert "tasks" not in found["capabilities"]  # the 2025-11-25 capability is the handshake's
    tools = host.call(*modern("tools/list"))["tools"]
    assert all("execution" not in t for t in tools)  # the server decides, per request
    created = spawn(host, "c1")
    task_id = created["taskId"]
    assert created == {
        "resultType": "task",
        "taskId": task_id,
        "status": "working",
        "statusMessage": "subagent c1 is working",
        "createdAt": created["createdAt"],
        "lastUpdatedAt": created["createdAt"],
        "ttlMs": created["ttlMs"],
        "pollIntervalMs": 1000,
    }
    assert created["ttlMs"] == 86_400_000  # no ttl asked for: a day
    got = host.call(*modern("tasks/get", taskId=task_id))
    assert got == {**created, "resultType": "complete"}
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    host.end_turn("c1", turn, output="all done")
    done = host.call(*modern("tasks/get", taskId=task_id))
    blocks = [
        FINISHED.format("c1"),
        "Its closing message:",
        "all done",
        "none of the subagents waited for is still working",
    ]
    assert (done["status"], done["statusMessage"]) == ("completed", FINISHED.format("c1"))
    assert [c["text"] for c in done["result"]["content"]] == ["\n".join(blocks)]
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["child_id"] == "c1"
    assert "error" not in done
    # the same row, read in the 2025-11-25 shape over the handshake
    old = host.call(*on("tasks/get", taskId=task_id))
    assert (old["status"], old["ttl"], old["pollInterval"]) == ("completed", 86_400_000, 1000)


def test_a_child_that_fails_completes_its_task_with_an_error_result_never_failed(make_server):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    host.end_turn("c1", turn, reason="error", output="boom")
    got = host.call(*modern("tasks/get", taskId=task_id))
    assert (got["status"], got["statusMessage"]) == ("completed", FAILED.format("c1"))
    assert got["result"]["isError"] is True
    assert got["result"]["content"][0]["text"].startswith(FAILED.format("c1") + "\n")
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "failed"  # 2025's word


def test_a_refused_spawn_is_a_completed_task_whose_result_is_the_tool_error(make_server):
    host = serve(make_server)
    spawn(host, "c1")
    again = spawn(host, "c1")  # the child id is taken
    assert (again["resultType"], again["status"]) == ("task", "completed")
    got = host.call(*modern("tasks/get", taskId=again["taskId"]))
    assert got["result"]["isError"] is True
    assert got["result"]["content"][0]["text"].startswith("Error: ")


def test_a_request_that_does_not_declare_the_extension_gets_a_plain_answer_or_32021(make_server):
    host = serve(make_server)
    plain = spawn(host, "c1", declared=False)
    assert plain["resultType"] == "complete"
    assert plain["content"] == [{"type": "text", "text": "started subagent c1"}]
    # declared, without the hint: answered at once too (a declaring client waits for a task)
    unhinted = spawn(host, "c3", hint=False)
    assert unhinted["resultType"] == "complete"
    assert unhinted["content"] == [{"type": "text", "text": "started subagent c3"}]
    task_id = spawn(host, "c2")["taskId"]
    for method, params in (
        ("tasks/get", {"taskId": task_id}),
        ("tasks/cancel", {"taskId": task_id}),
        ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
    ):
        code, message, data = refused(host, method, declared=False, **params)
        assert (code, data) == (
            -32021,
            {**REQUIRED, "reason": "MISSING_REQUIRED_CLIENT_CAPABILITY"},
        )
        assert message == (
            f"{method} belongs to the MCP tasks extension ({EXTENSION}); declare it in the"
            " request's _meta client capabilities"
        )
    # a tool that is no delegation is answered as a plain call even when declared
    listed = host.call(*modern("tools/call", name="list_agents", arguments={}))
    assert listed["resultType"] == "complete" and "content" in listed


def test_the_extension_has_no_tasks_result_nor_tasks_list_and_2025_has_no_tasks_update(
    make_server,
):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    for method in ("tasks/result", "tasks/list"):
        params = {"taskId": task_id} if method == "tasks/result" else {}
        data = {"method": method, "reason": "METHOD_NOT_FOUND"}
        assert refused(host, method, **params) == (-32601, "Method not found", data)
    with pytest.raises(RpcError) as error:
        host.call(*on("tasks/update", taskId=task_id, inputResponses={}))
    assert (error.value.code, error.value.data["method"]) == (-32601, "tasks/update")
    assert host.call(*on("tasks/list"))["tasks"][0]["taskId"] == task_id  # 2025 still lists it


QUESTION = 'Background subagent c1 ("l") asks you a question and waits for your answer; its turn'
QUESTION += " goes on once you answer:\nWhich file: a.py or b.py?"
# The form a question's input request carries (and a 2025-11-25 client is sent): one free-text
# field (mcp/tasks.py).
ANSWER_FORM = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "title": "Answer", "description": "your answer, as free text"}
    },
    "required": ["answer"],
}
INPUT_REQUIRED = "subagent c1 asks a question and waits for your answer"


def ask(host: Any, options: Any = None) -> int:
    """c1 (host-run, in its turn) calls ask_parent; the request id of the call that waits."""
    params: dict[str, Any] = {"question": "Which file: a.py or b.py?", "caller": "c1"}
    if options is not None:
        params["options"] = options
    return host.start("ask_parent", params)


def test_a_task_whose_child_asks_is_input_required_and_tasks_update_answers_it(make_server):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    host.notification("turn/start", agent_id="c1")
    asking = ask(host, ["a.py", "b.py"])
    got = host.call(*modern("tasks/get", taskId=task_id))
    [key] = got["inputRequests"]
    assert (got["status"], got["statusMessage"]) == ("input_required", INPUT_REQUIRED)
    assert got["inputRequests"][key] == {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": QUESTION + '\nIt offers these answers: "a.py", "b.py".',
            "requestedSchema": ANSWER_FORM,
        },
    }
    # the same row in the 2025-11-25 shape: input_required (answered there by send_message)
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "input_required"
    assert host.call(*on("tasks/list"))["tasks"][0]["status"] == "input_required"
    # a key that is not outstanding is ignored; a malformed answer to the open one is -32602
    ignored = host.call(
        *modern("tasks/update", taskId=task_id, inputResponses={"k": {"action": "accept"}})
    )
    assert ignored == {"resultType": "complete"}
    assert refused(
        host, "tasks/update", taskId=task_id, inputResponses={key: {"action": "accept"}}
    )[:2] == (
        -32602,
        f'inputResponses["{key}"] must be an ElicitResult: action "accept" with content'
        ' {"answer": <text>}, or action "decline" or "cancel"',
    )
    answer = {"action": "accept", "content": {"answer": "b.py, and keep the tests"}}
    updated = host.call(*modern("tasks/update", taskId=task_id, inputResponses={key: answer}))
    assert updated == {"resultType": "complete"}
    result = host.response(asking)["result"]
    assert (result["answered"], result["answer"]) == (True, "b.py, and keep the tests")
    assert result["text"] == "the agent that started you answered: b.py, and keep the tests"
    again = host.call(*modern("tasks/get", taskId=task_id))
    assert (again["status"], again["statusMessage"]) == ("working", "subagent c1 is working")
    assert "inputRequests" not in again
    # the same key again: no longer outstanding, ignored
    assert host.call(*modern("tasks/update", taskId=task_id, inputResponses={key: answer})) == {
        "resultType": "complete"
    }


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_input_request_ends_the_question_unanswered(make_server, action):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    host.notification("turn/start", agent_id="c1")
    asking = ask(host)
    [key] = host.call(*modern("tasks/get", taskId=task_id))["inputRequests"]
    host.call(*modern("tasks/update", taskId=task_id, inputResponses={key: {"action": action}}))
    result = host.response(asking)["result"]
    assert (result["answered"], result["ended"]) == (False, "declined")
    assert result["text"] == (
        "no answer to your question: the agent that started you declined to answer; go on"
        " without the answer"
    )
    assert host.call(*modern("tasks/get", taskId=task_id))["status"] == "working"


def test_tasks_update_for_a_task_not_found_is_32602(make_server):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    answer = host.call(
        *modern("tasks/update", taskId=task_id, inputResponses={"k": {"action": "accept"}})
    )
    assert answer == {"resultType": "complete"}  # nothing outstanding: ignored
    assert host.call(*modern("tasks/get", taskId=task_id))["status"] == "working"
    assert refused(host, "tasks/update", taskId="no-such-task", inputResponses={})[:2] == (
        -32602,
        "task not found: no-such-task",
    )


def test_tasks_cancel_interrupts_the_childs_turn_and_acknowledges_even_once_it_ended(
    make_server,
):
    host = serve(make_server)
    task_id = spawn(host, "c1")["taskId"]
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    assert host.call(*modern("tasks/cancel", taskId=task_id)) == {"resultType": "complete"}
    host.notification("turn/interrupt", agent_id="c1", turn_id=turn)  # interrupt_agent's rules
    got = host.call(*modern("tasks/get", taskId=task_id))
    assert (got["status"], got["statusMessage"]) == ("cancelled", CANCELLED.format("c1"))
    assert "result" not in got and "error" not in got
    assert host.call(*modern("tasks/cancel", taskId=task_id)) == {"resultType": "complete"}
    assert refused(host, "tasks/cancel", taskId="no-such-task")[:2] == (
        -32602,
        "task not found: no-such-task",
    )


def test_a_task_outside_the_callers_subtree_is_not_found_like_one_that_does_not_exist(
    make_server,
):
    host = serve(make_server)
    host.open("other")
    theirs = spawn(host, "o1", caller="other")["taskId"]
    outside = refused(host, "tasks/get", taskId=theirs)
    missing = refused(host, "tasks/get", taskId="no-such-task")
    assert outside[0] == missing[0] == -32602
    assert outside[1] == f"task not found: {theirs}"
    assert outside[2] == missing[2]


def test_a_2025_client_and_a_2026_client_share_one_server_each_in_its_own_shape(make_server):
    host = serve(make_server)
    old = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")
    new = spawn(host, "c2")
    assert set(old) == {"task", "_meta"} and old["task"]["status"] == "working"
    assert new["resultType"] == "task" and "task" not in new
    # a 2025 task read through the extension, and an extension task through 2025-11-25
    assert host.call(*modern("tasks/get", taskId=old["task"]["taskId"]))["ttlMs"] is not None
    assert host.call(*on("tasks/get", taskId=new["taskId"]))["status"] == "working"


def test_subscriptions_listen_streams_notifications_tasks_for_the_callers_tasks_only(
    make_server,
):
    host = serve(make_server)
    host.open("other")
    mine = spawn(host, "c1")["taskId"]
    theirs = spawn(host, "o1", caller="other")["taskId"]
    asked = {"taskIds": [mine, theirs, "no-such-task"]}
    listen = host.start(*modern("subscriptions/listen", notifications=asked))
    ack = host.notification("notifications/subscriptions/acknowledged")
    assert ack == {
        "notifications": {"taskIds": [mine]},
        "_meta": {"io.modelcontextprotocol/subscriptionId": listen},
    }
    assert listen not in host.responses  # the stream stays open
    turn = host.notification("turn/start", agent_id="c1")["turn_id"]
    host.end_turn("c1", turn, output="all done")
    told = host.notification("notifications/tasks", taskId=mine)
    assert told.pop("_meta") == {"io.modelcontextprotocol/subscriptionId": listen}
    got = host.call(*modern("tasks/get", taskId=mine))
    assert told == {k: v for k, v in got.items() if k != "resultType"}
    assert (
        told["status"] == "completed"
        and told["result"]["content"][0]["text"].split("\n")[2] == "all done"
    )
    # a task ended before the listen is told at once; cancelling the request ends the stream
    again = host.start(*modern("subscriptions/listen", notifications={"taskIds": [mine]}))
    stamp = {"io.modelcontextprotocol/subscriptionId": again}
    assert host.notification("notifications/subscriptions/acknowledged", _meta=stamp)[
        "notifications"
    ] == {"taskIds": [mine]}
    assert host.notification("notifications/tasks", taskId=mine, _meta=stamp)["status"] == (
        "completed"
    )
    host.notify("notifications/cancelled", {"requestId": listen})
    assert host.response(listen)["error"]["code"] == -32800


def test_subscriptions_listen_for_tasks_needs_the_extension_and_the_stateless_era(make_server):
    host = serve(make_server)
    code, message, data = refused(
        host, "subscriptions/listen", declared=False, notifications={"taskIds": ["x"]}
    )
    assert (code, data["requiredCapabilities"]) == (-32021, REQUIRED["requiredCapabilities"])
    with pytest.raises(RpcError) as error:
        host.call(*on("subscriptions/listen", notifications={"taskIds": ["x"]}))
    assert error.value.code == -32601


def server_request(host: Any, method: str) -> dict[str, Any]:
    """The next request the server sent (filed by id among the responses), read until one comes."""
    while True:
        for key, frame in list(host.responses.items()):
            if isinstance(frame, dict) and frame.get("method") == method:
                del host.responses[key]
                return frame
        host.next_frame()


def test_a_2025_client_that_declared_elicitation_is_asked_a_tasks_input_and_answers_it(
    make_server,
):
    """2025-11-25: while the task's child asks, the task is `input_required` and the client
    gets `elicitation/create` tagged with the task (`_meta` related-task); its response answers
    the question; a question that ends unanswered withdraws it (`notifications/cancelled`)."""
    host = make_server(initialize=False, tools=served_tools(None, True)).host
    host.call(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "clientInfo": {"name": "t", "version": "0"},
            "capabilities": {"elicitation": {"form": {}}},
        },
    )
    host.notify("notifications/initialized")
    host.open("root")
    task_id = as_task(host, "spawn_agent", label="l", prompt="p", child_id="c1")["task"]["taskId"]
    host.notification("turn/start", agent_id="c1")
    asking = ask(host, ["a.py", "b.py"])
    request = server_request(host, "elicitation/create")
    elicit = request["params"]
    assert elicit["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    assert elicit["message"] == QUESTION + '\nIt offers these answers: "a.py", "b.py".'
    assert elicit["requestedSchema"] == ANSWER_FORM
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "input_required"
    [key] = host.call(*modern("tasks/get", taskId=task_id))["inputRequests"]  # the same key
    assert request["id"] == f"subagentd-task:{task_id}:{key}"
    answer = {"action": "accept", "content": {"answer": "b.py"}}
    host.send({"jsonrpc": "2.0", "id": request["id"], "result": answer})
    result = host.response(asking)["result"]
    assert (result["answered"], result["answer"]) == (True, "b.py")
    assert host.call(*on("tasks/get", taskId=task_id))["status"] == "working"
    # asked again, then interrupted: the elicitation is withdrawn
    ask(host)
    request = server_request(host, "elicitation/create")
    host.call("agents/interrupt", {"agent_id": "c1"})
    assert host.notification("notifications/cancelled") == {
        "requestId": request["id"],
        "reason": "the question ended",
    }
