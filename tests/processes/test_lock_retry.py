"""Work outside a request that another process's write lock refuses waits for the lock in the
lock queue and tries again (wire/lockwait.py run_when_locked), the one way every caller does it:
the timers, the doorbell, shutdown, the runners' turn ends and transcripts, and the relay socket's
tool calls, which used to retry every 100 ms without waiting. A real process over pipes on
PostgreSQL (whose waiters pg_locks lists), and the helper's own sequence of waits and tries.
"""

import json
import shlex
import sys
import time
from pathlib import Path

import anyio
import psycopg

from subagentd.wire import lockwait
from tests.processes.test_lock_wait import foreign_lock
from tests.processes.test_multiprocess import PATIENCE, query, start, wait_for

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])


def test_a_turn_tool_call_under_another_process_lock_waits_in_the_queue_once(
    pg_stores, spawn_process, tmp_path
):
    db = pg_stores.url()
    first = start(spawn_process, db)
    first.host.open("root0")
    assert first.stop() == 0
    proc = spawn_process(
        "--caller", "root0", "--runner", RUNNER, "--lock-wait-ms=60000", "--lease-ttl=600", db=db
    )
    host = proc.host
    host.initialize(hostNotifications=True)
    go = tmp_path / "go"
    steps = [{"wait_file": str(go)}, {"tool": "report", "args": {"output": "from the turn"}}]
    arguments = {"label": "t", "prompt": json.dumps({"steps": steps})}
    spawned = host.call("tools/call", {"name": "spawn_agent", "arguments": arguments})
    assert spawned["isError"] is False, spawned
    with foreign_lock(db):
        go.touch()  # the turn calls `report` now, through the relay socket
        wait_for(lambda: waiters(db) != [], "the report waits for the lock")
        (waiting,) = waiters(db)
        time.sleep(0.5)  # a caller that polled would have ended that wait and begun others
        assert waiters(db) == [waiting]  # one statement waiting in the queue all along
    settled = host.notification("agent/settled", timeout=PATIENCE)
    assert settled["reason"] == "completed", settled
    sql = "SELECT data FROM events WHERE session_id = ? AND type = 'turn_end'"
    ((end,),) = query(db, sql, settled["agent_id"])
    assert json.loads(end)["output"].startswith("report -> 0"), end  # the call succeeded


def waiters(db):
    """(pid, when its statement began) of each backend waiting for an advisory lock now."""
    with psycopg.connect(db, autocommit=True) as pg:
        return pg.execute(
            "SELECT a.pid, a.query_start FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND NOT l.granted"
        ).fetchall()


def test_refused_work_waits_for_the_lock_again_before_each_try():
    steps: list[str] = []
    refusals = iter([False, False, True])

    async def lock() -> None:
        steps.append("wait")

    def run() -> bool:
        steps.append("try")
        return next(refusals)

    anyio.run(lockwait.run_when_locked, lock, run)
    assert steps == ["wait", "try", "wait", "try", "wait", "try"]
