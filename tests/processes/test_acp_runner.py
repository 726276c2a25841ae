"""The ACP runner (`--runner-protocol acp`): each subagent a session of an ACP agent process — a
scripted agent on the `agent-client-protocol` SDK (tests/scripts/acp_agent.py) that calls its
session's MCP server (`subagentd mcp`) with the official MCP SDK client. In-process server,
real agent processes over real pipes.

Longer than ~300 lines on purpose: every scenario shares the scripted agent's harness (the
server, its agent state, the sessions it kept), which split modules would each repeat."""

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
from subagentd.client.errors import RequestTimeout, RpcError
from subagentd.message_fences import RENDER_GUIDE
from tests.processes.test_runner import ALL_TOOLS, RunnerServer
from tests.spawned import TIMEOUT, InProcessServer

PATIENCE = 4 * TIMEOUT  # a tree of agent sessions starts many `subagentd mcp` processes
AGENT = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "acp_agent.py")]


class AcpServer(RunnerServer):
    """An in-process server whose runner speaks ACP to the scripted agent."""

    def __init__(
        self,
        state: Path,
        max_running: int = 4,
        permission: str = "deny",
        permission_timeout: float = 600.0,
        **settings: Any,
    ):
        self.running: Running | None = None
        os.environ["ACP_AGENT_STATE"] = str(state)

        def serve_with(connection: Any) -> Any:
            options: Any = {
                "db": ":memory:",
                "caller": "root",
                "max_running": max_running,
                "max_frame_bytes": 1 << 20,
                "shutdown_grace": 5.0,
                "runner_protocol": "acp",
                "acp_permission": permission,
                "acp_permission_timeout": permission_timeout,
            }
            self.running = Running(connection, options, AGENT)
            return self.running.serve

        settings.setdefault("question_timeout", permission_timeout)  # --question-timeout
        InProcessServer.__init__(self, serve_with=serve_with, tools=ALL_TOOLS, **settings)
        self.host.initialize(statusEvents=True)
        self.host.open("root")

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        return self.host.call("transcript/read", {"agent_id": agent_id})["events"]

    def ends(self, agent_id: str, count: int) -> list[dict[str, Any]]:
        """Wait until the agent ended `count` turns; their turn_end data."""
        deadline = time.monotonic() + PATIENCE
        while True:
            ends = [e["data"] for e in self.events(agent_id) if e["type"] == "turn_end"]
            if len(ends) >= count:
                return ends
            assert time.monotonic() < deadline, f"{agent_id} ended {len(ends)} turn(s)"
            try:  # a status change, or a second: then read again (a change may come first)
                self.host.notification("agent/status", timeout=1.0, agent_id=agent_id)
            except RequestTimeout:
                pass


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


def test_a_turn_is_a_prompt_its_updates_are_in_the_transcript_and_the_last_message_is_its_output(
    acp,
):
    srv = acp()
    srv.spawn(
        "c1",
        steps(
            {"think": "hmm"}, {"plan": ["look", "answer"]}, {"say": "first"}, {"say": "the answer"}
        ),
    )
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
    """The scripted agent's sessions by id (what it was prompted with)."""
    folder = tmp_path / "agent-state" / "sessions"
    return {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}


