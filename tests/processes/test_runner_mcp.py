"""An MCP client alone delegates work: the official MCP Python SDK client drives
`subagentd --caller root --runner COMMAND` (the scripted runner, tests/scripts/runner.py) over
stdio — spawn two children, wait, follow up, interrupt one, list."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
TIMEOUT = 60


async def wait_for_line(path: Path, line: str) -> None:
    """Until a runner process wrote `line` to `path` (bounded)."""
    with anyio.fail_after(TIMEOUT):
        while not (path.exists() and line in path.read_text().splitlines()):
            await anyio.sleep(0.01)


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_mcp_client_spawns_waits_follows_up_interrupts_and_lists(tmp_path, mode):
    db, log = str(tmp_path / "mcp-runner.db"), tmp_path / "log"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "subagentd", "--db", db, "--caller", "root", "--runner", RUNNER],
    )
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with Client(params, mode=mode) as client:
            tools = await client.list_tools()
            seen["tools"] = [tool.name for tool in tools.tools]
            call = client.call_tool
            seen["spawn1"] = await call(
                "spawn_agent",
                {"label": "summarizer", "prompt": "Summarize the logs.", "child_id": "c1"},
            )
            watch = json.dumps({"steps": [{"wait_term": True, "log": str(log)}]})
            seen["spawn2"] = await call(
                "spawn_agent", {"label": "watcher", "prompt": watch, "child_id": "c2"}
            )
            wait = {"agent_ids": ["c1"], "timeout_ms": 50_000}
            seen["wait1"] = await call("wait_agents", wait)
            seen["followup"] = await call(
                "send_message", {"subagent_id": "c1", "message": "And the errors?"}
            )
            seen["wait2"] = await call("wait_agents", wait)
            await wait_for_line(log, "waiting")  # c2's process runs, its SIGTERM handler set
            seen["list1"] = await call("list_agents", {})
            seen["interrupt"] = await call("interrupt_agent", {"agent_id": "c2"})
            seen["wait3"] = await call("wait_agents", {"agent_ids": ["c2"], "timeout_ms": 50_000})
            seen["list2"] = await call("list_agents", {})

    started = time.monotonic()
    anyio.run(session)
    assert time.monotonic() - started < 4 * TIMEOUT

    assert {"spawn_agent", "wait_agents", "send_message", "interrupt_agent", "list_agents"} <= set(
        seen["tools"]
    )
    assert texts(seen["spawn1"]) == ["started subagent c1"]
    assert seen["spawn1"].structured_content == {"child_id": "c1", "text": "started subagent c1"}
    assert texts(seen["spawn2"]) == ["started subagent c2"]

    (c1,) = seen["wait1"].structured_content["agents"]
    assert (c1["agent_id"], c1["reason"], c1["output"]) == (
        "c1",
        "completed",
        "done: Summarize the logs.",
    )
    assert seen["wait1"].is_error is False
    assert texts(seen["followup"]) == ["message queued as the next turn for subagent c1"]
    (again,) = seen["wait2"].structured_content["agents"]
    assert (again["reason"], again["output"]) == ("completed", "done: And the errors?")

    assert texts(seen["list1"]) == [
        "c1 [ready, last turn completed] — summarizer\nc2 [running] — watcher"
    ]
    assert texts(seen["interrupt"]) == ["interrupt requested for agent c2"]
    (c2,) = seen["wait3"].structured_content["agents"]
    assert (c2["agent_id"], c2["reason"], c2["output"]) == ("c2", "aborted", "waiting\nterminated")
    assert "Background subagent c2 was stopped before it finished." in "\n".join(
        texts(seen["wait3"])
    )
    assert texts(seen["list2"]) == [
        "c1 [ready, last turn completed] — summarizer\nc2 [ready, last turn was stopped] — watcher"
    ]
