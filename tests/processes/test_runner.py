"""The turn runner (`serve --runner`): the turns below the root run as processes (in-process server,
real runner processes: tests/scripts/runner.py)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from subagentd.cli.running import Running
from subagentd.core import texts
from subagentd.message_fences import fence_token
from subagentd.runners.process import STDERR_TAIL
from subagentd.runners.runner import STDERR_EXCERPT_BYTES, stderr_excerpt
from subagentd.runners.tool_socket import REFUSED
from tests.spawned import TIMEOUT, InProcessServer

RUNNER = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")]
ALL_TOOLS = (
    "send_message",
    "interrupt_agent",
    "list_agents",
    "report",
    "spawn_agent",
    "wait_agents",
)
EXAMPLE = [sys.executable, str(Path(__file__).parents[2] / "examples" / "turn_runner.py")]


class RunnerServer(InProcessServer):
    """An in-process server with the runner; root `root` is opened (not held: the host sees
    the root's turns, and only those)."""

    def __init__(self, max_running: int = 4, command: list[str] = RUNNER, **settings: Any) -> None:
        self.running: Running | None = None

        def serve_with(connection: Any) -> Any:
            options: Any = {
                "db": ":memory:",
                "caller": "root",
                "max_running": max_running,
                "max_frame_bytes": 1 << 20,
                "shutdown_grace": 5.0,
            }
            self.running = Running(connection, options, command)
            return self.running.serve

        super().__init__(serve_with=serve_with, **settings)
        self.host.initialize(statusEvents=True)
        self.host.open("root")

    def spawn(self, child_id: str, steps: list[dict[str, Any]] | str, caller: str = "root") -> None:
        prompt = steps if isinstance(steps, str) else json.dumps({"steps": steps})
        self.host.call(
            "agents/spawn", {"caller": caller, "child_id": child_id, "label": "t", "prompt": prompt}
        )

    def outputs(self, agent_id: str, count: int) -> list[str | None]:
        """Wait until the agent ended `count` turns; their outputs."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            events = self.host.call("transcript/read", {"agent_id": agent_id})["events"]
            outputs = [e["data"].get("output") for e in events if e["type"] == "turn_end"]
            if len(outputs) >= count:
                return outputs
            assert time.monotonic() < deadline, f"{agent_id} ended {len(outputs)} turn(s)"
            self.host.notification("agent/status", agent_id=agent_id)

    def ended(self, agent_id: str) -> dict[str, Any]:
        """Wait for the agent's turn_end event; the events of that turn by type."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            events = self.host.call("transcript/read", {"agent_id": agent_id})["events"]
            ends = [e for e in events if e["type"] == "turn_end"]
            if ends:
                turn = ends[0]["data"]["turn_id"]
                return {e["type"]: e.get("data") for e in events if e.get("turn_id") == turn}
            assert time.monotonic() < deadline, f"{agent_id}'s turn did not end"
            self.host.notification("agent/status", agent_id=agent_id)


@pytest.fixture
def server():
    made: list[RunnerServer] = []

    def make(**kwargs: Any) -> RunnerServer:
        made.append(RunnerServer(**kwargs))
        return made[-1]

    yield make
    for srv in made:
        srv.stop()


def wait_lines(path: Path, count: int) -> list[str]:
    """The file's lines once it has `count` (written by runner processes; bounded)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, f"{path} has {lines}"
        time.sleep(0.01)


def test_exit_0_completes_the_turn_with_trimmed_stdout_and_no_turn_start_reaches_the_host(server):
    srv = server()
    srv.spawn("c1", [{"print": "  \n the answer \n\n"}])
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "completed"
    assert events["turn_end"]["output"] == "the answer"
    assert events["runner_exit"] == {"exit_code": 0}
    settled = srv.host.notification("agent/settled", agent_id="c1")
    assert settled["reason"] == "completed"
    starts = [
        json.loads(line)
        for line in srv.host.raw
        if b'"turn/start"' in line and b'"agent_id":"c1"' in line
    ]
    assert starts == []
    # the root is not run by the runner: its settlement notice reaches the host as turn/start
    start = srv.host.notification("turn/start", agent_id="root")
    assert start["messages"][0]["content"][0]["text"].startswith("Background subagent c1 finished")


def test_the_turn_ends_when_the_command_exits_even_if_it_left_a_process_holding_stdout(server):
    srv = server()
    started = time.monotonic()
    srv.spawn("c1", [{"background": 120}, {"print": "left one behind"}])
    events = srv.ended("c1")
    assert time.monotonic() - started < 30  # not held until the 120 s child closes stdout
    assert events["turn_end"]["output"] == "left one behind"
    assert events["runner_exit"] == {"exit_code": 0}


def test_stdout_past_max_text_bytes_is_cut_to_that_many_bytes(server):
    srv = server(max_text_bytes=101)
    srv.spawn("c1", [{"repeat": "é", "times": 200}])  # 400 bytes, cut after half a character
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "completed"
    assert events["turn_end"]["output"] == "é" * 50  # the half character is dropped
    assert events["runner_exit"] == {"exit_code": 0, "stdout_cut": True}


def test_a_turn_larger_than_a_pipe_holds_reaches_the_command_whole(server):
    """What the stdin pipe does not take at once is written as the command reads it."""
    reads = "import json, sys; t = json.load(sys.stdin); print(len(t['messages'][0]['content'][0]['text']))"
    srv = server(command=[sys.executable, "-c", reads])
    srv.spawn("c1", "x" * 200_000)  # past the 64 KiB a pipe holds
    events = srv.ended("c1")
    assert events["turn_end"]["output"] == "200000"
    assert events["runner_exit"] == {"exit_code": 0}


def test_each_turn_leaves_no_descriptor_open_behind_it(server):
    """Each process's three pipes and its pidfd are closed once its turn ended."""
    srv = server()
    srv.spawn("warm", [{"print": "first"}])
    srv.ended("warm")
    before = len(os.listdir("/proc/self/fd"))
    for n in range(8):
        srv.spawn(f"c{n}", [{"print": f"turn {n}"}, {"stderr": "noise"}])
    for n in range(8):
        assert srv.ended(f"c{n}")["turn_end"]["output"] == f"turn {n}"
    deadline = time.monotonic() + TIMEOUT
    while len(os.listdir("/proc/self/fd")) > before:  # the last turn's are closed after its end
        assert time.monotonic() < deadline, os.listdir("/proc/self/fd")
        time.sleep(0.01)


def test_nonzero_exit_ends_the_turn_error_with_the_stderr_tail_in_the_transcript(server):
    srv = server()
    noise = "x" * 5000 + "the last words"
    srv.spawn("c1", [{"print": "partial"}, {"stderr": noise}, {"exit": 3}])
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "error"
    assert events["turn_end"]["output"] == "partial"
    assert events["runner_exit"]["exit_code"] == 3
    tail = events["runner_exit"]["stderr"]
    assert len(tail) == STDERR_TAIL and noise.endswith(tail)
    start = srv.host.notification("turn/start", agent_id="root")
    assert start["messages"][0]["content"][0]["text"] == (
        "Background subagent c1 failed before it finished."
    )


def test_the_turn_is_on_stdin_and_the_environment_names_agent_turn_db_and_token(server):
    srv = server()
    srv.spawn("c1", [{"env": True}])
    events = srv.ended("c1")
    seen = json.loads(events["turn_end"]["output"])
    turn_id = events["turn_end"]["turn_id"]
    env = seen["env"]
    assert env["SUBAGENTD_AGENT_ID"] == "c1"
    assert env["SUBAGENTD_TURN_ID"] == turn_id
    assert env["SUBAGENTD_DB"] == ":memory:"
    assert len(env["SUBAGENTD_TOKEN"]) >= 43  # 32 random bytes, URL-safe base64
    assert env["SUBAGENTD_SOCKET"].endswith("relay.sock")
    turn = seen["turn"]
    assert set(turn) == {"agent_id", "turn_id", "messages", "instructions"}
    assert (turn["agent_id"], turn["turn_id"]) == ("c1", turn_id)
    assert turn["messages"][0]["content"] == [
        {"type": "text", "text": json.dumps({"steps": [{"env": True}]})}
    ]
    assert turn["messages"][0]["source"] == {
        "kind": "coordinator",
        "form": "spawn",
        "sender_session_id": "root",
    }
    assert "report" in turn["instructions"]


def test_interrupt_sends_sigterm_and_the_turn_ends_aborted(server, tmp_path):
    srv = server()
    log = tmp_path / "log"
    srv.spawn("c1", [{"wait_term": True, "log": str(log)}])
    assert wait_lines(log, 1) == ["waiting"]  # its SIGTERM handler is set
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "aborted"
    assert events["turn_end"]["output"] == "waiting\nterminated"
    assert events["runner_exit"] == {"exit_code": 143, "interrupted": True}


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(server, tmp_path):
    srv = server(interrupt_grace=1.0)
    log = tmp_path / "log"
    steps = [{"ignore_term": True}, {"append": str(log), "text": "started"}, {"sleep": 120}]
    srv.spawn("c1", steps)
    wait_lines(log, 1)
    started = time.monotonic()
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "aborted"
    assert srv.running is not None
    deadline = time.monotonic() + TIMEOUT
    while srv.running.runner.running:  # its process is gone: killed, not left to sleep 120 s
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert time.monotonic() - started < 60


def test_max_running_bounds_the_processes_and_the_rest_run_in_start_order(server, tmp_path):
    srv = server(max_running=1)
    log, go = tmp_path / "log", tmp_path / "go"
    first = [
        {"append": str(log), "text": "start {agent}"},
        {"wait_file": str(go)},
        {"append": str(log), "text": "end {agent}"},
    ]
    rest = [
        {"append": str(log), "text": "start {agent}"},
        {"append": str(log), "text": "end {agent}"},
    ]
    srv.spawn("c1", first)
    srv.spawn("c2", rest)
    srv.spawn("c3", rest)
    assert wait_lines(log, 1) == ["start c1"]
    assert srv.running is not None
    runner = srv.running.runner
    deadline = time.monotonic() + TIMEOUT
    while [job.start.agent_id for job in list(runner.waiting)] != ["c2", "c3"]:
        assert time.monotonic() < deadline, list(runner.waiting)
        time.sleep(0.01)
    assert list(runner.running) and len(runner.running) == 1
    go.touch()
    assert wait_lines(log, 6) == ["start c1", "end c1", "start c2", "end c2", "start c3", "end c3"]


def test_an_interrupted_turn_still_waiting_for_a_slot_never_starts(server, tmp_path):
    srv = server(max_running=1)
    log, go = tmp_path / "log", tmp_path / "go"
    srv.spawn("c1", [{"append": str(log), "text": "start {agent}"}, {"wait_file": str(go)}])
    srv.spawn("c2", [{"append": str(log), "text": "start {agent}"}])
    wait_lines(log, 1)
    srv.host.call("agents/interrupt", {"agent_id": "c2"})
    events = srv.ended("c2")
    assert events["turn_end"]["reason"] == "aborted"
    assert events["runner_exit"] == {"interrupted": True}
    go.touch()
    srv.ended("c1")
    assert log.read_text().splitlines() == ["start c1"]


def test_a_command_that_cannot_start_ends_the_turn_error(server):
    srv = server()
    assert srv.running is not None
    srv.running.runner.executor.command = ["/nonexistent/runner"]
    srv.spawn("c1", "hello")
    events = srv.ended("c1")
    assert events["turn_end"]["reason"] == "error"
    assert events["runner_exit"]["stderr"].startswith("subagentd could not start the runner:")


# --- `subagentd tool`: the token proves the agent --------------------------------------


def tool_lines(output: str) -> list[str]:
    return output.splitlines()


def test_a_runner_reports_as_its_own_agent_with_its_token(server):
    srv = server()
    srv.spawn("c1", [{"tool": "report", "args": {"output": "found it"}}])
    events = srv.ended("c1")
    (line,) = tool_lines(events["turn_end"]["output"])
    assert line.startswith("report -> 0: report accepted by the agent that started you as message ")
    start = srv.host.notification("turn/start", agent_id="root")
    assert [b["text"] for b in start["messages"][0]["content"]] == [
        "Background subagent c1 reported:",
        "found it",
    ]


@pytest.mark.parametrize("who", ["root", "sibling", "parent"])
def test_a_token_cannot_act_as_the_parent_the_root_or_a_sibling(server, tmp_path, who):
    srv = server()
    log = tmp_path / "log"
    # c1 stays running (live) so that acting as it would otherwise be possible
    srv.spawn("c1", [{"append": str(log), "text": "c1"}, {"wait_file": str(tmp_path / "go")}])
    wait_lines(log, 1)
    if who == "parent":
        agent, caller, args = "g1", "c1", {"output": "as my parent"}
        srv.spawn("g1", [{"tool": "report", "args": args, "caller": caller}], caller="c1")
        tool = "report"
    elif who == "sibling":
        agent, caller = "c2", "c1"
        srv.spawn("c2", [{"tool": "report", "args": {"output": "x"}, "caller": caller}])
        tool = "report"
    else:
        agent, caller = "c2", "root"
        args = {"subagent_id": "c1", "message": "as the root"}
        srv.spawn("c2", [{"tool": "send_message", "args": args, "caller": caller}])
        tool = "send_message"
    events = srv.ended(agent)
    assert events["turn_end"]["output"] == (
        f"{tool} -> 2: subagentd tool: " + REFUSED.format(caller=caller)
    )
    (tmp_path / "go").touch()


def test_the_token_of_an_ended_activation_is_refused(server):
    srv = server()
    srv.spawn("c1", [{"env": True}])
    old = json.loads(srv.ended("c1")["turn_end"]["output"])["env"]["SUBAGENTD_TOKEN"]
    srv.host.notification("agent/settled", agent_id="c1")  # its activation ended
    steps = [{"tool": "list_agents", "caller": "c1", "token": old}]
    srv.spawn("c2", steps)
    assert srv.ended("c2")["turn_end"]["output"] == (
        "list_agents -> 2: subagentd tool: " + REFUSED.format(caller="c1")
    )


def test_a_wrong_token_is_refused_and_the_tools_refusals_keep_their_texts(server):
    srv = server()
    steps = [
        {"tool": "list_agents", "token": "not-the-token"},
        {"tool": "send_message", "args": {"subagent_id": "nobody", "message": "hi"}},
        {"tool": "interrupt_agent", "args": {"agent_id": "c1"}},
    ]
    srv.spawn("c1", steps)
    lines = tool_lines(srv.ended("c1")["turn_end"]["output"])
    assert lines == [
        "list_agents -> 2: subagentd tool: " + REFUSED.format(caller="c1"),
        'send_message -> 1: Error: message not delivered: subagent "nobody" is unavailable',
        'interrupt_agent -> 1: Error: agent "c1" cannot interrupt itself',
    ]


def test_the_tool_verb_outside_a_runner_says_what_it_needs():
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "tool", "report", '{"output": "x"}', "--caller", "c1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("subagentd tool: SUBAGENTD_SOCKET is not set;")


# --- examples/turn_runner.py, the README's runner ------------------------------------------

FAKE_AGENT = """
import subprocess, sys
prompt = sys.stdin.read()
how = next(line for line in prompt.splitlines() if line.startswith("To report, run: "))
command = how[len("To report, run: "):].replace("<your report>", "progress from the fake agent")
subprocess.run(command, shell=True, check=True, capture_output=True)
lines = prompt.strip().splitlines()
assert lines[-1].startswith("</message-"), lines[-1]  # rendered with its sender (the fence)
print(f"answer {prompt.count('[You answered]') + 1}: {lines[-2]}")
"""


def test_the_example_runner_runs_a_command_line_agent_that_reports_and_remembers(
    server, tmp_path, monkeypatch
):
    agent = tmp_path / "fake_agent.py"
    agent.write_text(FAKE_AGENT)
    monkeypatch.setenv("AGENT_COMMAND", f"{sys.executable} {agent}")
    monkeypatch.setenv("RUNNER_STATE", str(tmp_path / "state"))
    srv = server(command=EXAMPLE)
    srv.spawn("c1", "Find the oldest open bug.")
    events = srv.ended("c1")
    assert events["turn_end"]["output"] == "answer 1: Find the oldest open bug."
    report = srv.host.notification("turn/start", agent_id="root")
    assert [b["text"] for b in report["messages"][0]["content"]] == [
        "Background subagent c1 reported:",
        "progress from the fake agent",
    ]
    srv.host.notification("agent/settled", agent_id="c1")
    srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "And then?"})
    outputs = srv.outputs("c1", 2)
    assert outputs[1] == "answer 2: And then?"  # it saw its first turn


