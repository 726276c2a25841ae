"""@a2a-js/sdk's client (the A2A project's own JavaScript SDK, installed with the TypeScript client's
dev dependencies) drives `subagentd a2a` from Node: a send, a follow-up in the same task, a stream,
a cancel of a slow task and the list (tests/peers/a2a-js/client.mjs; docs/a2a.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.processes.test_a2a_face import Face, steps
from tests.tools import require

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "clients" / "typescript" / "node_modules" / "@a2a-js" / "sdk"
SCRIPT = ROOT / "tests" / "peers" / "a2a-js" / "client.mjs"


@pytest.fixture
def face(tmp_path: Path):
    made = Face(tmp_path)
    yield made
    made.stop()
    made.stop_background()


def test_the_a2a_js_client_sends_follows_up_streams_cancels_and_lists(face, tmp_path):
    require("node")  # node 20 or newer, with npm (scripts/setup-dev installs the SDK)
    node = shutil.which("node") or "node"
    assert SDK.is_dir(), "run scripts/setup-dev (npm ci in clients/typescript)"
    config = {
        "sdk": str(SDK),
        "url": face.url,
        "streamed": steps({"tool": "report", "args": {"output": "halfway"}}, {"print": "end"}),
        "slow": steps({"print": "waiting"}, {"wait_term": True}),
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [node, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-5000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    task_id = seen["first"]["id"]
    assert seen["first"] == {"id": task_id, "state": "TASK_STATE_COMPLETED", "text": "done: hello"}
    assert seen["again"] == {"id": task_id, "state": "TASK_STATE_COMPLETED", "text": "done: again"}
    stream = seen["stream"]
    assert stream[0][0] == "task"
    assert ["status", "TASK_STATE_WORKING", "halfway"] in stream
    assert stream[-1][:2] == ["status", "TASK_STATE_COMPLETED"]
    assert stream[-1][2].endswith("end")
    assert seen["cancelled"]["state"] == "TASK_STATE_CANCELED"
    listed = dict(seen["listed"])
    assert listed[task_id] == "TASK_STATE_COMPLETED"
    assert listed[seen["cancelled"]["id"]] == "TASK_STATE_CANCELED"
    assert len(listed) == 3
