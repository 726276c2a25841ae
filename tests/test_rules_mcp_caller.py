"""What an MCP client may see and do (PROTOCOL.md section 5): the `--caller` root's input is held,
`tool_filter` and `--tools` shape tools/list and tools/call, `report` only for live reporters."""

import pytest

from subagentd.schema.codes import Code
from tests.host import RpcError, ServerProcess

ALL_TOOLS = ["send_message", "interrupt_agent", "list_agents", "report"]
CRASH_NOTICE = ["Background subagent c1 failed before it finished.", "It left no closing message."]


def tool_names(host, caller: str | None = None) -> list[str]:
    params = {"_meta": {"subagentd/caller": caller}} if caller else {}
    return [tool["name"] for tool in host.call("tools/list", params)["tools"]]


def call(host, name: str, caller: str | None = None, **arguments) -> dict:
    params: dict = {"name": name, "arguments": arguments}
    if caller:
        params["_meta"] = {"subagentd/caller": caller}
    return host.call("tools/call", params)


def crashed_with_a_running_child(path: str) -> None:
    """root is live with c1 running; the process is killed, so c1's turn is left open."""
    proc = ServerProcess(db=path)
    try:
        proc.host.initialize()
        proc.host.open("root")
        proc.host.spawn("root", "c1")
        proc.host.call("ping")  # everything above is committed
        proc.proc.kill()
        proc.wait()
    finally:
        proc.stop()


def test_the_caller_root_holds_queued_input_and_no_turn_starts_unannounced(tmp_path):
    path = str(tmp_path / "caller.db")
    crashed_with_a_running_child(path)
    proc = ServerProcess("--caller", "root", db=path)
    try:
        host = proc.host
        host.initialize()
        info = host.call("agents/get", {"agent_id": "root"})
        assert (info["status"], info["queued"], info["parked"]) == ("idle", 1, 0)
        followup = host.call("agents/followup", {"agent_id": "root", "message": "later"})
        assert host.call("messages/get", followup)["state"] == "queued"
        assert call(host, "list_agents")["content"] == [
            {"type": "text", "text": "c1 [ready] — task"}
        ]
        host.settle_quietly()
        proc.close_stdin()
        assert proc.wait() == 0
        with pytest.raises(EOFError):  # read every frame it wrote before exiting
            while True:
                host.read_any()
        assert [n["method"] for n in host.drain_notifications()] == []  # no turn/start, no stop
    finally:
        proc.stop()
    again = ServerProcess(db=path)  # a host connection opens the root and runs its input
    try:
        again.host.initialize()
        again.host.open("root")
        first = again.host.notification("turn/start", agent_id="root")
        assert [b["text"] for m in first["messages"] for b in m["content"]] == CRASH_NOTICE
        again.host.end_turn("root", first["turn_id"])
        second = again.host.notification("turn/start", agent_id="root")
        assert second["messages"][0]["content"] == [{"type": "text", "text": "later"}]
    finally:
        again.stop()


@pytest.mark.parametrize(
    ("tool_filter", "offered"),
    [
        ({"allow": []}, ["report"]),
        ({"allow": ["list_agents"]}, ["list_agents", "report"]),
        ({"deny": ["send_message", "report"]}, ["interrupt_agent", "list_agents", "report"]),
        ({"allow": ["send_message", "nonsense"], "deny": ["send_message"]}, ["report"]),
        ({}, ALL_TOOLS),
    ],
)
def test_a_childs_tool_filter_shapes_its_tools_list_and_report_survives(host, tool_filter, offered):
    host.open("root")
    host.spawn("root", "c1", tool_filter=tool_filter)
    assert tool_names(host, "c1") == offered
    assert tool_names(host, "root") == ALL_TOOLS[:3]


def test_a_filtered_tool_called_anyway_is_a_tool_error_naming_it(host):
    host.open("root")
    host.spawn("root", "c1", tool_filter={"allow": []})
    host.spawn("c1", "g1")
    for name, arguments in [
        ("list_agents", {}),
        ("send_message", {"subagent_id": "g1", "message": "hi"}),
        ("interrupt_agent", {"agent_id": "g1"}),
    ]:
        result = call(host, name, "c1", **arguments)
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
    assert host.call("agents/get", {"agent_id": "g1"})["queued"] == 0  # nothing was sent
    assert call(host, "report", "c1", output="still reporting")["isError"] is False
    # the same filter binds the direct methods, and a resumed child keeps it
    with pytest.raises(RpcError) as refused:
        host.tool("list_agents", "c1")
    assert (refused.value.code, refused.value.message) == (
        Code.UNAUTHORIZED,
        'tool "list_agents" is not available to agent "c1": its tool_filter excludes it',
    )


def test_a_cold_resumed_child_keeps_its_tool_filter(host):
    host.open("root")
    c1 = host.spawn("root", "c1", tool_filter={"deny": ["list_agents"]})
    host.end_turn("c1", c1["turn_id"])
    host.notification("agent/settled", agent_id="c1")
    host.tool("send_message", "root", subagent_id="c1", message="again")
    host.notification("turn/start", agent_id="c1")
    assert tool_names(host, "c1") == ["send_message", "interrupt_agent", "report"]


def test_report_is_not_offered_to_a_child_being_disposed(host):
    host.open("root")
    host.spawn("root", "c1")
    assert tool_names(host, "c1") == ALL_TOOLS
    closing = host.start("agents/close", {"agent_id": "root"})
    host.notification("turn/interrupt", agent_id="c1")
    assert tool_names(host, "c1") == ALL_TOOLS[:3]
    result = call(host, "report", "c1", output="too late")
    assert result["content"] == [
        {
            "type": "text",
            "text": 'Error: subagent "c1" activation is being disposed; the report was not'
            " delivered",
        }
    ]
    assert closing not in host.responses


def test_the_served_tool_set_leaves_out_tools(spawn_process):
    proc = spawn_process("--tools", "send_message,interrupt_agent,report", "--caller", "root")
    host = proc.host
    host.initialize()
    host.spawn("root", "c1")
    assert tool_names(host) == ["send_message", "interrupt_agent"]
    assert tool_names(host, "c1") == ["send_message", "interrupt_agent", "report"]
    response = host.response(host.start("tools/call", {"name": "list_agents", "arguments": {}}))
    assert response["error"]["code"] == -32602
    assert response["error"]["message"] == "Unknown tool: list_agents"
    assert call(host, "interrupt_agent", agent_id="c1")["isError"] is False


def test_an_unknown_name_in_the_served_tool_set_is_refused_at_start(tmp_path):
    proc = ServerProcess("--tools", "send_message,spawn_agent")
    try:
        assert proc.wait() == 2
        assert "unknown tool(s) spawn_agent" in proc.stderr_text()
    finally:
        proc.stop()
