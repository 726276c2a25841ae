"""The official TypeScript MCP SDK's `experimental.tasks` client (2025-11-25 shape) drives
`subagentd --caller root --runner <the scripted runner>` over stdio, in two client processes
(tests/peers/ts-tasks/client.mjs): spawn A and B as tasks, poll A to its end, stream B, close the
client while B runs; a new client process lists both, collects both results, streams a task to
its end and cancels another.

Closing the client ends its serving process, and with it the turn B was running: B's task is
found by the next client as `failed` with the stop notice (the task, its state and its result
survive; B's work does not). A's result, completed before the close, is collected by the new
client.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tools import require

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "clients" / "typescript" / "node_modules" / "@modelcontextprotocol" / "sdk"
SCRIPT = ROOT / "tests" / "peers" / "ts-tasks" / "client.mjs"
RUNNER = shlex.join([sys.executable, str(ROOT / "tests" / "scripts" / "runner.py")])
TIMEOUT = 120
STREAMED = [
    "taskCreated",
    "taskStatus:working",
    "taskStatus:completed",
    "result",
]  # a task's stream
FINISHED = "Background subagent {} finished and will do no further work unless you send it more."
CANCELLED = (
    "the task was cancelled (tasks/cancel); subagent c was asked to stop its current turn,"
    " and what it sends later reaches you through wait_agents"
)


def client_process(
    program: str, phase: str, config: dict[str, Any], tmp_path: Path, script: Path = SCRIPT
) -> Any:
    """`program script phase config.json` (one client process); the JSON line it printed last."""
    path = tmp_path / f"{phase}.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [program, str(script), phase, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(3 * TIMEOUT)
def test_the_typescript_sdk_tasks_client_polls_streams_reconnects_and_cancels(tmp_path):
    require("node")  # node 20 or newer, with npm (scripts/setup-dev installs the SDK)
    node = shutil.which("node") or "node"
    assert (SDK / "package.json").is_file(), "run scripts/setup-dev (npm ci in clients/typescript)"
    assert json.loads((SDK / "package.json").read_text())["version"].startswith("1.")
    db = str(tmp_path / "tasks.db")
    config: dict[str, Any] = {
        "sdk": str(SDK),
        "command": sys.executable,
        "args": ["-m", "subagentd", "--db", db, "--caller", "root", "--runner", RUNNER],
        "env": {**os.environ, "PYTHONPATH": str(ROOT)},
    }
    first = client_process(node, "first", config, tmp_path)
    assert first["capabilities"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert first["execution"]["spawn_agent"] == {"taskSupport": "optional"}
    assert first["execution"]["send_message"] == {"taskSupport": "optional"}
    assert first["execution"]["wait_agents"] is None
    created_a, created_b = first["created"]
    assert (created_a["status"], created_a["ttl"], created_a["pollInterval"]) == (
        "working",
        600000,
        1000,
    )
    assert first["polls"] >= 1 and first["a"]["status"] == "completed"
    a_result = [  # one block: nothing lost to a client that shows only the first
        "\n".join(
            [
                FINISHED.format("a"),
                "Its closing message:",
                "done: summarize the logs",
                "none of the subagents waited for is still working",
            ]
        )
    ]
    assert first["aResult"] == a_result
    assert first["bStreamed"] == "working"
    ids = first["ids"]
    assert first["listed"] == [[ids["a"], "completed"], [ids["b"], "working"]]
    assert [ids["a"], "completed"] in first["statuses"]  # notifications/tasks/status

    second = client_process(node, "second", {**config, "ids": ids}, tmp_path)
    assert second["listed"] == [[ids["a"], "completed"], [ids["b"], "failed"]]
    assert second["a"] == first["a"]
    assert second["aResult"] == a_result
    assert second["b"]["status"] == "failed"
    assert second["b"]["statusMessage"] == "Background subagent b was stopped before it finished."
    assert second["bResult"] == {
        "isError": True,
        "texts": [
            "Background subagent b was stopped before it finished.\n"
            "It left no closing message.\n"
            "none of the subagents waited for is still working"
        ],
    }
    assert second["dStream"] == STREAMED
    assert second["dResult"][0].split("\n")[2] == "done: check the disk"
    assert (second["cancelled"]["status"], second["cancelled"]["statusMessage"]) == (
        "cancelled",
        CANCELLED,
    )
    assert second["cResult"] == [CANCELLED]
    task_c = second["cancelled"]["taskId"]
    assert second["cancelAgain"] == {
        "code": -32602,
        "message": f"MCP error -32602: task {task_c} is already cancelled; a finished task"
        " cannot be cancelled",
    }
    assert second["missing"] == {
        "code": -32602,
        "message": "MCP error -32602: task not found: no-such-task",
    }
    assert [task_c, "cancelled"] in second["statuses"]
