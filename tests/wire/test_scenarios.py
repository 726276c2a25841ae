"""Scenarios over the real server (pipes, JSON-RPC): the host API, both tool entry points, errors."""

import pytest

from subagentd.schema.codes import Code
from tests.spawned import RpcError


def rpc_error(host, method, params):
    with pytest.raises(RpcError) as caught:
        host.call(method, params)
    return caught.value


def test_direct_tool_failure_is_a_jsonrpc_error_with_reason_and_text(host):
    host.open("root")
    error = rpc_error(
        host, "send_message", {"caller": "root", "subagent_id": "nobody", "message": "hi"}
    )
    assert error.code == Code.NOT_RESUMABLE
    assert error.message == 'message not delivered: subagent "nobody" is unavailable'
    assert error.data == {
        "reason": "UNKNOWN_AGENT",  # the host is told the target does not exist; the model's
        "text": 'Error: message not delivered: subagent "nobody" is unavailable',  # text stays
    }


def test_direct_tool_argument_violations_use_the_exact_texts(host):
    error = rpc_error(host, "send_message", {"caller": "root", "subagent_id": 5})
    assert error.code == Code.INVALID_PARAMS
    assert (
        error.message
        == 'invalid arguments: "subagent_id" must be a string; missing required property "message"'
    )
    assert error.data["text"] == "Error: " + error.message
    error = rpc_error(host, "list_agents", {"caller": "root", "scope": "everything"})
    assert error.message == 'invalid arguments: "scope" must be one of ["children","descendants"]'


def test_missing_caller_is_refused_after_argument_validation(host):
    error = rpc_error(host, "list_agents", {})
    assert error.message == "list_agents requires a calling agent (caller was not given)"
    error = rpc_error(host, "interrupt_agent", {"caller": None, "agent_id": "x"})
    assert error.message == "interrupt_agent requires a calling agent (caller was not given)"


def test_tools_call_returns_call_tool_results_with_meta_caller(host):
    host.open("root")
    host.spawn("root", "c1", label="worker")
    result = host.call(
        "tools/call",
        {
            "name": "list_agents",
            "arguments": {"scope": "children"},
            "_meta": {"subagentd/caller": "root"},
        },
    )
    assert result == {
        "content": [{"type": "text", "text": "c1 [running] — worker"}],
        "structuredContent": {
            "agents": [{"kind": "child", "id": "c1", "label": "worker", "status": "running"}],
            "text": "c1 [running] — worker",
        },
        "isError": False,
    }
    failure = host.call(
        "tools/call",
        {
            "name": "send_message",
            "arguments": {"subagent_id": "c1"},
            "_meta": {"subagentd/caller": "root"},
        },
    )
    assert failure == {
        "content": [
            {
                "type": "text",
                "text": 'Error: invalid arguments: missing required property "message"',
            }
        ],
        "isError": True,
    }
    refused = host.call(
        "tools/call",
        {
            "name": "interrupt_agent",
            "arguments": {"agent_id": "c1"},
            "_meta": {"subagentd/caller": "ghost"},
        },
    )
    assert refused["isError"] is True
    assert (
        refused["content"][0]["text"]
        == 'Error: interrupting "c1" requires the exact live ancestor agent'
    )


def test_tools_call_arguments_must_be_an_object(host):
    result = host.call(
        "tools/call", {"name": "list_agents", "arguments": [1], "_meta": {"subagentd/caller": "r"}}
    )
    assert result["content"][0]["text"] == 'Error: invalid arguments: "arguments" must be an object'
    assert result["isError"] is True


def test_tools_call_unknown_tool_is_invalid_params(host):
    host.open("r")
    error = rpc_error(
        host, "tools/call", {"name": "rm_rf", "arguments": {}, "_meta": {"subagentd/caller": "r"}}
    )
    assert (error.code, error.message, error.data) == (
        Code.INVALID_PARAMS,
        "Unknown tool: rm_rf",
        {"reason": "INVALID_PARAMS"},
    )
    # the connection keeps working, and a known tool with the same caller still runs
    listed = host.call(
        "tools/call", {"name": "list_agents", "arguments": {}, "_meta": {"subagentd/caller": "r"}}
    )
    assert (listed["isError"], listed["content"]) == (
        False,
        [{"type": "text", "text": "(no subagents)"}],
    )