def test_a_runner_spawns_and_waits_for_its_own_child_through_the_tool_verb(server):
    srv = server(tools=ALL_TOOLS)
    steps = [
        {"tool": "spawn_agent", "args": {"label": "leaf", "prompt": "hi", "child_id": "g1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "timeout_ms": 50000}},
    ]
    srv.spawn("c1", steps)
    spawned, waited = srv.ended("c1")["turn_end"]["output"].split("\n", 1)
    assert spawned == "spawn_agent -> 0: started subagent g1"
    assert waited.startswith("wait_agents -> 0: ")
    assert "Background subagent g1 finished" in waited
    assert "done: hi" in waited
    g1 = srv.ended("g1")  # run by the runner too: it is below the root through c1
    assert g1["turn_end"]["output"] == "done: hi"
    assert g1["runner_exit"] == {"exit_code": 0}


def test_nested_waits_lend_their_slots_so_children_run_under_max_running_1(server):
    """Every slot holds a run waiting for its child: the waiting run lends its slot, so the
    child runs (two levels down here) instead of starving until the waits time out."""
    srv = server(tools=ALL_TOOLS, max_running=1)
    leaf = json.dumps({"steps": [{"print": "leaf done"}]})
    middle = json.dumps(
        {
            "steps": [
                {"tool": "spawn_agent", "args": {"label": "l", "prompt": leaf, "child_id": "h1"}},
                {"tool": "wait_agents", "args": {"agent_ids": ["h1"], "timeout_ms": 50000}},
            ]
        }
    )
    steps = [
        {"tool": "spawn_agent", "args": {"label": "m", "prompt": middle, "child_id": "g1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "timeout_ms": 50000}},
    ]
    srv.spawn("c1", steps)
    output = srv.ended("c1")["turn_end"]["output"]
    assert output.split("\n", 1)[0] == "spawn_agent -> 0: started subagent g1"
    assert "Background subagent g1 finished" in output
    assert srv.ended("h1")["turn_end"]["output"] == "leaf done"
    assert "Background subagent h1 finished" in srv.ended("g1")["turn_end"]["output"]
    assert srv.running is not None and srv.running.runner.lent == set()


def test_a_wait_through_the_verb_is_cancelled_when_its_run_is_interrupted(server, tmp_path):
    srv = server(tools=ALL_TOOLS)
    go = tmp_path / "go"
    leaf = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "leaf done"}]})
    steps = [
        {"tool": "spawn_agent", "args": {"label": "leaf", "prompt": leaf, "child_id": "g1"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "timeout_ms": 50000}},
    ]
    srv.spawn("c1", steps)
    deadline = time.monotonic() + TIMEOUT
    while not srv.service.waits.pending:  # the verb is blocked in wait_agents
        assert time.monotonic() < deadline
        time.sleep(0.01)
    srv.host.call("agents/interrupt", {"agent_id": "c1"})  # SIGTERM: the run and its verb
    assert srv.ended("c1")["turn_end"]["reason"] == "aborted"
    while srv.service.waits.pending:  # the verb hung up: its wait is gone
        assert time.monotonic() < deadline
        time.sleep(0.01)
    go.touch()
    # g1's settlement notice was not consumed by the cancelled wait: it wakes c1 as a turn
    outputs = srv.outputs("c1", 2)
    assert outputs[1].startswith("done: Background subagent g1 finished")


