"""`--db postgresql://...`: the real server on PostgreSQL over pipes, the same answers as on SQLite,
a restart keeps everything; how start-up treats a PostgreSQL URL (the operator commands on it:
tests/views/test_operator_backends.py)."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from subagentd.storage.postgres.group import WRITER_LOCK
from subagentd.storage.postgres.store import shown
from tests.spawned import ServerProcess


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path):
    """A new database: a SQLite file, or a PostgreSQL database's URL (the same checks on both)."""
    if request.param == "sqlite":
        return str(tmp_path / "smoke.db")
    return request.getfixturevalue("pg_stores").url()


def started(db: str, **kwargs) -> ServerProcess:
    proc = ServerProcess(db=db, **kwargs)
    proc.host.initialize()
    return proc


def test_serve_open_spawn_send_turns_list_and_a_restart_keeps_everything(database):
    proc = started(database)
    try:
        host = proc.host
        host.open("root")
        child = host.spawn("root", "c1", label="worker", prompt="first")
        assert [b["text"] for m in child["turn"]["messages"] for b in m["content"]] == ["first"]
        sent = host.tool("send_message", "root", subagent_id="c1", message="next")
        assert sent["text"] == "message queued as the next turn for subagent c1"
        assert host.tool("list_agents", "root")["text"] == "c1 [running] — worker"
        host.end_turn("c1", child["turn_id"], output="done")
        start = host.notification("turn/start", agent_id="c1")
        assert [m["message_id"] for m in start["messages"]] == [sent["message_id"]]
        host.end_turn("c1", start["turn_id"], output="done again")
        settled = host.notification("agent/settled", agent_id="c1")
        assert settled["reason"] == "completed"
        listed = host.tool("list_agents", "root")["text"]
        before = host.call("transcript/read", {"agent_id": "c1"})["events"]
        assert [e["type"] for e in before].count("turn_end") == 2
    finally:
        assert proc.stop() == 0

    again = started(database)  # a new process: everything comes from the database
    try:
        host = again.host
        assert host.call("transcript/read", {"agent_id": "c1"})["events"] == before
        assert host.call("messages/get", {"message_id": sent["message_id"]})["state"] == "claimed"
        host.open("root")
        assert host.tool("list_agents", "root")["text"] == listed
        assert host.call("agents/get", {"agent_id": "c1"})["status"] == "ready"
        resumed = host.tool("send_message", "root", subagent_id="c1", message="third")
        start = host.notification("turn/start", agent_id="c1")
        assert [m["message_id"] for m in start["messages"]] == [resumed["message_id"]]
        assert start["resume"]["label"] == "worker"
    finally:
        assert again.stop() == 0


def test_subagentd_db_names_the_postgresql_database(pg_stores):
    url = pg_stores.url()
    proc = ServerProcess(argv=["-m", "subagentd"], env={"SUBAGENTD_DB": url})
    try:
        proc.host.initialize()
        proc.host.open("from-env")
        log = proc.stderr_text()
    finally:
        assert proc.stop() == 0
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT id FROM sessions").fetchall() == [("from-env",)]
    assert f"database {shown(url)}" in log


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args], capture_output=True, text=True, timeout=60
    )


def test_an_unreachable_postgresql_refuses_to_start_in_one_line_without_its_password():
    done = run_cli(
        "--db", "postgresql://someone:s3cret@127.0.0.1:1/nowhere", "--log-format", "text"
    )
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert "cannot start: database postgresql://someone@127.0.0.1:1/nowhere cannot be opened:" in (
        line
    )
    assert "s3cret" not in done.stderr
    # libpq's reason is kept whole, on that one line: what the address answered (psycopg 3.2+
    # also repeats the address in it; 3.1 does not, and the URL before it names the address)
    assert "Connection refused" in line.split(" cannot be opened: ", 1)[1]
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_migration_the_role_may_not_run_is_refused_in_one_line(pg_stores):
    """A role without CREATE on the schema: PostgreSQL's primary message, not its DETAIL/HINT."""
    server = pg_stores.server
    name = f"bare{next(server._names)}"
    server.execute(f"CREATE DATABASE {name}")
    try:
        server.execute("DROP ROLE IF EXISTS subagentd_reader")
        server.execute("CREATE ROLE subagentd_reader LOGIN")
        admin = server.url(name)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        url = server.url(name).replace(f"{server.user}@", "subagentd_reader@")
        done = run_cli("--db", url, "--log-format", "text")
        assert done.returncode == 1 and done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].endswith(
            f"cannot start: database {shown(url)} cannot be migrated:"
            " permission denied for schema public"
        )
    finally:
        server.drop_database(name)
        server.execute("DROP ROLE IF EXISTS subagentd_reader")


def test_a_writer_lock_held_through_start_up_is_refused_in_one_line(pg_stores):
    """Crash recovery at start-up waits for the writer lock (another process's write, or the
    last statement of a killed one's) up to its patience, then says so in one line."""
    url = pg_stores.url()
    with psycopg.connect(url) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
        done = subprocess.run(
            [sys.executable, "-m", "subagentd", "--db", url, "--log-format", "text"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1 and done.stdout == ""
    lines = [line for line in done.stderr.strip().splitlines() if " INFO " not in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith(
        "cannot start: the database is locked by another process; retry with backoff"
        f" (database {shown(url)})"
    )


@pytest.mark.parametrize(
    ("url", "logged"),
    [
        ("postgresql://u:pw@h:5/d?sslmode=require", "postgresql://u@h:5/d?sslmode=require"),
        ("postgresql://postgres@/t1?host=/tmp/x&port=5", "postgresql://postgres@:5/t1?host=/tmp/x"),
        ("postgres://u:secret@h/d", "postgresql://u@h/d"),
        ("postgresql://h/d?bogus=1", "a PostgreSQL URL that libpq cannot parse"),
    ],
)
def test_logs_show_a_url_without_its_password(url, logged):
    assert shown(url) == logged
