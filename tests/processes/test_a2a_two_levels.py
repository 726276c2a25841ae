"""Two subagentd trees on two "machines" (two processes, two databases): the top one's child is
remote, its turns run on the bottom one's A2A face (`subagentd a2a`), whose child runs them with
--runner. A turn and a follow-up cross both levels in one conversation, and an interrupt at the
top stops the bottom's running turn (docs/a2a.md, "A remote child")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes.test_a2a_face import Face
from tests.spawned import TIMEOUT, ServerProcess


def steps(*items: dict[str, Any]) -> str:
    return json.dumps({"steps": list(items)})


class Top:
    """`subagentd serve --a2a-agent bottom=URL` driven over its pipes; root `root` opened."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.server = ServerProcess("--a2a-agent", f"bottom={url}", db=str(tmp / "top.db"))
        self.host = self.server.host
        self.host.initialize(statusEvents=True)
        self.host.open("root")

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        return self.host.call("transcript/read", {"agent_id": agent_id})["events"]

    def ends(self, agent_id: str, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 2 * TIMEOUT
        while True:
            ends = [e["data"] for e in self.events(agent_id) if e["type"] == "turn_end"]
            if len(ends) >= count:
                return ends
            assert time.monotonic() < deadline, self.server.stderr_text()
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def levels(tmp_path):
    bottom = Face(tmp_path, "broot")
    top = Top(tmp_path, bottom.url)
    yield top, bottom
    top.stop()
    bottom.stop()
    bottom.stop_background()


def bottom_tasks(bottom: Face) -> list[Any]:
    from a2a.types import ListTasksRequest

    from tests.processes.test_a2a_face import call, run

    return list(run(call, bottom.url, "list_tasks", ListTasksRequest()).tasks)


def get_task(bottom: Face, task_id: str) -> Any:
    from a2a.types import GetTaskRequest

    from tests.processes.test_a2a_face import call, run

    return run(call, bottom.url, "get_task", GetTaskRequest(id=task_id))


def spawn_far(top: Any) -> None:
    """The top's child `far`, whose turns run on the bottom's A2A face."""
    params = {"caller": "root", "child_id": "far", "label": "far", "prompt": "hello"}
    top.host.call("agents/spawn", {**params, "agent": {"a2a": "bottom"}})


def test_a_turn_and_its_follow_up_cross_two_levels_in_one_conversation(levels):
    top, bottom = levels
    spawn_far(top)
    [first] = top.ends("far")
    assert (first["reason"], first["output"]) == ("completed", "done: hello")
    top.host.call("send_message", {"caller": "root", "subagent_id": "far", "message": "again"})
    second = top.ends("far", 2)[1]
    assert (second["reason"], second["output"]) == ("completed", "done: again")
    [listed] = bottom_tasks(bottom)  # one subagent below, its two turns
    task = get_task(bottom, listed.id)
    assert [a.parts[0].text for a in task.artifacts] == ["done: hello", "done: again"]
    contexts = {e["data"]["context_id"] for e in top.events("far") if e["type"] == "a2a_task"}
    assert contexts == {task.id}


def test_an_interrupt_at_the_top_stops_the_bottoms_running_turn(levels):
    top, bottom = levels
    slow = steps({"print": "waiting"}, {"wait_term": True})
    top.host.call(
        "agents/spawn",
        {
            "caller": "root",
            "child_id": "far",
            "label": "far",
            "prompt": slow,
            "agent": {"a2a": "bottom"},
        },
    )
    deadline = time.monotonic() + TIMEOUT
    while not any(e["type"] == "a2a_task" for e in top.events("far")):
        assert time.monotonic() < deadline, top.server.stderr_text()
        time.sleep(0.05)
    top.host.call("interrupt_agent", {"caller": "root", "agent_id": "far"})
    [end] = top.ends("far")
    assert end["reason"] == "aborted"
    from a2a.types import TaskState

    deadline = time.monotonic() + TIMEOUT
    while (state := bottom_tasks(bottom)[0].status.state) != TaskState.TASK_STATE_CANCELED:
        assert time.monotonic() < deadline, state
        time.sleep(0.05)


def test_a_name_given_twice_is_refused_at_start(tmp_path):
    argv = [sys.executable, "-m", "subagentd", "--db", str(tmp_path / "x.db")]
    argv += ["--a2a-agent", "a=http://127.0.0.1:1/", "--a2a-agent", "a=http://127.0.0.1:2/"]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "cannot start: --a2a-agent a is given twice: one URL per NAME" in done.stderr


def test_a_malformed_agent_is_refused_by_the_option(tmp_path):
    argv = [sys.executable, "-m", "subagentd", "--db", str(tmp_path / "x.db")]
    done = subprocess.run(
        [*argv, "--a2a-agent", "no-url"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert "'no-url': give NAME=URL" in done.stderr


def test_inspect_and_watch_show_a_remote_child_as_such(levels, tmp_path):
    import os

    top, _ = levels
    spawn_far(top)
    top.ends("far")
    db = str(tmp_path / "top.db")
    shown = subprocess.run(
        [sys.executable, "-m", "subagentd", "inspect", "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if "far" in x]
    assert 'far "far" continuable (remote: A2A agent bottom), ready' in line
    agent = subprocess.run(
        [sys.executable, "-m", "subagentd", "inspect", "--db", db, "far"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert 'mode continuable, label "far", remote: A2A agent bottom' in agent
    assert "A2A task " in agent and " at bottom" in agent
    assert 'A2A completed: "done: hello"' in agent
    assert "A2A task ended completed" in agent
    env = {**os.environ, "COLUMNS": "200", "LINES": "20", "TERM": "dumb"}
    frame = subprocess.run(
        [sys.executable, "-m", "subagentd", "watch", "--db", db, "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    ).stdout
    assert "far far @a2a:bottom" in frame
