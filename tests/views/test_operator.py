"""Operators: server/stats, `subagentd stats`, and `subagentd prune` / `serve --retention`, with a
live server holding leases on the same database."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from tests.spawned import TIMEOUT, ServerProcess

OLD = "2020-01-01T00:00:00.000000Z"
TREES = {"old": ["old", "old-c"], "queued": ["queued"], "recent": ["recent", "recent-c"]}
TREES["live"] = ["live"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args], capture_output=True, timeout=TIMEOUT
    )


def one_shot_tree(host, root: str, child: str) -> None:
    host.open(root)
    spawned = host.spawn(root, child, mode="one-shot")
    host.end_turn(child, spawned["turn_id"], "completed", "done")
    host.notification("agent/settled", agent_id=child)
    host.call("agents/close", {"agent_id": root})


def age(db, roots) -> None:
    """Make every row of these trees look written in 2020 (from a connection of our own)."""
    ids = [i for root in roots for i in TREES[root]]
    marks = ",".join("?" * len(ids))
    conn = sqlite3.connect(db, timeout=30)
    with conn:
        conn.execute(f"UPDATE sessions SET created_at = ? WHERE id IN ({marks})", [OLD, *ids])
        conn.execute(f"UPDATE events SET at = ? WHERE session_id IN ({marks})", [OLD, *ids])
        conn.execute(f"UPDATE inbox SET created_at = ? WHERE session_id IN ({marks})", [OLD, *ids])
    conn.close()


def counts(db, ids) -> tuple[int, int, int]:
    conn = sqlite3.connect(db, timeout=30)
    marks = ",".join("?" * len(ids))
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t} WHERE {c} IN ({marks})", ids).fetchone()[0]
            for t, c in (("sessions", "id"), ("events", "session_id"), ("inbox", "session_id"))
        )
    finally:
        conn.close()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Four trees: old and settled, old with queued work, recent, and old but live (later)."""
    db = str(tmp_path_factory.mktemp("operator") / "agents.db")
    proc = ServerProcess(db=db)
    try:
        host = proc.host
        host.initialize()
        one_shot_tree(host, "old", "old-c")
        bulky = [{"type": "note", "data": "x" * 4000}] * 64  # pages a prune frees
        host.call("transcript/append", {"agent_id": "old", "events": bulky})
        one_shot_tree(host, "recent", "recent-c")
        for root in ("queued", "live"):
            host.open(root)
            host.call("agents/close", {"agent_id": root})
        host.call("agents/followup", {"agent_id": "queued", "message": "for your next activation"})
    finally:
        assert proc.stop() == 0
    age(db, ["old", "queued", "live"])
    return db


@pytest.fixture
def db(prepared, tmp_path):
    copy = str(tmp_path / "agents.db")
    shutil.copy(prepared, copy)
    return copy


def test_prune_deletes_only_the_settled_untouched_tree_while_a_live_server_holds_another(db):
    proc = ServerProcess(db=db)
    try:
        host = proc.host
        host.initialize()
        host.open("live")  # a lease on the live tree; its rows are then aged again
        age(db, ["live"])
        before = {root: counts(db, ids) for root, ids in TREES.items()}
        assert before["old"][1] > 0 and before["old"][2] > 0  # events and messages to prune
        assert before["queued"][2] == 1

        done = cli("prune", "--db", db, "--older-than", "30d")
        assert done.returncode == 0, done.stderr
        out = done.stdout.decode()
        assert out.startswith(
            f"pruned 1 settled tree(s) untouched for 30d: {before['old'][1]} event(s),"
            f" {before['old'][2]} message(s);"
        ), out
        freed = int(out.split("; ")[1].split(" bytes freed")[0])
        assert freed >= 64 * 4000

        after = {root: counts(db, ids) for root, ids in TREES.items()}
        assert after["old"] == (2, 0, 0)  # the sessions stay: listable, inspectable, reopenable
        for root in ("queued", "recent", "live"):
            assert after[root] == before[root], root

        # the live server did not notice: its agent is still live and can work
        assert host.call("agents/get", {"agent_id": "live"})["status"] == "idle"
        spawned = host.spawn("live", "live-c", mode="one-shot")
        host.end_turn("live-c", spawned["turn_id"], "completed", "ok")
        assert host.notification("agent/settled", agent_id="live-c")["reason"] == "completed"
        assert host.call("agents/get", {"agent_id": "old"})["status"] == "ready"
    finally:
        assert proc.stop() == 0


