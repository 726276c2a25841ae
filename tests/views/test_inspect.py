"""`subagentd inspect` reads a real database read-only: the forest, one transcript, JSON, corruption."""

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.spawned import ServerProcess


def inspect(*args):
    return subprocess.run(
        [sys.executable, "-m", "subagentd", "inspect", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
    )


@pytest.fixture
def db(tmp_path):
    """A database left by a real server that was killed with turns open, messages queued and parked."""
    path = str(tmp_path / "state.db")
    srv = ServerProcess(db=path)
    try:
        host = srv.host
        host.initialize()
        host.open("root", label="coordinator")
        host.spawn("root", "c1", label="researcher", prompt="Find the oldest bug")
        c2 = host.spawn("root", "c2", label="writer", prompt="one go", mode="one-shot")
        host.spawn("c1", "g1", label="leaf", prompt="dig")
        host.spawn("root", "c3", label="parker", prompt="wait")
        host.tool("send_message", "root", subagent_id="c1", message="also the closed ones")
        host.end_turn("c2", c2["turn_id"], "completed", "written")
        host.notification("agent/settled", agent_id="c2")
        host.tool("report", "g1", output="found it in 2019")
        host.tool("send_message", "root", subagent_id="c3", message="first")
        host.tool("send_message", "root", subagent_id="c3", message="second")
        host.tool("interrupt_agent", "root", agent_id="c3")
        stop = host.notification("turn/interrupt", agent_id="c3")
        host.end_turn("c3", stop["turn_id"], "aborted")
        assert host.call("agents/get", {"agent_id": "c3"})["parked"] == 2
        # every acknowledged write is committed: a crash leaves c1 and g1 with open turns
        srv.proc.kill()
        srv.proc.wait()
        srv.close_stdin()  # stop() only closes it for a process that is still running
    finally:
        srv.stop()
    return path


def test_inspect_draws_the_forest_with_status_counts_and_last_reason(db):
    done = inspect("--db", db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"5 session(s) in {db}")
    assert lines[1:] == [
        'root "coordinator" ordinary, ready, queued 0, parked 0, last —',
        '├─ c1 "researcher" continuable, open turn, queued 2, parked 0, last —',
        '│  └─ g1 "leaf" continuable, open turn, queued 0, parked 0, last —',
        '├─ c2 "writer" one-shot, ready, queued 0, parked 0, last completed',
        '└─ c3 "parker" continuable, ready, queued 0, parked 2, last aborted',
    ]


def test_inspect_agent_shows_its_header_and_transcript_in_order(db):
    done = inspect("--db", db, "c1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == 'c1 "researcher" continuable, open turn, queued 2, parked 0, last —'
    assert lines[1].startswith("parent root, created ")
    assert lines[2] == "children g1"
    kinds = [line.split()[3] for line in lines[3:]]
    assert kinds == ["descriptor", "activated", "message", "turn_start"]
    assert 'mode continuable, label "researcher"' in lines[3]
    assert 'coordinator/spawn from root: "Find the oldest bug"' in lines[5]
    seqs = [int(line.split()[0]) for line in lines[3:]]
    assert seqs == sorted(seqs)

    leaf = inspect("--db", db, "g1").stdout
    assert "reported as message" in leaf and '"found it in 2019"' in leaf
    parker = inspect("--db", db, "c3").stdout
    assert "interrupt (cause parent by root)" in parker
    assert "aborted" in parker


def test_inspect_json_has_the_forest_and_the_transcript(db):
    forest = json.loads(inspect("--db", db, "--json").stdout)
    rows = forest["sessions"]
    assert [(r["id"], r["depth"]) for r in rows] == [
        ("root", 0),
        ("c1", 1),
        ("g1", 2),
        ("c2", 1),
        ("c3", 1),
    ]
    c3 = rows[-1]
    assert c3["kind"] == "continuable" and c3["parked"] == 2 and c3["last_reason"] == "aborted"
    assert rows[1]["status"] == "open turn" and rows[1]["queued"] == 2

    agent = json.loads(inspect("--db", db, "c2", "--json").stdout)
    assert agent["agent"]["kind"] == "one-shot"
    assert [e["type"] for e in agent["events"]][:4] == [
        "descriptor",
        "activated",
        "message",
        "turn_start",
    ]
    end = next(e for e in agent["events"] if e["type"] == "turn_end")
    assert end["data"]["reason"] == "completed" and end["data"]["output"] == "written"


def test_inspect_shows_a_corrupt_descriptor_instead_of_crashing(db):
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE descriptors SET body = '{' WHERE session_id = 'c1'")
        conn.execute("UPDATE descriptors SET body = '{\"version\": 7}' WHERE session_id = 'c3'")
    conn.close()
    done = inspect("--db", db)
    assert done.returncode == 0, done.stderr
    assert '├─ c1 "researcher" corrupt descriptor, open turn' in done.stdout
    assert '└─ c3 "parker" unsupported descriptor, ready' in done.stdout
    assert inspect("--db", db, "c1").stdout.startswith('c1 "researcher" corrupt descriptor')
    rows = json.loads(inspect("--db", db, "--json").stdout)["sessions"]
    assert rows[1]["kind"] == "corrupt descriptor"


def test_inspect_survives_a_parent_cycle(db):
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE sessions SET parent_id = 'g1' WHERE id = 'c1'")
    conn.close()
    done = inspect("--db", db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[1:]
    assert len(lines) == 5
    assert lines[-2:] == [
        'c1 "researcher" continuable, open turn, queued 2, parked 0, last — (parent cycle)',
        '└─ g1 "leaf" continuable, open turn, queued 0, parked 0, last —',
    ]


def test_inspect_of_a_missing_database_exits_2_with_a_message(tmp_path):
    missing = tmp_path / "nowhere.db"
    done = inspect("--db", str(missing))
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"no database file at {missing}" in done.stderr
    assert not missing.exists()


def test_inspect_of_an_unknown_agent_is_an_error(db):
    done = inspect("--db", db, "nobody")
    assert done.returncode == 1
    assert "no agent 'nobody'" in done.stderr


HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m\u202egnp.exe\u200b"


@pytest.fixture
def hostile_db(tmp_path):
    """Model-written text with terminal escapes (title, clipboard, clear screen, C1 CSI, bidi)."""
    from subagentd.storage.database import SqliteStore
    from tests.core_host import CoreHost

    path = str(tmp_path / "hostile.db")
    core = CoreHost(SqliteStore(path))
    core.open("root", label=HOSTILE)
    core.spawn("root", "c1", label=HOSTILE, prompt=HOSTILE)
    core.report("c1", HOSTILE)
    core.end("c1", "completed", HOSTILE)
    core.store.close()
    return path


def run_on_a_terminal(*args: str) -> bytes:
    """`subagentd inspect` with a pseudo-terminal as stdout: what the operator's terminal gets."""
    import os
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "subagentd", "inspect", *args],
            stdout=follower,
            stderr=subprocess.PIPE,
        )
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return out
    finally:
        os.close(leader)


@pytest.mark.parametrize("args", [(), ("c1",), ("root",), ("--json",), ("c1", "--json")])
def test_inspect_never_writes_a_control_character_a_model_wrote(hostile_db, args):
    out = run_on_a_terminal("--db", hostile_db, *args).decode()
    text = out.replace("\r\n", "\n")  # the terminal's own line discipline
    assert all(line.isprintable() for line in text.split("\n")), repr(text)
    assert "pwned" in text  # shown, escaped, not obeyed
    if "--json" not in args:
        assert "\\x1b]0;pwned\\x07" in text and "\\u202e" in text


def test_inspect_json_escapes_are_lossless(hostile_db):
    done = inspect("--db", hostile_db, "c1", "--json")
    assert done.stdout.isprintable() or done.stdout[:-1].isprintable()
    agent = json.loads(done.stdout)
    report = next(e for e in agent["events"] if e["type"] == "report")
    assert report["data"]["output"] == HOSTILE


def test_inspect_reads_a_database_an_older_subagentd_left_unmigrated(tmp_path):
    """Only the first migration's tables and columns are read: nothing is migrated, nothing written."""
    from sqlite_utils import Database

    from subagentd.storage.migrations import migrations

    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path, isolation_level=None)
    migrations.apply(Database(conn), stop_before="m002_leases")
    conn.executemany(
        "INSERT INTO sessions (id, parent_id, kind, label, created_at, depth, open_turn_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            ("root", None, "ordinary", None, "2026-01-01T00:00:00.000Z", 0, None),
            ("c1", "root", "subagent", "old", "2026-01-01T00:00:01.000Z", 1, "t1"),
        ],
    )
    conn.execute(
        "INSERT INTO descriptors (session_id, body) VALUES"
        ' (\'c1\', \'{"version": 1, "mode": "one-shot", "label": "old"}\')'
    )
    conn.execute(
        "INSERT INTO inbox (message_id, session_id, content, source, state, created_at)"
        " VALUES ('m1', 'c1', '[]', '{}', 'queued', '2026-01-01T00:00:02.000Z')"
    )
    conn.execute(
        "INSERT INTO events (session_id, turn_id, type, data, at) VALUES"
        " ('c1', 't1', 'turn_start', '{\"turn_id\": \"t1\", \"message_ids\": [\"m1\"]}',"
        " '2026-01-01T00:00:03.000Z')"
    )
    conn.close()
    before = (tmp_path / "old.db").read_bytes()

    done = inspect("--db", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "root ordinary, ready, queued 0, parked 0, last —",
        '└─ c1 "old" one-shot, open turn, queued 1, parked 0, last —',
    ]
    agent = inspect("--db", path, "root").stdout.splitlines()
    assert agent[2] == "children c1"
    leaf = inspect("--db", path, "c1").stdout.splitlines()
    assert leaf[-1].split()[3:] == ["turn_start", "turn", "t1", "with", "1", "message(s)"]
    assert (tmp_path / "old.db").read_bytes() == before


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"version": 1, "mode": "continuable"}', "corrupt"),  # no label
        ('{"version": true, "mode": "continuable", "label": "x"}', "corrupt"),
        ('{"version": 2, "mode": "continuable", "label": "x"}', "unsupported"),
        ("[1]", "corrupt"),
        (None, "corrupt"),
    ],
)
def test_inspect_judges_a_descriptor_as_the_server_does(tmp_path, body, reason):
    """One reading of descriptors (core/descriptors.py): what the server lists as a diagnostic,
    inspect shows with the same reason."""
    from subagentd.storage.database import SqliteStore
    from tests.core_host import CoreHost

    path = str(tmp_path / "d.db")
    core = CoreHost(SqliteStore(path))
    core.open("root")
    core.spawn("root", "c1", label="x")
    if body is None:
        core.store.conn.execute("DELETE FROM descriptors WHERE session_id = 'c1'")
    else:
        core.store.conn.execute("UPDATE descriptors SET body = ? WHERE session_id = 'c1'", (body,))
    assert core.list("root").text == f"c1 [diagnostic: {reason}]"
    core.store.close()
    done = inspect("--db", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].startswith(f'└─ c1 "x" {reason} descriptor, ')


def test_the_reader_cannot_write(hostile_db):
    """storage/reader.py: the connection is opened read-only and its tables refuse to begin."""
    from subagentd.storage.reader import ReadOnly, StoreReader
    from subagentd.storage.sessions import Sessions

    reader = StoreReader(hostile_db)
    try:
        assert [s.id for s in sorted(reader.all_sessions(), key=lambda s: s.id)] == ["c1", "root"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.conn.execute("UPDATE sessions SET label = 'x'")
        with pytest.raises(sqlite3.OperationalError, match="read-only"):
            Sessions(ReadOnly(reader.conn)).set_open_turn("c1", "t")
    finally:
        reader.close()
