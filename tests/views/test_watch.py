"""`subagentd watch`: one frame (`--once`), the collapsed 10k-agent tree, the incremental reads,
and the live screen in a real terminal (tmux) beside a server a scripted host drives."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid

import pytest

from subagentd.storage.reader import StoreReader
from subagentd.view.snapshot import Snapshot
from tests.processes.test_question_crash import c1_asks
from tests.spawned import ServerProcess
from tests.tools import require
from tests.view_runs import busy_run, large_run

WAIT = 30.0  # seconds: generous bound for anything the loaded machine has to draw


def watch(db: str, *args: str, lines: int = 50, columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "LINES": str(lines), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "subagentd", "watch", "--db", db, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        env=env,
    )


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.fixture
def busy_db(tmp_path):
    """A database a real server left with turns open, messages queued and parked, one settled."""
    path = str(tmp_path / "state.db")
    srv = ServerProcess(db=path)
    try:
        host = srv.host
        host.initialize()
        busy_run(host)
    finally:
        srv.stop()
    return path


def test_once_prints_one_frame_of_the_tree(busy_db):
    done = watch(busy_db, "--once")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"subagentd watch {busy_db}  4 agent(s): ")
    assert "; 1 queued, 2 parked, 1500 tokens" in lines[0]
    assert columns(lines[1]) == [
        "agent",
        "status",
        "queued",
        "parked",
        "turn",
        "used",
        "last event",
    ]
    rows = {columns(line)[0]: columns(line)[1:] for line in lines[2:]}
    assert list(rows) == [
        "root coordinator",
        "├─ c1 researcher",
        "├─ c2 writer",
        "└─ c3 parker",
    ]
    # the host closed stdin: every session was released, so none is "open turn" in storage
    assert rows["├─ c2 writer"][:3] == ["ready (completed)", "·", "·"]
    assert rows["├─ c2 writer"][-2] == "1500 0.25"  # its own turn's usage
    assert rows["root coordinator"][-2] == "·"
    assert rows["└─ c3 parker"][:3] == ["ready (aborted)", "·", "2"]
    assert rows["├─ c1 researcher"][1] == "1"
    assert re.fullmatch(r"settled [\d.]+s ago \(last turn completed\)", rows["├─ c2 writer"][-1])
    assert re.fullmatch(r"settled [\d.]+s ago \(last turn closed\)", rows["└─ c3 parker"][-1])
    assert re.fullmatch(r"closed [\d.]+s ago by the host", rows["root coordinator"][-1])


def test_once_below_a_root_and_for_an_unknown_one(busy_db):
    done = watch(busy_db, "--once", "c3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"subagentd watch {busy_db} below c3  1 agent(s): ")
    assert [columns(line)[0] for line in lines[2:]] == ["c3 parker"]
    unknown = watch(busy_db, "--once", "nobody")
    assert unknown.returncode == 0
    assert "no agent 'nobody' (yet)" in unknown.stdout


def test_watch_refuses_a_missing_database_and_says_when_rich_is_absent(tmp_path, busy_db):
    missing = watch(str(tmp_path / "none.db"), "--once")
    assert missing.returncode == 2
    assert missing.stderr == f"subagentd watch: no database file at {tmp_path / 'none.db'}\n"
    code = (
        "import sys; sys.modules['rich'] = None; from subagentd.cli import main;"
        f" sys.exit(main(['watch', '--db', {busy_db!r}, '--once']))"
    )
    no_rich = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert no_rich.returncode == 1
    assert no_rich.stderr == (
        "cannot start: subagentd watch needs rich, from the watch extra: pip install '.[watch]'"
        " in your clone of subagentd (with pipx: pipx inject subagentd rich)\n"
    )


@pytest.fixture(scope="module")
def ten_thousand(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("large") / "large.db")
    core = large_run(path, leads=50, workers=199)  # 1 + 50 + 9,950 = 10,001 agents
    yield path, core
    core.store.conn.close()


def test_ten_thousand_agents_fold_into_one_screen(ten_thousand):
    path, _ = ten_thousand
    began = time.monotonic()
    done = watch(path, "--once", lines=40, columns=160)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    print(f"watch --once over 10,001 agents: {took:.2f}s")
    assert len(lines) <= 40
    assert "10001 agent(s): 11 in a turn, 9990 ready" in lines[0]
    drawn = [columns(line) for line in lines[2:]]
    busy = ["root conductor"] + [f"lead-{i} lead {i}" for i in range(4, 50, 5)]
    # every agent in a turn is on screen, each followed by its 199 idle workers folded in one line
    assert drawn[0][0] == busy[0]
    assert [row[0].lstrip("├└│─ ") for row in drawn[1::2]] == busy[1:] + ["… 40 more idle"]
    for row in drawn[2::2]:
        assert row == [
            "│",
            "└─ … 199 more idle",
            "199 agent(s): 156 completed, 28 aborted, 15 error",
        ]
    assert drawn[-1][1] == "8000 agent(s): 6280 completed, 1120 aborted, 600 error"
    # a short terminal: cut at the end, with a count of what is not shown
    short = watch(path, "--once", lines=12, columns=160).stdout.splitlines()
    assert len(short) == 11  # the header, the column names, 9 rows; the cursor's line is left free
    assert columns(short[-1]) == [
        "… 9399 more agent(s) not shown",
        "give a ROOT, or use a taller terminal",
    ]
    assert took < WAIT


def test_a_change_is_read_alone_and_quickly_on_ten_thousand_agents(ten_thousand):
    path, core = ten_thousand
    reader = StoreReader(path)
    try:
        began = time.monotonic()
        snapshot = Snapshot(reader)
        loaded = time.monotonic() - began
        assert len(snapshot.sessions) == 10_001
        reads = snapshot.reads
        for _ in range(20):  # nothing committed: nothing read
            assert snapshot.refresh() is False
        assert snapshot.reads == reads
        assert not reader.conn.in_transaction  # no read transaction held between looks
        with core.svc.transaction():
            core.spawn("lead-4", "late", label="late one", prompt="one more")
        core.svc.commit()
        began = time.monotonic()
        assert snapshot.refresh() is True
        refreshed = time.monotonic() - began
        assert snapshot.sessions["late"].status == "open turn"
        assert snapshot.last["late"].kind == "turn_start"
        assert snapshot.last["late"].turn_started is not None
        assert snapshot.sessions["lead-4"].status == "open turn"
        assert not reader.conn.in_transaction
        print(
            f"10,001 agents: first read {loaded:.3f}s, a one-agent change {refreshed * 1000:.1f} ms"
        )
        assert refreshed < 1.0
    finally:
        reader.close()


class Tmux:
    """A tmux server of our own (its own socket, no config), one window running a command.

    The server runs in the foreground (-D) as our child: daemonizing needs a /dev/null device,
    which some containers lack."""

    def __init__(self, command: str, width: int = 160, height: int = 40) -> None:
        require("tmux")
        self.socket = f"subagentd-test-{uuid.uuid4().hex[:8]}"
        self.server = subprocess.Popen(
            ["tmux", "-L", self.socket, "-f", os.devnull, "-D"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        )  # the pane's size, not one pytest's environment may carry
        began = time.monotonic()
        while True:  # until the server listens
            done = self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), command)
            if done.returncode == 0:
                break
            assert self.server.poll() is None, "the tmux server exited"
            assert time.monotonic() - began < WAIT, done.stderr
            time.sleep(0.05)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )

    def screen(self) -> str:
        done = self.tmux("capture-pane", "-p")
        assert done.returncode == 0, done.stderr
        return done.stdout

    def wait_for(self, pattern: str) -> float:
        """Seconds until the screen matches `pattern` (a regex); fails after WAIT."""
        began = time.monotonic()
        while time.monotonic() - began < WAIT:
            if re.search(pattern, self.screen(), re.MULTILINE):
                return time.monotonic() - began
            time.sleep(0.01)
        raise AssertionError(f"{pattern!r} never shown; the screen:\n{self.screen()}")

    def close(self) -> None:
        self.tmux("kill-server")
        try:
            self.server.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


def test_watch_in_a_terminal_follows_a_running_server(tmp_path):
    path = str(tmp_path / "live.db")
    srv = ServerProcess(db=path)
    term = None
    try:
        host = srv.host
        host.initialize()
        host.open("root", label="coordinator")
        term = Tmux(shlex.join([sys.executable, "-m", "subagentd", "watch", "--db", path]))
        term.wait_for(r"^root coordinator\s+ready")
        delays = []
        host.spawn("root", "c1", label="researcher", prompt="Find the oldest bug")
        delays.append(
            term.wait_for(r"^└─ c1 researcher\s+open turn\s+·\s+·\s+[\d.]+s\s+turn_start")
        )
        host.tool("send_message", "root", subagent_id="c1", message="also the closed ones")
        delays.append(term.wait_for(r"^└─ c1 researcher\s+open turn\s+1\s+·"))
        stop_sent = host.tool("interrupt_agent", "root", agent_id="c1")
        assert stop_sent is not None
        delays.append(term.wait_for(r"^└─ c1 researcher\s+open turn\s+·\s+1\s+.*interrupt"))
        stop = host.notification("turn/interrupt", agent_id="c1")
        host.end_turn("c1", stop["turn_id"], "aborted")
        delays.append(term.wait_for(r"^└─ c1 researcher\s+ready \(aborted\)\s+·\s+1\s+"))
        screen = term.screen()
        (tmp_path / "watch.txt").write_text(screen)
        assert re.search(r"2\sagent\(s\):\s0 in a turn, 2 ready; 0 queued, 1 parked", screen), (
            screen
        )
        print("watch redraw after a host's acknowledged write (s):", [round(d, 3) for d in delays])
        assert max(delays) < 5.0  # drawn within ~250 ms here; generous for a loaded machine
    finally:
        if term is not None:
            term.close()
        srv.stop()


def test_once_shows_a_child_waiting_for_its_answer(tmp_path):
    """A child's open ask_parent question: `waiting` while the server runs, then its turn
    again once the parent answered."""
    path = str(tmp_path / "asking.db")
    srv = ServerProcess(db=path)
    try:
        host = srv.host
        asking, _ = c1_asks(host)  # the question reached the parent
        rows = {
            columns(line)[0]: columns(line)[1:]
            for line in watch(path, "--once").stdout.splitlines()[2:]
        }
        assert rows["└─ c1 fixer"][0] == "waiting"
        assert rows["└─ c1 fixer"][-1].startswith("question ")
        host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "b.py"})
        assert host.response(asking)["result"]["answered"] is True
        rows = {
            columns(line)[0]: columns(line)[1:]
            for line in watch(path, "--once").stdout.splitlines()[2:]
        }
        assert rows["└─ c1 fixer"][0] == "open turn"
    finally:
        srv.stop()


def test_once_shows_the_asker_and_those_above_it_waiting_for_the_person(tmp_path):
    """An open ask_user question: the asker and the agents above it in a turn are `waiting`
    while the person is asked, in their turn again once the person answered."""
    path = str(tmp_path / "asking-user.db")
    srv = ServerProcess("--ask-user", "on", db=path)
    try:
        host = srv.host
        host.initialize(askUser=True)
        host.open("root")
        host.spawn("root", "c1", label="planner")
        host.spawn("c1", "c2", label="cleaner")
        asking = host.start("ask_user", {"caller": "c2", "question": "Delete the backups?"})
        question_id = host.notification("question/ask")["question_id"]

        def statuses() -> dict[str, str]:
            lines = watch(path, "--once").stdout.splitlines()[2:]
            return {columns(line)[0]: columns(line)[1] for line in lines}

        assert statuses() == {
            "root": "ready",
            "└─ c1 planner": "waiting",
            "└─ c2 cleaner": "waiting",
        }
        host.call("question/answer", {"question_id": question_id, "action": "decline"})
        assert host.response(asking)["result"]["action"] == "decline"
        assert statuses() == {
            "root": "ready",
            "└─ c1 planner": "open turn",
            "└─ c2 cleaner": "open turn",
        }
    finally:
        srv.stop()
