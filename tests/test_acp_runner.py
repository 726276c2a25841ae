"""The ACP runner (`--runner-protocol acp`): each subagent a session of an ACP agent process — a
scripted agent on the `agent-client-protocol` SDK (tests/scripts/acp_agent.py) that calls its
session's MCP server (`subagentd mcp`) with the official MCP SDK client. In-process server,
real agent processes over real pipes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from subagentd.cli.running import Running
from subagentd.render import RENDER_GUIDE
from tests.spawned import TIMEOUT, InProcessServer
from tests.test_runner import ALL_TOOLS, RunnerServer

AGENT = [sys.executable, str(Path(__file__).parent / "scripts" / "acp_agent.py")]


class AcpServer(RunnerServer):
    """An in-process server whose runner speaks ACP to the scripted agent."""

    def __init__(self, state: Path, max_running: int = 4, permission: str = "deny", **settings: Any):
        self.running: Running | None = None
        os.environ["ACP_AGENT_STATE"] = str(state)

        def serve_with(connection: Any) -> Any:
            options = {
                "db": ":memory:",
                "caller": "root",
                "max_running": max_running,
                "max_frame_bytes": 1 << 20,
                "shutdown_grace": 5.0,
                "runner_protocol": "acp",
                "acp_permission": permission,
            }
            self.running = Running(connection, options, AGENT)
            return self.running.serve

        InProcessServer.__init__(self, serve_with=serve_with, tools=ALL_TOOLS, **settings)
        self.host.initialize(statusEvents=True)
        self.host.open("root")

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        return self.host.call("transcript/read", {"agent_id": agent_id})["events"]

    def ends(self, agent_id: str, count: int) -> list[dict[str, Any]]:
        """Wait until the agent ended `count` turns; their turn_end data."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            ends = [e["data"] for e in self.events(agent_id) if e["type"] == "turn_end"]
            if len(ends) >= count:
                return ends
            assert time.monotonic() < deadline, f"{agent_id} ended {len(ends)} turn(s)"
            self.host.notification("agent/status", agent_id=agent_id)


@pytest.fixture
def acp(tmp_path, monkeypatch):
    monkeypatch.delenv("ACP_AGENT_NO_LOAD", raising=False)
    made: list[AcpServer] = []

    def make(**kwargs: Any) -> AcpServer:
        made.append(AcpServer(tmp_path / "agent-state", **kwargs))
        return made[-1]

    yield make
    for srv in made:
        srv.stop()
    os.environ.pop("ACP_AGENT_STATE", None)


def steps(*items: dict[str, Any]) -> str:
    return json.dumps({"acp": list(items)})


def wait_for(path: Path, text: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never had {text!r}"
        time.sleep(0.01)


def test_a_turn_is_a_prompt_its_updates_are_in_the_transcript_and_the_last_message_is_its_output(acp):
    srv = acp()
    srv.spawn("c1", steps({"think": "hmm"}, {"plan": ["look", "answer"]}, {"say": "first"}, {"say": "the answer"}))
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "completed"
    events = srv.events("c1")
    kinds = [e["type"] for e in events if e["type"].startswith("acp_")]
    assert kinds == ["acp_session", "acp_thought", "acp_plan", "acp_message", "acp_end"]
    by_type = {e["type"]: e["data"] for e in events}
    assert by_type["acp_thought"] == {"text": "hmm"}
    assert [entry["content"] for entry in by_type["acp_plan"]["entries"]] == ["look", "answer"]
    # two messages in a row stream as one: chunks are joined until another kind of update
    assert by_type["acp_message"] == {"text": "firstthe answer"}
    assert by_type["acp_end"] == {"stop_reason": "end_turn"}
    assert by_type["acp_session"]["loaded"] is False
    assert end["output"] == "firstthe answer"


def sessions(tmp_path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((tmp_path / "agent-state" / "sessions.json").read_text())
    return result


def test_a_tree_three_deep_reports_and_delegates_with_native_tool_calls(acp, tmp_path):
    srv = acp()
    h1 = steps({"tool": "report", "args": {"output": "h1 found it"}}, {"say": "h1 done"})
    g1 = steps(
        {"tool": "spawn_agent", "args": {"label": "h", "prompt": h1, "child_id": "h1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["h1"], "mode": "all", "timeout_ms": 60000}},
        {"tool": "report", "args": {"output": "g1 relays: h1 found it"}},
        {"say": "g1 done"},
    )
    c1 = steps(
        {"tools": True},
        {"tool": "spawn_agent", "args": {"label": "g", "prompt": g1, "child_id": "g1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "mode": "all", "timeout_ms": 60000}},
        {"say": "c1 done"},
    )
    srv.spawn("c1", c1)
    assert srv.ends("c1", 1)[0]["output"] == "c1 done"
    assert srv.ends("g1", 1)[0]["output"] == "g1 done"
    assert srv.ends("h1", 1)[0]["output"] == "h1 done"
    messages = [e["data"]["text"] for e in srv.events("c1") if e["type"] == "acp_message"]
    assert messages == [
        "tools: send_message,interrupt_agent,list_agents,report,spawn_agent,wait_agents",
        "c1 done",
    ]
    calls = [e["data"] for e in srv.events("c1") if e["type"] == "acp_tool_call"]
    assert calls[1]["text"] == "started subagent g1"
    # what c1 waited for: g1's report (relaying h1's) and its settlement notice
    assert "g1 relays: h1 found it" in calls[3]["text"]
    assert "Background subagent g1 finished" in calls[3]["text"]
    calls = [e["data"] for e in srv.events("g1") if e["type"] == "acp_tool_call"]
    assert [c.get("title") for c in calls if "title" in c] == ["spawn_agent", "wait_agents", "report"]
    assert [c["status"] for c in calls] == ["in_progress", "completed"] * 3
    # the root (the host) hears c1's settlement; h1's report reached g1, not the root
    settled = srv.host.notification("turn/start", agent_id="root")
    assert "Background subagent c1 finished" in settled["messages"][0]["content"][0]["text"]
    # what g1's model was shown: the guide, the report guidance, its task with its sender
    (g1_session,) = [s for s in sessions(tmp_path).values() if s["prompts"][0] == g1]
    blocks = g1_session["blocks"][0]
    assert blocks[0] == RENDER_GUIDE
    assert "report" in blocks[1]
    assert blocks[2].splitlines()[0].endswith('from="parent agent c1" kind="task">')
    assert blocks[2].splitlines()[1:-1] == [g1]
