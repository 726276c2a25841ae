"""ask_parent from a `--runner` command: `subagentd tool ask_parent` blocks on the relay socket
until the parent (the host's root here) answers with send_message; the waiting run lends its
`--max-running` slot; every end of a question answers the call with an error result. Real runner
processes over real pipes (tests/scripts/runner.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.processes import test_runner
from tests.processes.test_runner import ALL_TOOLS, RunnerServer
from tests.spawned import TIMEOUT

server = test_runner.server  # the fixture: an in-process server with the runner

ASK = {
    "tool": "ask_parent",
    "args": {"question": "Which file: a.py or b.py?", "options": ["a.py", "b.py"]},
}
TOOLS = (*ALL_TOOLS, "ask_parent")


def question(srv: RunnerServer) -> dict[str, Any]:
    """The root's turn/start carrying the child's question."""
    return srv.host.notification("turn/start", timeout=TIMEOUT, agent_id="root")


def test_a_runner_child_asks_the_root_and_gets_the_answer_while_its_slot_is_lent(server):
    srv = server(max_running=1, tools=TOOLS)
    srv.spawn("c1", [ASK])
    turn = question(srv)
    (message,) = turn["messages"]
    assert [b["text"] for b in message["content"]] == [
        'Background subagent c1 ("t") asks you a question and waits for your answer; its turn'
        " goes on once you answer:",
        "Which file: a.py or b.py?",
        'It offers these answers: "a.py", "b.py".',
        "Answer with send_message to c1: your whole message is the answer (free text). If nobody"
        " answers within 600 seconds the question is cancelled.",
    ]
    assert message["source"]["kind"] == "subagent-question"
    assert srv.host.call("agents/get", {"agent_id": "c1"})["status"] == "waiting"
    listed = srv.host.call("list_agents", {"caller": "root"})
    assert listed["text"] == "c1 [waiting for your answer] — t"
    # --max-running 1: the waiting run lends its slot, so another child runs meanwhile
    srv.spawn("c2", "meanwhile")
    assert srv.outputs("c2", 1) == ["done: meanwhile"]
    sent = srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "b.py"})
    assert sent["text"] == "answer delivered to subagent c1; it continues its turn"
    srv.host.end_turn("root", turn["turn_id"])
    assert srv.outputs("c1", 1) == ["ask_parent -> 0: the agent that started you answered: b.py"]


def test_an_interrupt_ends_the_question_and_the_call_fails_saying_why(server):
    srv = server(tools=TOOLS)
    srv.spawn("c1", [ASK, {"print": "after"}])
    turn = question(srv)
    srv.host.call("interrupt_agent", {"caller": "root", "agent_id": "c1"})
    srv.host.end_turn("root", turn["turn_id"])
    told = question(srv)["messages"][0]["content"][0]["text"]
    assert told == (
        "The question of background subagent c1 was cancelled: its turn was interrupted; do not"
        " answer it."
    )


def test_an_mcp_clients_root_answers_a_runner_childs_question(tmp_path):
    """`subagentd --caller root --runner …` as a real process, driven by the official MCP SDK
    client (the root's model): wait_agents returns the question, send_message answers it, the
    child's `subagentd tool ask_parent` gets the answer and its turn ends with it."""
    import os
    import sys

    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.processes.test_runner import RUNNER

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "subagentd", "--db", str(tmp_path / "q.db"), "--caller", "root"),
            *("--runner", " ".join(RUNNER)),
        ],
        env=dict(os.environ),
    )
    wait = {"agent_ids": ["c1"], "mode": "all", "timeout_ms": 50_000}
    seen: dict[str, Any] = {}

    async def run() -> None:
        with anyio.fail_after(4 * TIMEOUT):
            async with Client(params) as client:
                prompt = json.dumps({"steps": [ASK]})
                await client.call_tool(
                    "spawn_agent", {"label": "t", "prompt": prompt, "child_id": "c1"}
                )
                seen["asked"] = await client.call_tool("wait_agents", wait)
                message = {"subagent_id": "c1", "message": "b.py"}
                seen["answer"] = await client.call_tool("send_message", message)
                seen["settled"] = await client.call_tool("wait_agents", wait)

    anyio.run(run)
    asked = seen["asked"].structured_content["agents"][0]
    assert asked["status"] == "waiting"
    assert asked["questions"][0].splitlines()[1] == "Which file: a.py or b.py?"
    assert seen["answer"].content[0].text == (
        "answer delivered to subagent c1; it continues its turn"
    )
    settled = seen["settled"].structured_content["agents"][0]
    assert settled["output"] == "ask_parent -> 0: the agent that started you answered: b.py"


def test_the_example_runner_shows_a_child_asking_its_parent(server, tmp_path, monkeypatch):
    """examples/turn_runner.py (dry run): a last line `ask: <question>` is asked with
    `$SUBAGENTD tool ask_parent`, and the answer is its output."""
    monkeypatch.setenv("RUNNER_STATE", str(tmp_path / "turns"))
    (tmp_path / "turns").mkdir(mode=0o700)
    example = Path(__file__).parents[2] / "examples" / "turn_runner.py"
    srv = server(tools=TOOLS, command=[sys.executable, str(example)])
    srv.spawn("c1", "ask: Which file: a.py or b.py?")
    turn = question(srv)
    (message,) = turn["messages"]
    assert message["content"][1]["text"] == "Which file: a.py or b.py?"
    sent = srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "b.py"})
    assert sent["text"] == "answer delivered to subagent c1; it continues its turn"
    srv.host.end_turn("root", turn["turn_id"])
    assert srv.outputs("c1", 1) == ["(dry run) the agent that started you answered: b.py"]