def test_a_cold_resumed_turn_carries_the_descriptor_on_stdin(server):
    srv = server()
    srv.spawn("c1", "hello")
    srv.host.notification("agent/settled", agent_id="c1")
    message = json.dumps({"steps": [{"env": True}]})
    srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": message})
    outputs = srv.outputs("c1", 2)
    turn = json.loads(outputs[1])["turn"]
    assert turn["resume"] == {"version": 1, "mode": "continuable", "label": "t"}
    assert [m["content"][0]["text"] for m in turn["messages"]] == [message]


def relay(path: str, data: bytes) -> dict[str, Any]:
    """One request line to the relay socket; its reply."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(TIMEOUT)
        conn.connect(path)
        conn.sendall(data)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            reply += chunk
    answer: dict[str, Any] = json.loads(reply)
    return answer


def test_bad_input_on_the_relay_socket_gets_json_rpc_errors_and_it_keeps_serving(server):
    srv = server()
    assert srv.running is not None
    path = srv.running.path
    garbage = relay(path, b"not json\n")
    assert garbage["error"]["code"] == -32600 and garbage["id"] is None
    other = {"jsonrpc": "2.0", "id": 7, "method": "agents/open", "params": {"name": "x"}}
    refused = relay(path, json.dumps(other).encode() + b"\n")
    assert refused["id"] == 7
    assert refused["error"]["code"] == -32600
    assert (
        refused["error"]["message"] == "only tools/call and tools/list are relayed, not agents/open"
    )
    unknown = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "nope"}}
    assert relay(path, json.dumps(unknown).encode() + b"\n")["error"] == {
        "code": -32602,
        "message": "Unknown tool: nope",
        "data": {"reason": "INVALID_PARAMS"},
    }
    tokenless = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "list_agents"},
    }
    assert relay(path, json.dumps(tokenless).encode() + b"\n")["error"] == {
        "code": 1001,
        "message": "list_agents requires a calling agent (caller was not given)",
        "data": {"reason": "UNAUTHORIZED"},
    }
    tokenless["params"]["_meta"] = {"subagentd/caller": "root"}
    assert relay(path, json.dumps(tokenless).encode() + b"\n")["error"]["message"] == (
        texts.RUNNER_TOKEN_REFUSED.format(caller="root")
    )
    srv.spawn("c1", "still serving")
    assert srv.ended("c1")["turn_end"]["output"] == "done: still serving"


def test_the_example_runner_without_an_agent_command_is_a_dry_run(server, tmp_path, monkeypatch):
    monkeypatch.delenv("AGENT_COMMAND", raising=False)
    monkeypatch.setenv("RUNNER_STATE", str(tmp_path / "state"))
    srv = server(command=EXAMPLE)
    srv.spawn("c1", "Find the oldest open bug.")
    assert srv.ended("c1")["turn_end"]["output"] == "(dry run) Find the oldest open bug."


def failing_end_store(backend: str, request: Any, tmp_path: Path) -> tuple[Any, list[str]]:
    """A store whose first turn end loses its commit group for real: on SQLite the group's
    COMMIT fails with an I/O error (tests/storage/test_storage_faults.py FaultyConnection); on
    PostgreSQL the server's connection is terminated (pg_terminate_backend) just before the
    end's statement runs. The list records each fault made."""
    made: list[str] = []
    if backend == "sqlite":
        from tests.storage.test_storage_faults import faulty_store

        store, faulty = faulty_store(str(tmp_path / "db"))

        def fail() -> None:
            faulty.plan = ("commit", 0)
    else:
        import psycopg

        stores = request.getfixturevalue("pg_stores")
        store = stores(None)

        def fail() -> None:
            pid = store.conn.raw.info.backend_pid
            with psycopg.connect(stores.server.admin, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

    real_end = store.end_turn

    def end_turn(session_id: str, reason: str, output: str | None) -> None:
        if not made:
            made.append(session_id)
            fail()
        real_end(session_id, reason, output)

    store.end_turn = end_turn
    return store, made


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_a_turn_end_whose_group_is_lost_is_retried_until_the_child_settles(
    server, tmp_path, request, backend_name
):
    store, made = failing_end_store(backend_name, request, tmp_path)
    srv = server(store=store, lease_ttl=1.5)  # a heartbeat (reading storage back) every 0.5 s
    srv.spawn("c1", [{"print": "the answer"}])
    events = srv.ended("c1")
    assert made == ["c1"]  # its end's group was lost once
    assert events["turn_end"]["reason"] == "completed"
    assert events["turn_end"]["output"] == "the answer"
    settled = srv.host.notification("agent/settled", agent_id="c1")
    assert settled["reason"] == "completed"
    srv.stop()  # before pg_stores, set up after this server, closes its store


def test_a_runs_usage_lines_sum_to_at_most_the_bound_of_one_report(tmp_path):
    from subagentd.runners.runner import USAGE_MAX_BYTES, read_usage
    from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX

    path = tmp_path / "usage.jsonl"
    line = json.dumps({"input_tokens": COUNT_MAX, "output_tokens": COUNT_MAX, "cost": MONEY_MAX})
    lines = USAGE_MAX_BYTES // (len(line) + 1)  # as many as the file may hold: ~900
    path.write_text(f"{line}\n" * lines)  # ~2^63 tokens of each if summed unchecked
    usage, refused = read_usage(str(path))
    assert refused == 0 and usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cost) == (COUNT_MAX, COUNT_MAX, 1e12)


