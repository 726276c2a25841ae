"""`subagentd serve --caller root --runner … --detach on`: real front processes over real pipes,
one background subagentd per database and root behind them (a SQLite file, or a PostgreSQL
database). The client going away (its stdin closed) stops nothing; the next front process
attaches and `wait_agents` returns what happened meanwhile.

Longer than ~300 lines on purpose: the background process's whole life cycle (start, sharing,
a client gone mid-call, idle stop, SIGKILL, the lock) is driven through one set of helpers.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = shlex.join([sys.executable, str(ROOT / "tests" / "scripts" / "runner.py")])
PATIENCE = 60.0
FINISHED = "Background subagent {} finished and will do no further work unless you send it more."


class Detached:
    """Front processes for one database and root, and the files of their background process."""

    def __init__(self, db: str, runtime: str, *more: str) -> None:
        self.db = db
        self.runtime = runtime
        self.env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "PYTHONPATH": str(ROOT)}
        self.argv = [sys.executable, "-m", "subagentd", "serve", "--db", db, "--caller", "root"]
        self.argv += ["--runner", RUNNER, "--detach", "on", *more]
        self.fronts: list[Front] = []

    def front(self) -> Front:
        front = Front(self.argv, self.env)
        self.fronts.append(front)
        return front

    def file(self, suffix: str) -> Path:
        (found,) = Path(self.runtime, "subagentd").glob(f"*.{suffix}")
        return found

    def pid(self) -> int:
        return int(json.loads(self.file("pid").read_text())["pid"])

    def log(self) -> str:
        return self.file("log").read_text()

    def stop(self) -> None:
        for front in self.fronts:
            front.close()
        try:
            pid = self.pid()
        except (ValueError, OSError):
            return
        _kill(pid, signal.SIGTERM)
        wait_gone(pid)


class Front:
    """One front process: an MCP client's stdio server, as the client starts it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT
        )
        self.ids = 0
        self.notes: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, "the front process closed stdout"
            message = json.loads(line)
            if message.get("id") == self.ids and "method" not in message:
                return message
            self.notes.append(message)

    def initialize(self) -> dict[str, Any]:
        reply = self.call(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply["result"]

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        reply = self.call("tools/call", {"name": name, "arguments": arguments})
        return reply["result"]

    def close(self) -> int:
        """The client goes away: its end of stdin closed; the front's exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        code = self.proc.wait(timeout=PATIENCE)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def texts(result: dict[str, Any]) -> list[str]:
    """The lines of the one content block (a client that shows only the first loses nothing)."""
    (block,) = result["content"]
    return str(block["text"]).split("\n")


def wait_for_file(steps_file: Path) -> str:
    return json.dumps({"steps": [{"wait_file": str(steps_file)}, {"print": "finished"}]})


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def watchdog_of(pid: int) -> int:
    """The runs' watchdog (runners/watchdog.py) the process `pid` started."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue
        if parent == pid and any(arg.endswith(b"watchdog.py") for arg in argv):
            return int(name)
    raise AssertionError(f"process {pid} has no watchdog")


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", "postgres"])
def detached(request, tmp_path):
    """A factory of front-process sets (extra serve options as arguments); stopped at the end."""
    db = str(tmp_path / "d.db") if request.param == "sqlite" else None
    if db is None:
        db = request.getfixturevalue("pg_stores").url()
    runtime = tempfile.mkdtemp(prefix="sd-", dir="/tmp")  # a socket path stays short
    made: list[Detached] = []

    def make(*more: str) -> Detached:
        one = Detached(db, runtime, *more)
        made.append(one)
        return one

    yield make
    for one in made:
        one.stop()
    shutil.rmtree(runtime, ignore_errors=True)


def test_a_childs_turn_outlives_the_client_and_the_next_front_collects_it(detached, tmp_path):
    d = detached()
    first = d.front()
    first.initialize()
    go = tmp_path / "go"
    spawned = first.tool("spawn_agent", label="a", prompt=wait_for_file(go), child_id="a")
    assert texts(spawned) == ["started subagent a"]
    assert first.close() == 0  # the client is gone; the child's turn goes on
    background = d.pid()
    assert alive(background)
    go.touch()
    second = d.front()
    second.initialize()
    waited = second.tool("wait_agents", timeout_ms=50_000)
    assert texts(waited) == [
        FINISHED.format("a"),
        "Its closing message:",
        "finished",
        "none of the subagents waited for is still working",
    ]
    assert d.pid() == background  # the same background process served both
    assert second.close() == 0


def test_two_fronts_at_once_attach_to_one_background_process(detached):
    d = detached()
    one, two = d.front(), d.front()  # started together: they race to start it
    assert one.initialize()["serverInfo"] == two.initialize()["serverInfo"]
    one.tool("spawn_agent", label="x", prompt="look", child_id="x")
    waited = two.tool("wait_agents", timeout_ms=50_000)  # the child one spawned, seen by two
    assert texts(waited)[:3] == [FINISHED.format("x"), "Its closing message:", "done: look"]
    log = d.log()
    assert log.count("detached: pid ") == 1, log
    assert "(2 attached)" in log
    assert [p.name for p in Path(d.runtime, "subagentd").glob("*.sock")] == [d.file("sock").name]
    assert d.file("sock").stat().st_mode & 0o777 == 0o600
    assert Path(d.runtime, "subagentd").stat().st_mode & 0o777 == 0o700


def test_the_idle_timeout_stops_the_background_process_once_nothing_runs(detached, tmp_path):
    d = detached("--idle-timeout", "0.2")
    front = d.front()
    front.initialize()
    go = tmp_path / "go"
    front.tool("spawn_agent", label="a", prompt=wait_for_file(go), child_id="a")
    assert front.close() == 0
    background = d.pid()
    assert alive(background)  # a turn runs: no idle timeout yet
    go.touch()
    wait_gone(background)
    # it stopped cleanly, and took its files with it: socket, pid, lock, start, log, runs
    assert [p.name for p in Path(d.runtime, "subagentd").iterdir()] == []
    again = d.front()  # the next front starts a new one, which finds the child's report queued
    again.initialize()
    assert texts(again.tool("wait_agents", timeout_ms=50_000))[2] == "finished"
    assert d.pid() != background


def test_a_sigkilled_background_process_crash_is_recorded_and_its_runs_stopped(detached, tmp_path):
    d = detached()
    front = d.front()
    front.initialize()
    started = tmp_path / "started"
    steps = [{"append": str(started), "text": "started"}, {"sleep": 600}]
    front.tool("spawn_agent", label="a", prompt=json.dumps({"steps": steps}), child_id="a")
    runs = d.file("runs")
    deadline = time.monotonic() + PATIENCE
    while not started.exists():  # it read its turn and runs
        assert time.monotonic() < deadline, "the runner did not start"
        time.sleep(0.05)
    (pid_file,) = runs.iterdir()
    runner = int(pid_file.name)
    assert alive(runner)
    background = d.pid()
    os.kill(watchdog_of(background), signal.SIGKILL)  # else it stops the runs at once
    os.kill(background, signal.SIGKILL)
    wait_gone(background)
    assert front.proc.wait(timeout=PATIENCE) == 1  # its background process went away
    assert alive(runner), d.log()  # its own process group: the kill did not reach it
    again = d.front()
    again.initialize()
    wait_gone(runner)  # found through its pid file and stopped by the new background process
    waited = again.tool("wait_agents", timeout_ms=50_000)
    assert texts(waited) == [
        "Background subagent a failed before it finished.",
        "It left no closing message.",
        "none of the subagents waited for is still working",
    ]
    (agent,) = waited["structuredContent"]["agents"]
    assert (agent["agent_id"], agent["reason"]) == ("a", "error"), agent
    assert "recorded 1 turn(s) left open by a crash" in d.log()
    assert "stopped 1 runner process(es) left by a crash" in d.log()


def test_a_sigkilled_background_process_leaves_no_acp_agent_process_running(detached, tmp_path):
    """The agent exits once its stdin ends (the background process's death closes it); what it
    started lives on in its process group, and the next background process stops that group
    although its leader is gone."""
    agent = shlex.join([sys.executable, str(ROOT / "tests" / "scripts" / "acp_agent.py")])
    d = detached("--runner", agent, "--runner-protocol", "acp")
    d.env["ACP_AGENT_STATE"] = str(tmp_path / "agent-state")
    front = d.front()
    front.initialize()
    pid_path, spawned, waiting = tmp_path / "agent.pid", tmp_path / "spawned", tmp_path / "waiting"
    steps = {
        "acp": [{"pid": str(pid_path)}, {"spawn": str(spawned)}, {"wait_cancel": str(waiting)}]
    }
    front.tool("spawn_agent", label="a", prompt=json.dumps(steps), child_id="a")
    deadline = time.monotonic() + PATIENCE
    while not waiting.exists():  # the agent process prompts the child's session
        assert time.monotonic() < deadline, "the ACP agent did not start prompting"
        time.sleep(0.05)
    acp_pid, sleeper = int(pid_path.read_text()), int(spawned.read_text())
    try:
        assert [p.name for p in d.file("runs").iterdir()] == [str(acp_pid)]
        background = d.pid()
        os.kill(background, signal.SIGKILL)
        wait_gone(background)
        assert front.proc.wait(timeout=PATIENCE) == 1
        wait_gone(acp_pid)  # its stdin ended: the agent exited
        assert alive(sleeper)  # in the agent's own process group: no kill reached it
        again = d.front()
        again.initialize()
        wait_gone(sleeper)  # its group found through the pid file, stopped by the new process
        assert "stopped 1 runner process(es) left by a crash" in d.log(), d.log()
    finally:
        _kill(sleeper, signal.SIGKILL)


def test_a_new_front_per_call_keeps_a_child_working_across_calls(detached, tmp_path):
    d = detached()
    go = tmp_path / "go"

    def per_call(name: str, **arguments: Any) -> dict[str, Any]:
        front = d.front()  # as LangChain's default and the MCP Inspector CLI connect
        front.initialize()
        result = front.tool(name, **arguments)
        assert front.close() == 0
        return result

    per_call("spawn_agent", label="a", prompt=wait_for_file(go), child_id="a")
    listed = per_call("list_agents")
    assert [(a["id"], a["status"]) for a in listed["structuredContent"]["agents"]] == [
        ("a", "running")
    ]
    go.touch()
    assert texts(per_call("wait_agents", timeout_ms=50_000))[:3] == [
        FINISHED.format("a"),
        "Its closing message:",
        "finished",
    ]


def test_a_later_front_with_other_options_is_told_they_are_ignored(detached):
    d = detached()
    first = d.front()
    first.initialize()
    other = Detached(d.db, d.runtime, "--max-running", "2")
    proc = subprocess.Popen(
        other.argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=other.env,
        cwd=ROOT,
    )
    _, err = proc.communicate(b"", timeout=PATIENCE)
    assert proc.returncode == 0
    assert "this client's differ and are ignored: stop it to change them" in err.decode(), (
        err.decode()
    )


def test_a_front_gone_mid_wait_consumes_nothing_and_the_next_one_gets_the_report(
    detached, tmp_path
):
    d = detached()
    first = d.front()
    first.initialize()
    go = tmp_path / "go"
    first.tool("spawn_agent", label="a", prompt=wait_for_file(go), child_id="a")
    first.send(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "wait_agents", "arguments": {"timeout_ms": 50000}},
        }
    )
    first.proc.kill()  # the client's server process dies while its wait is unanswered
    first.proc.wait(timeout=PATIENCE)
    deadline = time.monotonic() + PATIENCE
    while "client 1 went away" not in d.log():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    go.touch()
    second = d.front()
    second.initialize()
    assert texts(second.tool("wait_agents", timeout_ms=50_000))[:3] == [
        FINISHED.format("a"),
        "Its closing message:",
        "finished",
    ]


def test_detach_without_a_runner_refuses_to_start(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "serve", "--db", str(tmp_path / "x.db")]
        + ["--caller", "root", "--detach", "on"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "cannot start: --detach on needs --runner: the background process runs the root's turns"
    ), done.stderr


def test_a_second_background_process_for_the_same_root_refuses_to_start(detached):
    d = detached()
    front = d.front()
    front.initialize()
    first = d.pid()
    done = subprocess.run(  # started as a front starts one, while the first one listens
        d.argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env={**d.env, "_SUBAGENTD_DETACHED": "1"},
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "cannot start: another background process serves this database and root"
    ), done.stderr
    assert d.pid() == first and alive(first)


def test_a_killed_process_not_yet_reaped_counts_as_gone():
    from subagentd.storage import owner_ids

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + PATIENCE
    while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    owner = owner_ids.new_owner()
    host, _, rest = owner.partition(":")
    pid, _, tail = rest.partition(":")
    assert owner_ids.owner_alive(owner)  # this process
    assert not owner_ids.owner_alive(f"{host}:{child.pid}:{tail}")  # a zombie: gone
    child.wait()
