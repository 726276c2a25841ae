"""What an MCP client may see and do (PROTOCOL.md section 5): the `--caller` root's input is held,
`tool_filter` and `--tools` shape tools/list and tools/call, `report` only for live reporters."""

import json

import pytest

from subagentd.schema.codes import Code
from subagentd.storage.database import SqliteStore
from tests.spawned import RpcError, ServerProcess

ALL_TOOLS = [
    "send_message",
    "interrupt_agent",
    "list_agents",
    "report",
    "wait_agents",
    "ask_parent",
]
NOT_REPORT = ["send_message", "interrupt_agent", "list_agents", "wait_agents"]
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


def inbox_of(path: str, agent_id: str) -> list[tuple[str, str]]:
    """(state, first text) of an agent's inbox rows, read from the database after the process."""
    store = SqliteStore(path)
    try:
        rows = store.conn.execute(
            "SELECT state, content FROM inbox WHERE session_id = ? ORDER BY position", (agent_id,)
        ).fetchall()
    finally:
        store.close()
    return [(state, json.loads(content)[0]["text"]) for state, content in rows]


def test_the_caller_root_holds_queued_input_and_no_turn_starts_unannounced(tmp_path):
    path = str(tmp_path / "caller.db")
    crashed_with_a_running_child(path)
    assert inbox_of(path, "root") == []  # the crash is recorded at the next start
    proc = ServerProcess("--caller", "root", db=path)
    try:
        host = proc.host
        host.initialize()
        assert call(host, "list_agents")["content"] == [
            {"type": "text", "text": "c1 [ready, last turn failed] — task"}
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
    assert inbox_of(path, "root") == [("queued", CRASH_NOTICE[0])]  # held, not used up
    again = ServerProcess(db=path)  # a host connection opens the root and runs its input
    try:
        again.host.initialize()
        again.host.open("root")
        first = again.host.notification("turn/start", agent_id="root")
        assert [b["text"] for m in first["messages"] for b in m["content"]] == CRASH_NOTICE
    finally:
        again.stop()


@pytest.mark.parametrize(
    ("tool_filter", "offered"),
    [
        ({"allow": []}, ["report"]),
        ({"allow": ["list_agents"]}, ["list_agents", "report"]),
        (
            {"deny": ["send_message", "report"]},
            ["interrupt_agent", "list_agents", "report", "wait_agents", "ask_parent"],
        ),
        ({"allow": ["send_message", "nonsense"], "deny": ["send_message"]}, ["report"]),
        ({}, ALL_TOOLS),
    ],
)
def test_a_childs_tool_filter_shapes_its_tools_list_and_report_survives(host, tool_filter, offered):
    host.open("root")
    host.spawn("root", "c1", tool_filter=tool_filter)
    assert tool_names(host, "c1") == offered
    assert tool_names(host, "root") == NOT_REPORT


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
    assert tool_names(host, "c1") == [
        "send_message",
        "interrupt_agent",
        "report",
        "wait_agents",
        "ask_parent",
    ]


def test_report_is_not_offered_to_a_child_being_disposed(host):
    host.open("root")
    host.spawn("root", "c1")
    assert tool_names(host, "c1") == ALL_TOOLS
    closing = host.start("agents/close", {"agent_id": "root"})
    host.notification("turn/interrupt", agent_id="c1")
    assert tool_names(host, "c1") == NOT_REPORT
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
    proc = spawn_process("--tools", "send_message,interrupt_agent,report")
    host = proc.host
    host.initialize()
    host.open("root")
    host.spawn("root", "c1")
    assert tool_names(host, "root") == ["send_message", "interrupt_agent"]
    assert tool_names(host, "c1") == ["send_message", "interrupt_agent", "report"]
    params = {"name": "list_agents", "arguments": {}, "_meta": {"subagentd/caller": "root"}}
    response = host.response(host.start("tools/call", params))
    assert response["error"]["code"] == -32602
    assert response["error"]["message"] == "Unknown tool: list_agents"
    assert call(host, "interrupt_agent", "root", agent_id="c1")["isError"] is False


def test_an_unknown_name_in_the_served_tool_set_is_refused_at_start(tmp_path):
    proc = ServerProcess("--tools", "send_message,spawn_agents")
    try:
        assert proc.wait() == 2
        assert "unknown tool(s) spawn_agents" in proc.stderr_text()
    finally:
        proc.stop()