def test_refused_tool_calls_are_recorded_bounded_and_not_past_max_db_bytes(server, tmp_path):
    import sqlite3

    from subagentd.storage.database import SqliteStore

    db, gate = tmp_path / "db", tmp_path / "gate"
    srv = server(store=SqliteStore(str(db)), max_db_bytes=600_000)
    refused = {"tool": "send_message", "args": {"subagent_id": "nobody", "message": "x"}}
    huge = {"tool": "send_message", "args": {"subagent_id": "é" * 20_000, "message": "x"}}
    srv.spawn("c1", [refused, huge, {"wait_file": str(gate)}, refused, refused, refused])
    deadline = time.monotonic() + TIMEOUT
    while True:  # the first two were refused and recorded
        events = srv.host.call("transcript/read", {"agent_id": "c1"})["events"]
        recorded = [e["data"] for e in events if e["type"] == "tool_refused"]
        if len(recorded) == 2:
            break
        assert time.monotonic() < deadline, recorded
        time.sleep(0.05)
    assert recorded[0]["text"].startswith("Error: ")
    assert recorded[1]["tool"] == "send_message"
    assert (
        4000 < len(recorded[1]["text"].encode()) <= 4096
    )  # its refusal, cut (docs/architecture.md)
    with sqlite3.connect(db) as padding:  # the database now past --max-db-bytes
        padding.execute("CREATE TABLE padding (b BLOB)")
        padding.execute("INSERT INTO padding VALUES (zeroblob(700000))")
    gate.touch()
    outputs = srv.outputs("c1", 1)
    assert outputs[0].count("send_message -> 1: ") == 5  # every call was refused
    events = srv.host.call("transcript/read", {"agent_id": "c1"})["events"]
    assert len([e for e in events if e["type"] == "tool_refused"]) == 2  # nothing more written


