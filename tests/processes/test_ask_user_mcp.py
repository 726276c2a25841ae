"""ask_user through an MCP client: the official MCP SDK's `ClientSession` with an elicitation
callback drives `subagentd --caller root --runner <the scripted runner> --ask-user on` over
stdio; a runner child calls `subagentd tool ask_user`, the client is sent `elicitation/create`
(one string field, the options as its enum, the child's id and label in the message), and the
person's action comes back to the child. Without the elicitation capability the call fails at
once."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
TIMEOUT = 60
ASK = {
    "tool": "ask_user",
    "args": {"question": "Delete the old backups?", "options": ["yes", "no"]},
}


def run_client(tmp_path: Path, answer: Any) -> dict[str, Any]:
    """One client session: spawn c1 (it asks), wait for its end; what the client saw. `answer`:
    the elicitation callback's result, or None for a client without the capability."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "subagentd", "--db", str(tmp_path / "db"), "--caller", "root"]
        + ["--runner", RUNNER, "--ask-user", "on"],
    )
    seen: dict[str, Any] = {"asked": []}

    async def elicit(context: Any, request: Any) -> Any:
        seen["asked"].append({"message": request.message, "schema": request.requested_schema})
        return answer

    async def session() -> None:
        with open(tmp_path / "stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                callback: Any = elicit if answer is not None else None
                async with ClientSession(read, write, elicitation_callback=callback) as client:
                    await client.initialize()
                    spawn = {
                        "label": "cleaner",
                        "prompt": json.dumps({"steps": [ASK]}),
                        "child_id": "c1",
                    }
                    assert (await client.call_tool("spawn_agent", spawn)).is_error is False
                    with anyio.fail_after(TIMEOUT):
                        waited = await client.call_tool(
                            "wait_agents", {"mode": "all", "timeout_ms": 50_000}
                        )
                    seen["closing"] = [getattr(c, "text", "") for c in waited.content]
                    seen["error"] = waited.is_error

    anyio.run(session)
    return seen


def closing(output: str) -> list[str]:
    lines = [
        "Background subagent c1 finished and will do no further work unless you send it more.",
        "Its closing message:",
        output,
        "none of the subagents waited for is still working",
    ]
    return ["\n".join(lines)]


def test_the_mcp_sdk_clients_elicitation_callback_answers_ask_user(tmp_path):
    seen = run_client(tmp_path, mcp_types.ElicitResult(action="accept", content={"answer": "yes"}))
    assert seen["asked"] == [
        {
            "message": 'Subagent c1 ("cleaner") asks you:\nDelete the old backups?\nOffered'
            ' answers: "yes", "no".',
            "schema": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "title": "Answer", "enum": ["yes", "no"]}
                },
                "required": ["answer"],
            },
        }
    ]
    assert seen["closing"] == closing("ask_user -> 0: the person answered: yes")


def test_a_declined_elicitation_is_the_childs_answer(tmp_path):
    seen = run_client(tmp_path, mcp_types.ElicitResult(action="decline"))
    assert len(seen["asked"]) == 1
    assert seen["closing"] == closing(
        "ask_user -> 0: the person declined to answer; go on without the answer"
    )


def test_a_client_without_elicitation_makes_ask_user_fail_at_once(tmp_path):
    seen = run_client(tmp_path, None)
    assert seen["asked"] == []
    assert seen["closing"] == closing(
        "ask_user -> 1: Error: no person can be asked: the client of this tree's root (root)"
        " offers no way to ask one (an MCP client declares elicitation; a host declares"
        " experimental.subagentd.askUser); go on without the answer"
    )