def test_a_tree_three_deep_reports_and_delegates_with_native_tool_calls(acp, tmp_path):
    srv = acp()
    h1 = steps({"tool": "report", "args": {"output": "h1 found it"}}, {"say": "h1 done"})
    g1 = steps(
        {"tool": "spawn_agent", "args": {"label": "h", "prompt": h1, "child_id": "h1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["h1"], "mode": "all", "timeout_ms": 50000}},
        {"tool": "report", "args": {"output": "g1 relays: h1 found it"}},
        {"say": "g1 done"},
    )
    c1 = steps(
        {"tools": True},
        {"tool": "spawn_agent", "args": {"label": "g", "prompt": g1, "child_id": "g1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "mode": "all", "timeout_ms": 50000}},
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
    # an update carries its call's title, as the start named it
    assert [c["title"] for c in calls] == [
        *("spawn_agent", "spawn_agent", "wait_agents", "wait_agents", "report", "report")
    ]
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


def send(srv: AcpServer, child: str, message: str) -> None:
    srv.host.call("send_message", {"caller": "root", "subagent_id": child, "message": message})


def test_an_interrupt_mid_prompt_cancels_it_and_the_session_keeps_its_history(acp, tmp_path):
    srv = acp()
    log = tmp_path / "log"
    srv.spawn("c1", steps({"say": "working"}, {"wait_cancel": str(log)}))
    wait_for(log, "waiting")
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "aborted"
    assert end["output"] == "workingwaiting"
    by_type = {e["type"]: e["data"] for e in srv.events("c1")}
    assert by_type["acp_end"] == {"stop_reason": "cancelled"}
    send(srv, "c1", steps({"history": True}))
    second = srv.ends("c1", 2)[1]
    assert second["reason"] == "completed"
    assert second["output"] == "history: 1: " + steps({"say": "working"}, {"wait_cancel": str(log)})
    assert len(sessions(tmp_path)) == 1  # one session, kept across the interrupt


def test_a_killed_agent_process_ends_its_turn_error_and_the_next_turn_restarts_it(acp, tmp_path):
    srv = acp()
    pid_file, log = tmp_path / "pid", tmp_path / "log"
    srv.spawn("c1", steps({"pid": str(pid_file)}, {"wait_cancel": str(log)}))
    wait_for(log, "waiting")
    first_pid = int(pid_file.read_text())
    os.kill(first_pid, signal.SIGKILL)
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "error"
    by_type = {e["type"]: e["data"] for e in srv.events("c1")}
    assert by_type["acp_end"]["error"] == "the ACP agent process exited (status -9)"
    assert "scripted ACP agent started" in by_type["acp_end"]["stderr"]
    send(srv, "c1", steps({"pid": str(pid_file)}, {"history": True}))
    second = srv.ends("c1", 2)[1]
    assert second["reason"] == "completed"
    assert second["output"].startswith("history: 1: ")  # the new process loaded the session
    assert int(pid_file.read_text()) != first_pid
    sessions_seen = [e["data"] for e in srv.events("c1") if e["type"] == "acp_session"]
    assert [s["loaded"] for s in sessions_seen] == [False, True]
    assert sessions_seen[0]["session_id"] == sessions_seen[1]["session_id"]


def test_stop_reasons_map_to_the_turns_end(acp):
    srv = acp()
    for child, reason in (("c1", "max_tokens"), ("c2", "refusal"), ("c3", "max_turn_requests")):
        srv.spawn(child, steps({"say": "partial"}, {"stop": reason}))
    assert srv.ends("c1", 1)[0]["reason"] == "max-tokens"
    assert srv.ends("c2", 1)[0]["reason"] == "refusal"
    assert srv.ends("c3", 1)[0]["reason"] == "max-tokens"
    assert srv.ends("c1", 1)[0]["output"] == "partial"


@pytest.mark.parametrize(("policy", "option"), [("deny", "no"), ("allow", "yes")])
def test_a_permission_request_is_answered_by_the_policy_and_recorded(acp, policy, option):
    srv = acp(permission=policy)
    srv.spawn("c1", steps({"permission": "Edit README.md"}))
    assert srv.ends("c1", 1)[0]["output"] == f"permission selected {option}"
    by_type = {e["type"]: e["data"] for e in srv.events("c1")}
    assert by_type["acp_permission"] == {
        "title": "Edit README.md",
        "outcome": "selected",
        "optionId": option,
    }


def test_processes_are_pooled_initialized_once_and_reused_across_turns(acp, tmp_path):
    srv = acp(max_running=1)
    pid_file = tmp_path / "pid"
    srv.spawn("c1", steps({"pid": str(pid_file)}, {"say": "one"}))
    srv.ends("c1", 1)
    first = pid_file.read_text()
    srv.spawn("c2", steps({"pid": str(pid_file)}, {"say": "two"}))
    srv.ends("c2", 1)
    send(srv, "c1", steps({"pid": str(pid_file)}, {"history": True}))
    assert srv.ends("c1", 2)[1]["output"] == "history: 1: " + steps(
        {"pid": str(pid_file)}, {"say": "one"}
    )
    assert pid_file.read_text() == first
    assert (tmp_path / "agent-state" / "initialized.log").read_text() == f"{first}\n"


def test_without_load_session_a_cold_resume_opens_a_new_session_told_who_it_is(
    acp, tmp_path, monkeypatch
):
    monkeypatch.setenv("ACP_AGENT_NO_LOAD", "1")
    srv = acp()
    srv.spawn("c1", "hello")
    assert srv.ends("c1", 1)[0]["output"] == "done: hello"
    srv.host.notification("agent/settled", agent_id="c1")
    send(srv, "c1", "again")
    assert srv.ends("c1", 2)[1]["output"] == "done: again"
    opened = [e["data"] for e in srv.events("c1") if e["type"] == "acp_session"]
    assert [s["loaded"] for s in opened] == [False, False]
    (resumed,) = [s for s in sessions(tmp_path).values() if s["prompts"] == ["again"]]
    assert resumed["blocks"][0][:2] == [
        RENDER_GUIDE,
        'You are the subagent "t", resumed in a new session: your earlier conversation could not be reopened.',
    ]


def test_a_restart_of_subagentd_cold_resumes_the_child_in_its_own_session(tmp_path):
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    db = str(tmp_path / "acp.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "subagentd", "--db", db, "--caller", "root"),
            *("--runner-protocol", "acp", "--runner", " ".join(AGENT)),
        ],
        env={**os.environ, "ACP_AGENT_STATE": str(tmp_path / "agent-state")},
    )
    first = steps(
        {"usage": {"inputTokens": 100, "outputTokens": 10, "totalTokens": 110}},
        {"say": "remember the number 7"},
    )
    wait = {"agent_ids": ["c1"], "mode": "all", "timeout_ms": min(int(PATIENCE * 1000), 50_000)}
    seen: dict[str, Any] = {}

    async def run() -> None:
        with anyio.fail_after(PATIENCE):
            await both()

    async def both() -> None:
        async with Client(params) as client:  # the first subagentd
            await client.call_tool("spawn_agent", {"label": "t", "prompt": first, "child_id": "c1"})
            seen["first"] = await client.call_tool("wait_agents", wait)
        async with Client(params) as client:  # a new process on the same database
            again = steps(
                {"usage": {"inputTokens": 160, "outputTokens": 15, "totalTokens": 175}},
                {"history": True},
            )
            message = {"subagent_id": "c1", "message": again}
            seen["send"] = await client.call_tool("send_message", message)
            seen["second"] = await client.call_tool("wait_agents", wait)

    anyio.run(run)
    text = "\n".join(block.text for block in seen["second"].content)
    assert seen["send"].is_error is False
    assert f"Its closing message:\nhistory: 1: {first}" in text
    assert len(sessions(tmp_path)) == 1  # the same session, loaded by a new agent process
    assert len((tmp_path / "agent-state" / "initialized.log").read_text().splitlines()) == 2
    # the loaded session's totals went on from the first process's: the new one charged the growth
    from subagentd.storage.reader import StoreReader

    ends = [row for row in StoreReader(db).all_events() if row[3] == "turn_end" and row[0] == "c1"]
    usages = [json.loads(row[4] or "{}").get("usage") for row in ends]
    assert usages == [
        {"input_tokens": 100, "output_tokens": 10},
        {"input_tokens": 60, "output_tokens": 5},
    ]


def test_the_timeline_and_watch_show_the_child_working(acp, tmp_path):
    from subagentd.storage.database import SqliteStore
    from subagentd.storage.reader import StoreReader
    from subagentd.view.inspect import summarize
    from subagentd.view.timeline import build

    db = str(tmp_path / "run.db")
    srv = acp(store=SqliteStore(db))
    srv.spawn(
        "c1",
        steps(
            {"plan": ["read", "answer"]},
            {"tool": "list_agents", "args": {}},
            {"tool": "send_message", "args": {"subagent_id": "nobody", "message": "x"}},
            {"say": "all done"},
        ),
    )
    srv.ends("c1", 1)
    events = srv.events("c1")
    lines = [summarize(e["type"], e["data"]) for e in events]
    assert 'plan: "read; answer"' in lines
    assert 'tool call list_agents completed: "(no subagents)"' in lines
    refused = [e["data"] for e in events if e["type"] == "tool_refused"]
    assert [r["tool"] for r in refused] == ["send_message"]
    assert "ACP prompt stopped: end_turn" in lines
    timeline = build(StoreReader(db))
    (turn,) = [t for t in timeline["turns"] if t.get("output") == "all done"]
    assert turn["working"][0] == 'plan: "read; answer"'
    assert turn["working"][-1] == '"all done"'
    assert any(line.startswith("send_message refused: ") for line in turn["working"])


def test_an_agent_that_cannot_be_started_ends_the_turn_error_saying_why(acp, tmp_path, monkeypatch):
    monkeypatch.setattr("tests.processes.test_acp_runner.AGENT", [str(tmp_path / "no-such-agent")])
    srv = acp()
    srv.spawn("c1", "hello")
    assert srv.ends("c1", 1)[0]["reason"] == "error"
    (end,) = [e["data"] for e in srv.events("c1") if e["type"] == "acp_end"]
    assert end["error"].startswith("subagentd could not start the ACP agent: ")
    assert "no-such-agent" in end["error"]


def test_runner_protocol_acp_without_a_runner_refuses_to_start(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "--db", str(tmp_path / "x.db"), "--caller", "root"]
        + ["--runner-protocol", "acp"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "cannot start: --runner-protocol acp needs --runner: the command of the ACP agent" in (
        done.stderr
    )


def test_the_usage_an_acp_agent_reports_is_charged_to_the_turn_and_shown_by_agents_get(acp):
    srv = acp(cost_currency="USD")
    # the agent reports its session's running totals: each turn is charged what they grew by
    first = steps(
        {"usage": {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120}},
        {"cost": [0.25, "USD"]},
        {"say": "one"},
    )
    srv.spawn("c1", first)
    assert srv.ends("c1", 1)[0]["usage"] == {"input_tokens": 100, "output_tokens": 20, "cost": 0.25}
    second = steps(
        {"cost": [0.4, "usd"]},
        {"usage": {"inputTokens": 250, "outputTokens": 50, "totalTokens": 300, "thoughtTokens": 7}},
        {"say": "two"},
    )
    send(srv, "c1", second)
    end = srv.ends("c1", 2)[1]
    assert end["usage"] == {"input_tokens": 150, "output_tokens": 30, "cost": 0.15}
    acp_end = [e["data"] for e in srv.events("c1") if e["type"] == "acp_end"][1]
    session_id = acp_end["session_usage"]["session_id"]
    assert acp_end["session_usage"] == {
        "session_id": session_id,
        "input_tokens": 250,
        "output_tokens": 50,
        "thought_tokens": 7,
        "cost": {"amount": 0.4, "currency": "usd", "charged": True},
    }
    # a cost in another currency is recorded, not charged
    send(srv, "c1", steps({"cost": [9.0, "EUR"]}, {"say": "three"}))
    third = srv.ends("c1", 3)[2]
    assert "usage" not in third
    acp_end = [e["data"] for e in srv.events("c1") if e["type"] == "acp_end"][2]
    assert acp_end["session_usage"]["cost"] == {"amount": 9.0, "currency": "EUR", "charged": False}
    child = srv.host.call("agents/get", {"agent_id": "c1"})
    used = child["usage"]
    assert (used["input_tokens"], used["output_tokens"], used["cost"]) == (250, 50, 0.4)
    assert used["currency"] == "USD"
    tree = srv.host.call("agents/get", {"agent_id": "root"})["tree_usage"]
    assert (tree["input_tokens"], tree["output_tokens"], tree["cost"]) == (250, 50, 0.4)


def test_a_token_budget_an_acp_turn_spent_refuses_the_next_turn(acp):
    srv = acp()
    srv.host.call("agents/budget", {"agent_id": "root", "budget": {"max_tokens": 100}})
    srv.spawn("c1", steps({"usage": {"inputTokens": 90, "outputTokens": 30, "totalTokens": 120}}))
    assert srv.ends("c1", 1)[0]["usage"] == {"input_tokens": 90, "output_tokens": 30}
    with pytest.raises(RpcError) as refused:
        send(srv, "c1", "again")
    assert refused.value.code == 1011
    data = refused.value.data
    assert (data["reason"], data["budget"], data["agent_id"]) == ("budget", "tokens", "root")
    assert (data["limit"], data["spent"], data["left"]) == (100, 120, 0)


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_an_acp_turn_end_whose_group_is_lost_is_retried_until_the_child_settles(
    acp, tmp_path, request, backend_name
):
    from tests.processes.test_runner import failing_end_store

    store, made = failing_end_store(backend_name, request, tmp_path)
    srv = acp(store=store, lease_ttl=1.5)  # a heartbeat (reading storage back) every 0.5 s
    srv.spawn("c1", steps({"say": "the answer"}))
    end = srv.ends("c1", 1)[0]
    assert made == ["c1"]  # its end's group was lost once
    assert (end["reason"], end["output"]) == ("completed", "the answer")
    settled = srv.host.notification("agent/settled", PATIENCE, agent_id="c1")
    assert settled["reason"] == "completed"
    srv.stop()  # before pg_stores, set up after this server, closes its store
