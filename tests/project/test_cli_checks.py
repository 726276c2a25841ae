"""Options are checked before anything is created or "serving" is logged: a refused serve leaves
no database file (not even the default one in the state directory) and says one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TIMEOUT = 120


def serve(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize(
    "args, refusal",
    [
        (
            ["--runner", "cat"],
            "cannot start: --runner needs --caller: it runs the turns of the agents below that root",
        ),
        (["--runner", "", "--caller", "root"], "cannot start: --runner is empty"),
    ],
    ids=["runner-without-caller", "empty-runner"],
)
def test_a_refused_option_creates_nothing_and_logs_no_serving(tmp_path, args, refusal):
    done = serve(tmp_path, *args)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.endswith(f"ERROR subagentd: {refusal}"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no state directory, no database


def test_a_refused_option_with_a_database_path_leaves_no_file(tmp_path):
    done = serve(tmp_path, "--db", str(tmp_path / "agents.db"), "--runner", "cat")
    assert done.returncode == 1
    assert "serving" not in done.stderr
    assert not (tmp_path / "agents.db").exists()
