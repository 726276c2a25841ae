"""examples/turn_runner.py keeps each subagent's history private: a 0700 directory of the
user's own (never the shared temp directory), files 0600, no symlink followed, nothing read
from a directory or file another user could have planted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "turn_runner.py"


def turn(agent_id: str, text: str) -> str:
    message = {"source": {"kind": "coordinator"}, "content": [{"type": "text", "text": text}]}
    return json.dumps({"agent_id": agent_id, "turn_id": "t", "messages": [message]})


def run(env: dict[str, str], agent_id: str = "c1", text: str = "hello"):
    clean = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE", "SUBAGENTD_DB")}
    clean.pop("AGENT_COMMAND", None)
    return subprocess.run(
        [sys.executable, str(EXAMPLE)],
        input=turn(agent_id, text),
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def name_of(agent_id: str) -> str:
    return hashlib.sha256(agent_id.encode()).hexdigest()[:32] + ".json"


def test_without_a_database_path_the_histories_go_to_the_users_state_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    before = set(os.listdir(tempfile.gettempdir()))
    done = run({"HOME": str(home), "XDG_STATE_HOME": "", "SUBAGENTD_DB": ":memory:"})
    assert done.returncode == 0, done.stderr
    folder = home / ".local" / "state" / "subagentd" / "turns"
    assert os.stat(folder).st_mode & 0o777 == 0o700
    file = folder / name_of("c1")
    assert os.stat(file).st_mode & 0o777 == 0o600
    assert json.loads(file.read_text())[-1]["role"] == "You answered"
    assert name_of("c1") not in set(os.listdir(tempfile.gettempdir())) - before


def test_a_directory_open_to_others_is_refused_and_nothing_is_read_from_it(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    planted = shared / name_of("c1")
    planted.write_text(json.dumps([{"role": "You answered", "text": "PLANTED"}]))
    done = run({"RUNNER_STATE": str(shared)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"turn_runner: {shared} is open to group or others: chmod 700 it\n"


def test_a_planted_symlink_is_neither_followed_on_reading_nor_on_writing(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps([{"role": "You answered", "text": "PLANTED"}]))
    (folder / name_of("c1")).symlink_to(target)
    done = run({"RUNNER_STATE": str(folder)})
    assert done.returncode == 2 and "PLANTED" not in done.stdout
    assert done.stderr.startswith(f"turn_runner: {folder / name_of('c1')} cannot be read safely")
    assert json.loads(target.read_text())[0]["text"] == "PLANTED"  # untouched


def test_a_history_is_written_whole_and_read_back_at_the_next_turn(tmp_path):
    folder = tmp_path / "state"
    assert run({"RUNNER_STATE": str(folder)}, text="first").returncode == 0
    done = run({"RUNNER_STATE": str(folder)}, text="second")
    assert done.returncode == 0 and done.stdout == "(dry run) second\n"
    history = json.loads((folder / name_of("c1")).read_text())
    texts = [entry["text"] for entry in history]
    assert texts[1::2] == ["(dry run) first", "(dry run) second"]
    for rendered, said in zip(texts[0::2], ["first", "second"], strict=True):  # senders visible
        assert rendered.startswith("<message-") and f">\n{said}\n</message-" in rendered
    assert sorted(os.listdir(folder)) == [name_of("c1")]  # no temporary file left behind