def test_tools_call_without_any_caller_is_an_error_result(host):
    result = host.call("tools/call", {"name": "list_agents", "arguments": {}})
    assert result["isError"] is True
    assert (
        result["content"][0]["text"]
        == "Error: list_agents requires a calling agent (caller was not given)"
    )


def test_caller_option_is_the_default_caller_for_tools_call(make_server):
    srv = make_server(caller="root")  # opened at start-up, like `subagentd --caller root`
    result = srv.host.call("tools/call", {"name": "list_agents", "arguments": {}})
    assert result["content"][0]["text"] == "(no subagents)"
    assert result["isError"] is False


def test_report_is_listed_only_for_live_continuable_children(host):
    host.open("root")
    host.spawn("root", "c1")
    host.spawn("root", "once", mode="one-shot")

    def names(caller):
        meta = {"subagentd/caller": caller} if caller else {}
        return [t["name"] for t in host.call("tools/list", {"_meta": meta})["tools"]]

    others = ["send_message", "interrupt_agent", "list_agents", "wait_agents"]
    assert names("root") == others
    assert names("once") == [*others, "ask_parent"]  # a one-shot child can ask, not report
    assert names(None) == others
    assert names("c1") == [
        "send_message",
        "interrupt_agent",
        "list_agents",
        "report",
        "wait_agents",
        "ask_parent",
    ]


def test_tool_schemas_are_top_level_objects(host):
    for tool in host.call("tools/list", {})["tools"]:
        assert tool["inputSchema"]["type"] == "object"
        assert tool["outputSchema"]["type"] == "object"
        assert "$ref" not in tool["inputSchema"]
        assert tool["description"]


def test_idempotency_key_returns_the_original_result_and_conflicts_on_other_arguments(host):
    host.open("root")
    host.spawn("root", "c1")
    params = {"caller": "root", "subagent_id": "c1", "message": "once", "idempotency_key": "k1"}
    first = host.call("send_message", params)
    again = host.call("send_message", params)
    assert again == first
    assert host.call("agents/get", {"agent_id": "c1"})["queued"] == 1
    error = rpc_error(host, "send_message", {**params, "message": "different"})
    assert error.code == Code.IDEMPOTENCY_CONFLICT
    spawn = {"caller": "root", "label": "x", "prompt": "p", "idempotency_key": "s1"}
    assert host.call("agents/spawn", spawn) == host.call("agents/spawn", spawn)


def test_message_states_are_observable(host):
    host.open("root")
    child = host.spawn("root", "c1")
    first = host.call("messages/get", {"message_id": child["message_id"]})
    assert first == {
        "message_id": child["message_id"],
        "agent_id": "c1",
        "state": "claimed",
        "turn_id": child["turn_id"],
        "source": {"kind": "coordinator", "form": "spawn", "sender_session_id": "root"},
    }
    queued = host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "next"})[
        "message_id"
    ]
    assert host.call("messages/get", {"message_id": queued})["state"] == "queued"
    host.call("interrupt_agent", {"caller": "root", "agent_id": "c1"})
    assert host.call("messages/get", {"message_id": queued})["state"] == "parked"


def test_host_api_errors_name_the_problem(host):
    assert rpc_error(host, "agents/get", {"agent_id": "nobody"}).code == Code.UNKNOWN_AGENT
    host.open("root")
    assert rpc_error(host, "agents/open", {"agent_id": "root"}).code == Code.INVALID_STATE
    assert (
        rpc_error(
            host, "turns/end", {"agent_id": "root", "turn_id": "t", "reason": "completed"}
        ).code
        == Code.INVALID_STATE
    )
    turn = host.call("turns/begin", {"agent_id": "root", "messages": ["hi"]})["turn_id"]
    assert rpc_error(host, "turns/begin", {"agent_id": "root"}).code == Code.INVALID_STATE
    host.end_turn("root", turn)
    error = rpc_error(
        host, "agents/spawn", {"caller": "root", "label": "x", "prompt": "p", "child_id": "root"}
    )
    assert error.code == Code.DUPLICATE_CHILD
    error = rpc_error(host, "turns/end", {"agent_id": "root", "turn_id": turn, "reason": "bogus"})
    assert error.code == Code.INVALID_PARAMS


def test_spawn_deeper_than_max_depth_is_refused(make_server):
    host = make_server(max_depth=2).host
    host.open("root")
    host.spawn("root", "d1")
    host.spawn("d1", "d2")
    error = rpc_error(host, "agents/spawn", {"caller": "d2", "label": "x", "prompt": "p"})
    assert error.code == Code.DEPTH_EXCEEDED