def test_with_no_server_every_tree_but_the_one_with_queued_work_is_prunable(db):
    age(db, ["recent"])
    done = cli("--db", db, "prune", "--older-than", "1s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("pruned 3 settled tree(s)")  # old, recent, live
    assert counts(db, TREES["queued"])[2] == 1  # ready with queued work: never pruned
    again = cli("prune", "--db", db, "--older-than", "1s")
    assert again.stdout.decode().startswith(
        "pruned 0 settled tree(s) untouched for 1s: 0 event(s), 0 message(s); 0 bytes freed"
    )


def test_serve_retention_prunes_at_start_up(db):
    proc = ServerProcess("--retention", "30d", "--log-level", "info", db=db)
    try:
        proc.host.initialize()
        assert proc.host.call("agents/get", {"agent_id": "old"})["status"] == "ready"
        proc.close_stdin()
        assert proc.wait() == 0
        assert "--retention: pruned 2 settled tree(s)" in proc.stderr_text()  # old and live
    finally:
        proc.stop()
    assert counts(db, TREES["old"]) == (2, 0, 0)
    assert counts(db, TREES["queued"])[2] == 1


@pytest.mark.parametrize("value", ["-30d", "soon", "30x", ""])
def test_prune_refuses_a_duration_it_cannot_read(db, value):
    done = cli("prune", "--db", db, "--older-than", value)
    assert done.returncode == 2
    assert "Error: Invalid value for '--older-than'" in done.stderr.decode()


@pytest.mark.parametrize("value", ["30", "1.5"])
def test_a_duration_without_a_unit_is_refused_saying_the_units(db, value):
    done = cli("prune", "--db", db, "--older-than", value)
    assert done.returncode == 2
    assert done.stderr.decode().endswith(
        f"Error: Invalid value for '--older-than' (env var: 'SUBAGENTD_OLDER_THAN'): '{value}' has"
        f" no unit: write {value}d (days), {value}h, {value}m or {value}s\n"
    )
    serve = cli("--db", db, "--retention", value)
    assert serve.returncode == 2 and f"'{value}' has no unit" in serve.stderr.decode()


def test_a_dry_run_lists_what_would_go_and_the_bytes_and_deletes_nothing(db):
    age(db, ["recent"])
    before = {root: counts(db, ids) for root, ids in TREES.items()}
    done = cli("prune", "--db", db, "--older-than", "1s", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[:3] == [
        f"would prune tree {root} ({len(TREES[root])} session(s)): {before[root][1]} event(s),"
        f" {before[root][2]} message(s)"
        for root in ("live", "old", "recent")  # in root order; the queued tree is kept
    ]
    summary = lines[3]
    events = sum(before[r][1] for r in ("live", "old", "recent"))
    messages = sum(before[r][2] for r in ("live", "old", "recent"))
    assert summary.startswith(
        f"would prune 3 settled tree(s) untouched for 1s: {events} event(s), {messages}"
        " message(s); "
    ), summary
    assert summary.endswith(f" bytes would be freed inside {db} (--dry-run: nothing was deleted)")
    would_free = int(summary.split("; ")[1].split(" bytes")[0])
    assert len(lines) == 4
    assert {root: counts(db, ids) for root, ids in TREES.items()} == before
    real = cli("prune", "--db", db, "--older-than", "1s").stdout.decode()
    assert f"{events} event(s), {messages} message(s); {would_free} bytes freed" in real


def test_prune_and_stats_refuse_a_missing_database_without_creating_it(tmp_path):
    missing = tmp_path / "nope.db"
    for argv in (["prune", "--older-than", "1d"], ["stats"]):
        done = cli(*argv, "--db", str(missing))
        assert done.returncode == 1
        assert f"no database file at {missing}" in done.stderr.decode()
    assert not os.path.exists(missing)


def test_stats_reads_the_database_while_a_server_holds_it_and_server_stats_adds_its_own(db):
    proc = ServerProcess(db=db)
    try:
        host = proc.host
        host.initialize()
        host.open("live")
        spawned = host.spawn("live", "worker")  # continuable, running its first turn
        host.call("agents/followup", {"agent_id": "worker", "message": "then this"})

        figures = host.call("server/stats")
        assert figures["sessions"] == {"running": 1, "idle": 1, "ready": 5}
        assert (figures["live_agents"], figures["live_here"]) == (2, 2)
        assert (figures["queued_messages"], figures["parked_messages"]) == (2, 0)
        assert figures["oldest_queued_age_s"] > 365 * 86400  # the aged followup of "queued"
        assert figures["commits"] >= 3
        latency = figures["commit_latency"]
        assert 0 <= latency["p50_ms"] <= latency["p99_ms"]
        assert figures["database_bytes"] >= figures["free_bytes"] >= 0

        done = cli("stats", "--db", db)
        assert done.returncode == 0, done.stderr
        offline = json.loads(done.stdout)
        for key in ("live_here", "commits", "commit_latency"):  # this process's: not in a file
            assert key not in offline
        for key in ("sessions", "live_agents", "queued_messages", "parked_messages"):
            assert offline[key] == figures[key], key

        host.call("agents/interrupt", {"agent_id": "worker"})  # parks the queued followup
        host.end_turn("worker", spawned["turn_id"], "aborted")
        parked = host.call("server/stats")
        assert (parked["queued_messages"], parked["parked_messages"]) == (1, 1)
    finally:
        assert proc.stop() == 0


def test_prune_deletes_the_mcp_tasks_whose_lifetime_ended(tmp_path):
    db = str(tmp_path / "tasks.db")
    proc = ServerProcess("--spawn-tool", "on", db=db)
    host = proc.host
    host.call("initialize", {"protocolVersion": "2025-11-25", "clientInfo": {"name": "t"}})
    host.open("root")
    ids = []
    for ttl in (0, 0, 600_000):  # refused spawns make failed tasks: no child needed
        created = host.call(
            "tools/call",
            {
                "name": "spawn_agent",
                "arguments": {"label": "l", "prompt": "p", "child_id": "@x"},
                "task": {"ttl": ttl},
                "_meta": {"subagentd/caller": "root"},
            },
        )
        ids.append(created["task"]["taskId"])
    assert proc.stop() == 0
    dry = cli("prune", "--db", db, "--older-than", "30d", "--dry-run")
    assert dry.returncode == 0 and b"would prune 2 expired MCP task(s)\n" in dry.stdout
    done = cli("prune", "--db", db, "--older-than", "30d")
    assert done.returncode == 0 and done.stdout.endswith(b"pruned 2 expired MCP task(s)\n")
    conn = sqlite3.connect(db)
    left = [row[0] for row in conn.execute("SELECT task_id FROM tasks")]
    conn.close()
    assert left == [ids[2]]
