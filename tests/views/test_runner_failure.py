"""A `--runner` turn that failed says why where a user looks: `inspect` (the transcript),
`watch` (the last event) and the HTML timeline (the turn's details)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from subagentd.client import Client

RUNNER = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")]
LAST = "ModuleNotFoundError: No module named 'agentlib'"
STDERR = "Traceback (most recent call last):\n" + LAST + "\n"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "LINES": "40", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_failed_runner_is_named_by_inspect_watch_and_the_timeline(tmp_path):
    db = str(tmp_path / "failed.db")
    steps = json.dumps({"steps": [{"stderr": STDERR}, {"exit": 3}]})
    with Client.spawn("--runner", " ".join(RUNNER), db=db, caller="root") as client:
        client.initialize()
        client.call(
            "tools/call",
            {"name": "spawn_agent", "arguments": {"label": "t", "prompt": steps, "child_id": "c1"}},
        )
        client.call("tools/call", {"name": "wait_agents", "arguments": {"timeout_ms": 50_000}})
    said = f'runner exited with status 3, stderr ends "{LAST}"'
    inspected = cli("inspect", "--db", db, "c1").stdout
    assert f"settled (last turn error; {said})" in inspected
    assert f"error, {said}" in inspected  # the turn_end line
    watched = cli("watch", "--db", db, "--once").stdout
    assert 'runner exited with status 3, stderr ends "ModuleNotFoundError' in watched  # cut at 120
    page = tmp_path / "t.html"
    assert cli("inspect", "--db", db, "--html", str(page)).returncode == 0
    runner = json.dumps("exited with status 3; its stderr ended:\n" + STDERR.rstrip())
    assert f'"runner":{runner}' in page.read_text()
