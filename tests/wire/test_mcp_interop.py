"""The official MCP Python SDK client drives subagentd over stdio, in both protocol eras."""

import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from tests.spawned import ServerProcess


def first_text(result: CallToolResult) -> str:
    """The text of a tool result's first block (subagentd answers with a text block)."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


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
    assert [tool.name for tool in tools.tools] == [
        "send_message",
        "interrupt_agent",
        "list_agents",
        "wait_agents",
    ]
    assert listing.is_error is False
    assert listing.content[0].text == "c1 [ready, last turn completed] parent=root depth=1 — worker"
    assert listing.structured_content == {
        "agents": [
            {
                "kind": "child",
                "id": "c1",
                "label": "worker",
                "status": "ready",
                "ended": "completed",
                "parent": "root",
                "depth": 1,
            }
        ],
        "text": "c1 [ready, last turn completed] parent=root depth=1 — worker",
    }
    assert sent.is_error is False
    assert sent.content[0].text == "message queued as the next turn for subagent c1"
    assert set(sent.structured_content) == {"message_id", "text"}
    assert sent.structured_content["text"] == sent.content[0].text
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
    assert (
        own.is_error is False and own.content[0].text == "c1 [ready, last turn completed] — worker"
    )


def test_official_python_client_spawns_waits_with_progress_and_collects_the_notice(tmp_path):
    """No turn runner: the child runs no turn, so the first wait times out; interrupted, the
    child's turn is force-ended after --interrupt-grace and its notice is what the next wait gets."""
    db = str(tmp_path / "spawn.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "subagentd", "--db", db, "--caller", "root", "--spawn-tool", "on"]
        + ["--interrupt-grace", "0.2"],
    )
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def session():
        async with Client(params, mode="auto") as client:
            tools = await client.list_tools()
            spawned = await client.call_tool(
                "spawn_agent", {"label": "worker", "prompt": "work", "child_id": "c1"}
            )
            timed_out = await client.call_tool(
                "wait_agents", {"timeout_ms": 300}, progress_callback=on_progress
            )
            await client.call_tool("interrupt_agent", {"agent_id": "c1"})
            settled = await client.call_tool(
                "wait_agents", {"agent_ids": ["c1"]}, progress_callback=on_progress
            )
            listing = await client.call_tool("list_agents", {})
            return tools, spawned, timed_out, settled, listing

    tools, spawned, timed_out, settled, listing = anyio.run(session)
    assert [tool.name for tool in tools.tools] == [
        "send_message",
        "interrupt_agent",
        "list_agents",
        "spawn_agent",
        "wait_agents",
    ]
    assert spawned.is_error is False
    assert spawned.content[0].text == "started subagent c1"
    assert spawned.structured_content == {"child_id": "c1", "text": "started subagent c1"}
    assert timed_out.is_error is False
    assert [c.text for c in timed_out.content] == [
        "wait_agents timed out after 300 ms; still working: c1; call wait_agents again to keep waiting"
    ]
    assert timed_out.structured_content == {
        "agents": [{"agent_id": "c1", "status": "running"}],
        "timed_out": True,
        "still_working": ["c1"],
        "text": timed_out.content[0].text,
    }
    assert (0, 300, "waiting for c1") in progress  # the first wait's first notification
    assert settled.is_error is False
    assert [c.text for c in settled.content] == [  # one block: nothing lost to a first-only client
        "Background subagent c1 was stopped before it finished.\n"
        "It left no closing message.\n"
        "none of the subagents waited for is still working"
    ]
    assert settled.structured_content == {
        "agents": [{"agent_id": "c1", "status": "ready", "reason": "aborted"}],
        "text": "\n".join(c.text for c in settled.content),
    }
    assert listing.content[0].text == "c1 [ready, last turn was stopped] — worker"


def test_the_mcp_2_client_logs_no_warning_over_a_delegation_session(tmp_path, caplog):
    """The official SDK (2.x) client: spawn, wait, follow up and close — its loggers say
    nothing (no frame it does not know, none after it closed)."""
    import logging
    import shlex
    from pathlib import Path

    runner = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
    db = str(tmp_path / "sdk.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "subagentd", "--db", db, "--caller", "root", "--runner", runner],
    )
    said: list[str] = []

    async def session() -> None:
        async with Client(params) as client:
            spawn = {"label": "w", "prompt": "work", "child_id": "c1"}
            said.append(first_text(await client.call_tool("spawn_agent", spawn)))
            waited = await client.call_tool("wait_agents", {"timeout_ms": 50_000})
            said.append(first_text(waited))
            follow = {"subagent_id": "c1", "message": "more"}
            said.append(first_text(await client.call_tool("send_message", follow)))

    with caplog.at_level(logging.DEBUG, logger="mcp"):
        anyio.run(session)
    assert said == [
        "started subagent c1",
        "Background subagent c1 finished and will do no further work unless you send it more.\n"
        "Its closing message:\ndone: work\nnone of the subagents waited for is still working",
        "message queued as the next turn for subagent c1",
    ]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
