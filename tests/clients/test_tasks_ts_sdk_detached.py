"""The official TypeScript MCP SDK's `experimental.tasks` client (2025-11-25 shape) through
`subagentd --caller root --runner … --detach on` (tests/peers/ts-tasks/client.mjs): spawn A and
B as tasks, poll A and stream B, close the client while both run, and a new client process (a new
front process, the same background process) finds both *completed*, collects both results,
streams a task to its end and cancels another. Both turns went on while no client was connected."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.clients.test_tasks_ts_sdk import (
    CANCELLED,
    FINISHED,
    RUNNER,
    SDK,
    STREAMED,
    TIMEOUT,
    client_process,
)
from tests.tools import require


@pytest.mark.timeout(3 * TIMEOUT)
def test_the_typescript_sdk_tasks_outlive_the_client_through_the_detached_process(tmp_path):
    require("node")
    node = shutil.which("node") or "node"
    assert (SDK / "package.json").is_file(), "run scripts/setup-dev (npm ci in clients/typescript)"
    runtime = tempfile.mkdtemp(prefix="sd-", dir="/tmp")  # a socket path stays short
    go = tmp_path / "go"
    b_prompt = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "b went on alone"}]})
    a_prompt = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "a went on alone"}]})
    config: dict[str, Any] = {
        "sdk": str(SDK),
        "command": sys.executable,
        "args": ["-m", "subagentd", "--db", str(tmp_path / "tasks.db"), "--caller", "root"]
        + ["--runner", RUNNER, "--detach", "on"],
        "env": {**os.environ, "PYTHONPATH": str(Path.cwd()), "XDG_RUNTIME_DIR": runtime},
        "bPrompt": b_prompt,
        "aPrompt": a_prompt,  # A is polled, B streamed, and both run when the client closes
    }
    try:
        first = client_process(node, "first", config, tmp_path)
        ids = first["ids"]
        assert first["polls"] == 2 and first["a"]["status"] == "working"
        assert first["listed"] == [[ids["a"], "working"], [ids["b"], "working"]]
        go.touch()  # both turns end while no client is connected
        second = client_process(node, "second", {**config, "ids": ids, "bFirst": True}, tmp_path)
    finally:
        stop_background(runtime)
    assert second["listed"] == [[ids["a"], "completed"], [ids["b"], "completed"]]
    assert second["aResult"] == [  # one content block: a client that keeps one block loses nothing
        FINISHED.format("a")
        + "\nIts closing message:\na went on alone"
        + "\nnone of the subagents waited for is still working"
    ]
    assert second["b"]["status"] == "completed"
    assert second["bResult"] == {
        "isError": False,
        "texts": [  # one content block: a client that keeps one block loses nothing
            FINISHED.format("b")
            + "\nIts closing message:\nb went on alone"
            + "\nnone of the subagents waited for is still working"
        ],
    }
    assert second["dStream"] == STREAMED
    assert (second["cancelled"]["status"], second["cResult"]) == ("cancelled", [CANCELLED])


def stop_background(runtime: str) -> None:
    """SIGTERM to the background process whose files are in `runtime`; wait for its exit."""
    (pid_file,) = Path(runtime, "subagentd").glob("*.pid")
    pid = json.loads(pid_file.read_text())["pid"]  # the pid file is one JSON object
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + TIMEOUT
    while Path(f"/proc/{pid}").exists() and b" Z " not in _stat(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    shutil.rmtree(runtime, ignore_errors=True)


def _stat(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b" Z "
