"""MCP tasks through kill -9 (PROTOCOL.md sections 5 and 7): a host pipelines task-augmented
spawns and ends child turns without waiting, subagentd is SIGKILLed at a random moment, and the
next process on the same database must show no acknowledged task lost, every task made with its
spawn or not at all, and no task left `working` for a child that settled.

`SUBAGENTD_CRASH_SEED` replays one run (the seed is in every assertion message).
"""

from __future__ import annotations

import os
import random
import sqlite3
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from subagentd.client.errors import ConnectionClosed
from subagentd.storage.postgres import is_postgres
from tests.spawned import ServerProcess

SEED = int(os.environ.get("SUBAGENTD_CRASH_SEED", str(random.SystemRandom().randrange(2**32))))
WAIT = 30.0
ROUNDS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def crash_db(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "crash-tasks.db")
    return request.getfixturevalue("pg_stores").url()


def start(db: str) -> ServerProcess:
    proc = ServerProcess("--spawn-tool", "on", db=db)
    try:
        proc.host.call("initialize", {"protocolVersion": "2025-11-25", "clientInfo": {"name": "t"}})
    except ConnectionClosed:
        raise AssertionError(
            f"subagentd did not start (seed {SEED}): {proc.stderr_text()}"
        ) from None
    proc.host.response(proc.host.start("agents/get", {"agent_id": "-"}))  # recovery committed
    return proc


def rows(db: str, sql: str) -> list[dict[str, Any]]:
    if is_postgres(db):
        with psycopg.connect(db, row_factory=dict_row, autocommit=True) as conn:
            return list(conn.execute(sql))
    lite = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=WAIT)
    lite.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in lite.execute(sql)]
    finally:
        lite.close()


def load(proc: ServerProcess, root: str, rng: random.Random) -> dict[str, str]:
    """Pipeline task spawns and child turn ends until the kill; the acknowledged tasks' ids by
    child (every frame the process wrote before it died is read)."""
    host = proc.host
    host.call("agents/open", {"agent_id": root})
    kill_at = rng.randint(1, 40)  # killed once that many spawns are acknowledged, others in flight
    spawns: dict[int, str] = {}
    try:
        for n in range(60):  # below --max-children: every spawn is accepted
            spawns[
                host.start(
                    "tools/call",
                    {
                        "name": "spawn_agent",
                        "arguments": {"label": "l", "prompt": "p", "child_id": f"{root}-c{n}"},
                        "task": {},
                        "_meta": {"subagentd/caller": root},
                    },
                )
            ] = f"{root}-c{n}"
            while len(spawns) - len([i for i in spawns if i in host.responses]) > 8:
                host.next_frame(WAIT)  # a few in flight when the kill comes
            host.poll()
            if len([i for i in spawns if i in host.responses]) >= kill_at:
                proc.proc.kill()
            for note in host.drain_notifications():
                params = note.get("params") or {}
                if note.get("method") == "turn/start" and params["agent_id"] != root:
                    reason = rng.choice(["completed", "completed", "error"])
                    host.start(
                        "turns/end",
                        {
                            "agent_id": params["agent_id"],
                            "turn_id": params["turn_id"],
                            "reason": reason,
                        },
                    )
    except (OSError, ConnectionClosed):
        pass
    proc.proc.kill()
    try:
        while True:
            host.next_frame(WAIT)
    except ConnectionClosed:
        pass
    acked = {}
    for request_id, child in spawns.items():
        reply = host.responses.get(request_id)
        if reply is not None and "result" in reply:
            assert reply["result"]["task"]["status"] == "working", f"{reply} (seed {SEED})"
            acked[child] = reply["result"]["task"]["taskId"]
    return acked


@pytest.mark.timeout(300)
def test_acknowledged_tasks_survive_kill_nine_and_none_stays_working_for_a_settled_child(
    crash_db,
):
    rng = random.Random(SEED)
    db = crash_db
    checked = 0
    proc = start(db)
    try:
        for number in range(ROUNDS):
            root = f"root{number}"
            acked = load(proc, root, rng)
            proc.stop()
            where = f"(seed {SEED}, round {number})"
            tasks = {r["agent_id"]: r for r in rows(db, "SELECT * FROM tasks")}
            children = {
                r["id"] for r in rows(db, "SELECT id FROM sessions WHERE parent_id IS NOT NULL")
            }
            for child, task_id in acked.items():  # no acknowledged task lost
                assert tasks[child]["task_id"] == task_id, f"{child} {where}"
            # a task is made with its spawn or not at all
            assert set(tasks) == children, f"{set(tasks) ^ children} {where}"

            proc = start(db)
            proc.host.call("agents/open", {"agent_id": root})
            sessions = {r["id"]: r for r in rows(db, "SELECT * FROM sessions")}
            for child, row in tasks.items():
                if not child.startswith(f"{root}-"):
                    continue
                got = proc.host.call(
                    "tasks/get", {"taskId": row["task_id"], "_meta": {"subagentd/caller": root}}
                )
                ended = sessions[child]["last_reason"]
                expected = "completed" if ended == "completed" else "failed"
                assert got["status"] == expected, f"{child} ({ended}): {got} {where}"
                checked += 1
    finally:
        proc.proc.kill()
        proc.stop()
    assert checked > 0, f"no task was made before the kills (seed {SEED})"