def test_transcript_append_and_read_with_paging(host):
    host.open("root")
    seqs = [
        host.call(
            "transcript/append",
            {"agent_id": "root", "events": [{"type": "assistant", "data": {"n": i}}]},
        )["seq"]
        for i in range(5)
    ]
    assert seqs == sorted(set(seqs))  # one new seq per append, ascending
    whole = host.call("transcript/read", {"agent_id": "root"})
    assert "next" not in whole  # not a full page
    assert [e["data"]["n"] for e in whole["events"] if e["type"] == "assistant"] == [0, 1, 2, 3, 4]
    assert [e["seq"] for e in whole["events"] if e["type"] == "assistant"] == seqs
    # page through two events at a time: every event exactly once, in order, nothing skipped
    paged, after, pages = [], None, 0
    while True:
        params = {"agent_id": "root", "limit": 2}
        if after is not None:
            params["after"] = after
        page = host.call("transcript/read", params)
        pages += 1
        assert all(e["seq"] > (after or 0) for e in page["events"])
        paged += page["events"]
        if "next" not in page:
            assert len(page["events"]) < 2  # only a full page carries `next`
            break
        assert len(page["events"]) == 2
        assert page["next"] == page["events"][-1]["seq"]  # `next` is the page's last seq
        after = page["next"]
    assert paged == whole["events"]
    assert len({e["seq"] for e in paged}) == len(paged)  # no duplicates across pages
    assert pages == len(whole["events"]) // 2 + 1  # the page after the last full one may be empty


def test_agents_list_paginates_and_includes_one_shot_children(host):
    host.open("root")
    for i in range(5):
        host.spawn("root", f"c{i}", mode="one-shot" if i == 2 else "continuable")
    first = host.call("agents/list", {"root_id": "root", "limit": 2})
    second = host.call(
        "agents/list", {"root_id": "root", "limit": 2, "cursor": first["next_cursor"]}
    )
    third = host.call(
        "agents/list", {"root_id": "root", "limit": 2, "cursor": second["next_cursor"]}
    )
    ids = [a["id"] for a in first["agents"] + second["agents"] + third["agents"]]
    assert ids == ["c0", "c1", "c2", "c3", "c4"]
    assert "next_cursor" not in third
    assert [a["mode"] for a in first["agents"] + second["agents"] + third["agents"]].count(
        "one-shot"
    ) == 1


def test_status_events_when_the_host_opts_in(make_server):
    host = make_server(initialize=False).host
    host.initialize(statusEvents=True)
    host.open("root")
    host.spawn("root", "c1")
    assert host.notification("agent/status", agent_id="c1") == {"agent_id": "c1", "status": "idle"}
    assert host.notification("agent/status", agent_id="c1") == {
        "agent_id": "c1",
        "status": "running",
    }


def test_multi_level_tree_plays_out_over_the_wire(host):
    """root -> c1 -> g1; follow-up queued behind a turn; interrupt parks; report; list; settle; close."""
    host.open("root", label="coordinator")
    c1 = host.spawn("root", "c1", label="researcher")
    host.spawn("root", "c2", label="writer")
    g1 = host.spawn("c1", "g1", label="leaf")
    assert g1["text"] == "started subagent g1"

    host.call("send_message", {"caller": "root", "subagent_id": "c2", "message": "queued behind"})
    host.call("send_message", {"caller": "root", "subagent_id": "c2", "message": "and another"})
    res = host.call("interrupt_agent", {"caller": "root", "agent_id": "c2"})
    assert res == {
        "text": "interrupt requested for agent c2",
        "accepted": True,
        "previous_status": "running",
    }
    stop = host.notification("turn/interrupt", agent_id="c2")
    assert stop["cause"] == {"kind": "parent", "by": "root"}
    host.end_turn("c2", stop["turn_id"], "aborted")
    assert host.call("agents/get", {"agent_id": "c2"})["parked"] == 2

    report = host.call("report", {"caller": "g1", "output": "found it"})
    assert report["text"].startswith("report accepted by the agent that started you as message ")
    host.end_turn("c1", c1["turn_id"], "completed", "waiting for g1")
    c1_turn = host.notification("turn/start", agent_id="c1")
    assert [b["text"] for b in c1_turn["messages"][0]["content"]] == [
        "Background subagent g1 reported:",
        "found it",
    ]

    listing = host.call("list_agents", {"caller": "root", "scope": "descendants"})
    assert listing["text"] == (
        "c1 [running] parent=root depth=1 — researcher\n"
        "g1 [running] parent=c1 depth=2 — leaf\n"
        "c2 [idle, 2 parked] parent=root depth=1 — writer"
    )
    host.end_turn("g1", g1["turn_id"], "completed", "leaf done")
    assert host.notification("agent/settled", agent_id="g1") == {
        "agent_id": "g1",
        "reason": "completed",
    }
    host.end_turn("c1", c1_turn["turn_id"], "completed")
    notice_turn = host.notification("turn/start", agent_id="c1")
    assert notice_turn["messages"][0]["source"]["kind"] == "subagent-settled"
    host.end_turn("c1", notice_turn["turn_id"], "completed", "summary for root")
    assert host.notification("agent/settled", agent_id="c1") == {
        "agent_id": "c1",
        "reason": "completed",
    }

    transcript = host.call("transcript/read", {"agent_id": "c1"})["events"]
    kinds = [e["type"] for e in transcript]
    assert kinds[:2] == ["descriptor", "activated"]
    assert kinds.count("turn_start") == 3 and kinds.count("turn_end") == 3

    close_id = host.start("agents/close", {"agent_id": "root"})
    stop_root = host.notification("turn/interrupt", agent_id="root")
    host.end_turn("root", stop_root["turn_id"], "aborted")
    assert host.response(close_id)["result"] == {}
    assert host.call("agents/get", {"agent_id": "root"})["status"] == "ready"
    assert host.call("agents/get", {"agent_id": "c2"})["status"] == "ready"


