"""The official MCP Python SDK client drives subagentd over stdio, in both protocol eras."""

import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.spawned import ServerProcess


@pytest.fixture
def prepared_db(tmp_path):
    """A database with root `root` and a ready continuable child `c1` labelled `worker`."""
    path = str(tmp_path / "mcp.db")
    proc = ServerProcess(db=path)
    try:
        proc.host.initialize()
        proc.host.open("root")
        child = proc.host.spawn("root", "c1", label="worker")
        proc.host.end_turn("c1", child["turn_id"], "completed", "done")
    finally:
        assert proc.stop() == 0
    return path


def run_client(db, mode, *extra):
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "subagentd", "--db", db, *extra]
    )

    async def session():
        async with Client(params, mode=mode) as client:
            tools = await client.list_tools()
            listing = await client.call_tool("list_agents", {"scope": "descendants"})
            sent = await client.call_tool(
                "send_message",
                {"subagent_id": "c1", "message": "more"},
                meta={"subagentd/caller": "root"},
            )
            refused = await client.call_tool(
                "send_message", {"subagent_id": "nobody", "message": "hi"}
            )
            invalid = await client.call_tool("interrupt_agent", {"agent_id": 7})
            return tools, listing, sent, refused, invalid

    return anyio.run(session)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_official_python_client_lists_and_calls_tools(prepared_db, mode):
    tools, listing, sent, refused, invalid = run_client(prepared_db, mode, "--caller", "root")
    assert [tool.name for tool in tools.tools] == ["send_message", "interrupt_agent", "list_agents"]
    assert listing.is_error is False
    assert listing.content[0].text == "c1 [ready] parent=root depth=1 — worker"
    assert listing.structured_content == {
        "agents": [
            {
                "kind": "child",
                "id": "c1",
                "label": "worker",
                "status": "ready",
                "parent": "root",
                "depth": 1,
            }
        ]
    }
    assert sent.is_error is False
    assert sent.content[0].text == "message queued as the next turn for subagent c1"
    assert set(sent.structured_content) == {"message_id"}
    assert refused.is_error is True
    assert (
        refused.content[0].text == 'Error: message not delivered: subagent "nobody" is unavailable'
    )
    assert invalid.is_error is True
    assert invalid.content[0].text == 'Error: invalid arguments: "agent_id" must be a string'


def test_caller_from_meta_without_caller_option(prepared_db):
    tools, listing, sent, refused, invalid = run_client(prepared_db, "auto")
    assert listing.is_error is True
    assert (
        listing.content[0].text
        == "Error: list_agents requires a calling agent (caller was not given)"
    )
    # this one carried _meta["subagentd/caller"]: the caller is known, but `root` is not live here
    assert sent.is_error is True
    assert sent.content[0].text == (
        'Error: message not delivered: subagent "c1" delivery requires the exact live parent agent'
    )


def test_with_caller_option_a_meta_caller_outside_its_tree_is_a_tool_error(prepared_db):
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "subagentd", "--db", prepared_db, "--caller", "root"]
    )

    async def session():
        async with Client(params, mode="auto") as client:
            outside = await client.call_tool(
                "list_agents", {}, meta={"subagentd/caller": "elsewhere"}
            )
            ready_child = await client.call_tool("list_agents", {}, meta={"subagentd/caller": "c1"})
            own = await client.call_tool("list_agents", {}, meta={"subagentd/caller": "root"})
            return outside, ready_child, own

    outside, ready_child, own = anyio.run(session)
    assert outside.is_error is True
    assert outside.content[0].text == (
        'Error: agent "elsewhere" is not "root" or a live agent below it;'
        " this connection acts only for that tree (--caller)"
    )
    assert ready_child.is_error is True  # c1 is below root but not live
    assert own.is_error is False and own.content[0].text == "c1 [ready] — worker"
