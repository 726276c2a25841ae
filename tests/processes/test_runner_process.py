"""`subagentd --caller root --runner COMMAND` as a real process: what needs the process boundary
(stdout purity, the held root, shutdown with runner processes still running)."""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spawned import TIMEOUT, ServerProcess

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])


@pytest.fixture
def prepared_db(tmp_path):
    """Root `root` with two ready continuable children `c1` and `c2`."""
    path = str(tmp_path / "runner.db")
    proc = ServerProcess(db=path)
    try:
        proc.host.initialize()
        proc.host.open("root")
        for child in ("c1", "c2"):
            started = proc.host.spawn("root", child, label=f"worker {child}")
            proc.host.end_turn(child, started["turn_id"], "completed", "first done")
    finally:
        assert proc.stop() == 0
    return path


def send(proc: ServerProcess, child: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    message = json.dumps({"steps": steps})
    result: dict[str, Any] = proc.host.call(
        "tools/call",
        {"name": "send_message", "arguments": {"subagent_id": child, "message": message}},
    )
    assert result["isError"] is False, result
    return result


def last_turn_end(db: str, agent_id: str) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT data FROM events WHERE session_id = ? AND type = 'turn_end'"
            " ORDER BY seq DESC LIMIT 1",
            (agent_id,),
        ).fetchone()
    data: dict[str, Any] = json.loads(row[0])
    return data


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_runner_output_never_reaches_stdout_and_the_root_is_held(prepared_db, loop):
    argv = ["--caller", "root", "--runner", RUNNER, "--event-loop", loop]
    proc = ServerProcess(*argv, db=prepared_db)
    try:
        proc.host.initialize(hostNotifications=True)  # agent/settled: asked for (PROTOCOL.md §5)
        steps = [{"print": "LEAK-MARKER on stdout\n"}, {"stderr": "LEAK-MARKER on stderr\n"}]
        send(proc, "c1", steps)
        assert proc.host.notification("agent/settled", agent_id="c1")["reason"] == "completed"
        listing = proc.host.call(
            "tools/call", {"name": "list_agents", "arguments": {"scope": "children"}}
        )
        assert listing["content"][0]["text"] == (
            "c1 [ready, last turn completed] — worker c1\nc2 [ready, last turn completed] — worker c2"
        )
    finally:
        assert proc.stop() == 0
    for line in proc.host.raw:
        frame = json.loads(line)  # every stdout line is a JSON-RPC frame
        assert frame["jsonrpc"] == "2.0"
        assert b"LEAK-MARKER" not in line
        assert frame.get("method") != "turn/start"  # c1's turn went to the runner; root is held
    assert last_turn_end(prepared_db, "c1")["output"] == "LEAK-MARKER on stdout"
    with sqlite3.connect(prepared_db) as conn:  # the settlement notice waits for the MCP client
        held = conn.execute(
            "SELECT content FROM inbox WHERE session_id = 'root' AND state = 'queued'"
        ).fetchall()
    assert json.loads(held[-1][0])[0]["text"] == (  # the last: c1's, as this process left it
        "Background subagent c1 finished and will do no further work unless you send it more."
    )


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_end_of_input_ends_the_turns_and_sends_the_runner_processes_sigterm(
    prepared_db, tmp_path, loop
):
    log = tmp_path / "log"
    argv = ["--caller", "root", "--runner", RUNNER, "--event-loop", loop]
    proc = ServerProcess(*argv, db=prepared_db)
    try:
        proc.host.initialize()
        steps = [{"wait_term": True, "log": str(log)}]
        send(proc, "c2", steps)
        deadline = time.monotonic() + TIMEOUT
        # "waiting" written, not merely the file created: SIGTERM between the two would lose it
        while not (log.exists() and log.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.close_stdin()
        assert proc.wait() == 0
    finally:
        proc.stop()
    assert log.read_text().splitlines() == ["waiting", "terminated"]
    end = last_turn_end(prepared_db, "c2")  # the host is gone: ended at once, as for any host
    assert (end["reason"], end["cause"]) == ("aborted", "shutdown")


def test_runner_without_caller_refuses_to_start(tmp_path):
    proc = ServerProcess("--runner", RUNNER, db=str(tmp_path / "x.db"))
    try:
        assert proc.wait() == 1
        assert "cannot start: --runner needs --caller" in proc.stderr_text()
    finally:
        proc.stop()