def test_a_queued_message_can_be_cancelled_before_any_turn_claims_it(host):
    host.open("root")
    host.spawn("root", "c1")
    queued = host.call(
        "send_message", {"caller": "root", "subagent_id": "c1", "message": "never mind"}
    )
    cancelled = host.call("messages/cancel", {"message_id": queued["message_id"]})
    assert cancelled["state"] == "cancelled"
    assert host.call("agents/get", {"agent_id": "c1"})["queued"] == 0
    error = rpc_error(host, "messages/cancel", {"message_id": queued["message_id"]})
    assert error.code == Code.INVALID_STATE
    claimed = host.call("agents/list", {"root_id": "root"})  # c1 still runs its first turn
    assert claimed["agents"][0]["status"] == "running"


def test_cancelling_the_last_queued_message_of_an_idle_child_lets_it_settle(host):
    host.open("root")
    child = host.spawn("root", "c1")
    queued = host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "later"})
    host.call("interrupt_agent", {"caller": "root", "agent_id": "c1"})
    host.end_turn("c1", child["turn_id"], "aborted")
    assert host.call("agents/get", {"agent_id": "c1"})["status"] == "idle"  # holds a parked message
    host.call("messages/cancel", {"message_id": queued["message_id"]})
    assert host.notification("agent/settled", agent_id="c1") == {
        "agent_id": "c1",
        "reason": "aborted",
    }


def test_report_rate_turns_extra_wakeups_into_quiet_deliveries(make_server):
    srv = make_server()
    srv.service.settings.report_rate = 1
    host = srv.host
    host.open("root")
    first = host.spawn("root", "c1")
    host.spawn("c1", "g1")
    host.end_turn("c1", first["turn_id"])
    host.call("report", {"caller": "g1", "output": "one"})
    woken = host.notification("turn/start", agent_id="c1")
    assert woken["messages"][0]["content"][1]["text"] == "one"
    second = host.call("report", {"caller": "g1", "output": "two"})
    inject = host.notification("agent/inject", agent_id="c1")
    assert inject["messages"][0]["message_id"] == second["message_id"]


def test_no_op_interrupts_report_ready_or_nothing_over_the_wire(host):
    host.open("root")
    child = host.spawn("root", "c1")
    host.end_turn("c1", child["turn_id"])  # c1 settles: ready
    host.notification("agent/settled", agent_id="c1")
    ready = host.call("interrupt_agent", {"caller": "root", "agent_id": "c1"})
    assert ready == {
        "text": "interrupt requested for agent c1",
        "accepted": True,
        "previous_status": "ready",
    }
    unknown = host.call("interrupt_agent", {"caller": "root", "agent_id": "nobody"})
    assert unknown == {"text": "interrupt requested for agent nobody", "accepted": True}
    assert host.call("agents/get", {"agent_id": "c1"})["status"] == "ready"  # not resumed