def test_a_failed_runner_tells_the_parent_its_status_and_stderr_fenced_and_logs_it(server, caplog):
    srv = server()
    noise = "".join(f"line {n}\n" for n in range(20)) + "ModuleNotFoundError: No module named 'x'"
    srv.spawn("c1", [{"stderr": noise}, {"exit": 3}])
    start = srv.host.notification("turn/start", agent_id="root")
    blocks = [b["text"] for b in start["messages"][0]["content"]]
    tail = "\n".join(
        [*(f"line {n}" for n in range(13, 20)), "ModuleNotFoundError: No module named 'x'"]
    )
    token = fence_token(tail, tail)
    assert blocks == [
        "Background subagent c1 failed before it finished.",
        f"Its runner exited with status 3; the last lines it wrote to stderr follow, between the"
        f" two stderr-{token} lines (the runner's own text, not subagentd's):",
        f"<stderr-{token}>\n{tail}\n</stderr-{token}>",
        "It left no closing message.",
    ]
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--runner:")]
    assert logged == [
        "--runner: the turn of c1 exited with status 3; its stderr ended: " + json.dumps(tail)
    ]
    events = srv.ended("c1")
    assert events["turn_end"]["runner"] == {"status": "exited with status 3", "stderr_tail": tail}


def test_a_runner_that_wrote_nothing_to_stderr_says_so(server):
    srv = server()
    srv.spawn("c1", [{"exit": 4}])
    start = srv.host.notification("turn/start", agent_id="root")
    assert [b["text"] for b in start["messages"][0]["content"]] == [
        "Background subagent c1 failed before it finished.",
        "Its runner exited with status 4 and wrote nothing to stderr.",
        "It left no closing message.",
    ]


def test_a_runner_that_cannot_be_started_says_why_in_the_notice(server):
    srv = server()
    assert srv.running is not None
    srv.running.runner.executor.command = ["/nonexistent/runner"]
    srv.spawn("c1", "hello")
    start = srv.host.notification("turn/start", agent_id="root")
    assert [b["text"] for b in start["messages"][0]["content"]] == [
        "Background subagent c1 failed before it finished.",
        "Its runner could not be started: [Errno 2] No such file or directory:"
        " '/nonexistent/runner'.",
        "It left no closing message.",
    ]


def test_the_stderr_excerpt_is_bounded():
    assert stderr_excerpt(None) is None and stderr_excerpt(" \n") is None
    assert stderr_excerpt("a\nb\n") == "a\nb"
    long = "\n".join("y" * 300 for _ in range(8))
    assert stderr_excerpt(long) == "\n".join("y" * 300 for _ in range(3))  # whole lines, <= 1000
    one = "z" * 5000
    assert stderr_excerpt(one) == "…" + "z" * STDERR_EXCERPT_BYTES
