"""Per-tree writers on PostgreSQL (PROTOCOL.md section 1, docs/architecture.md "Per-tree
writers"): a group holds the lock of each tree it writes (WRITER_LOCK shared, then the tree's
own), so writes to different trees never wait for each other, and writes to one tree still take
turns. Real processes over pipes on one PostgreSQL database; waits are observed in pg_locks and in
the processes' own lock-wait counters, never by timing.
"""

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from subagentd.storage.postgres.group import TREE_LOCKS, WRITER_LOCK, tree_key
from tests.processes.test_lock_wait import pipelined_bursts, queued_texts, send, sends
from tests.processes.test_multiprocess import PATIENCE, query, start, unread, wait_for


@contextmanager
def tree_group(db, root):
    """What another process's group writing the tree rooted at `root` holds, until the block ends."""
    with psycopg.connect(db) as pg:
        pg.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRITER_LOCK,))
        pg.execute("SELECT pg_advisory_xact_lock(%s, %s)", (TREE_LOCKS, tree_key(root)))
        try:
            yield
        finally:
            pg.rollback()


def waiting_locks(db):
    """(classid, objid, objsubid) of every advisory lock some backend waits for now."""
    with psycopg.connect(db, autocommit=True) as pg:
        return pg.execute(
            "SELECT classid::bigint, objid::bigint, objsubid FROM pg_locks"
            " WHERE locktype = 'advisory' AND NOT granted"
        ).fetchall()


def as_oid(key):
    return key & 0xFFFFFFFF


def test_a_write_to_one_tree_never_waits_for_a_group_writing_another(pg_stores, spawn_process):
    db = pg_stores.url()
    proc = start(spawn_process, db, "--lock-wait-ms=60000")
    host = proc.host
    for n in range(2):
        host.open(f"root{n}")
        host.spawn(f"root{n}", f"child{n}")
    before = host.call("server/stats")["lock_waits"]["count"]
    with tree_group(db, "root1"):  # another process is mid-group on tree root1
        write = host.start("send_message", send("root0", "child0", "to tree root0"))
        seen = []

        def answered_or_waiting():
            seen.extend(waiting_locks(db))
            return unread(host) > 0 or bool(seen)

        wait_for(answered_or_waiting, "the write is answered or waits for a lock")
        assert seen == []  # nobody waited: tree root0's group needs nothing root1's holds
        reply = host.response(write, PATIENCE)
        assert "error" not in reply, reply
        # the same process's write to root1 waits for that group, in PostgreSQL's lock queue
        other = host.start("send_message", send("root1", "child1", "to tree root1"))
        wanted = (TREE_LOCKS, as_oid(tree_key("root1")), 2)
        wait_for(lambda: wanted in waiting_locks(db), "the write to root1 waits for its lock")
        assert unread(host) == 0
    reply = host.response(other, PATIENCE)
    assert "error" not in reply, reply
    assert queued_texts(db, "child0") == ["to tree root0"]
    assert queued_texts(db, "child1") == ["to tree root1"]
    waits = host.call("server/stats")["lock_waits"]
    assert (waits["count"] - before, waits["gave_up"]) == (1, 0), waits  # root1's only


def test_two_processes_bursting_into_their_own_trees_never_wait_for_each_other(
    pg_stores, spawn_process
):
    db, count = pg_stores.url(), 400
    procs = [
        start(spawn_process, db, "--max-queued=0", "--lock-wait-ms=60000", "--lease-ttl=600")
        for _ in range(2)
    ]
    for n, proc in enumerate(procs):
        proc.host.open(f"root{n}")
        proc.host.spawn(f"root{n}", f"child{n}")
    before = [proc.host.call("server/stats")["lock_waits"]["count"] for proc in procs]
    bursts = [sends(f"p{n}-", f"root{n}", f"child{n}", count) for n in range(2)]
    seen: list = []
    done = threading.Event()

    def sample():  # every lock anyone waits for while both bursts run
        while not done.is_set():
            seen.extend(waiting_locks(db))

    sampler = threading.Thread(target=sample)
    writers = [
        threading.Thread(
            target=proc.host.send_bytes,
            args=(b"".join(json.dumps(r).encode() + b"\n" for r in burst),),
        )
        for proc, burst in zip(procs, bursts, strict=True)
    ]
    sampler.start()
    for writer in writers:
        writer.start()
    try:
        for proc, burst in zip(procs, bursts, strict=True):
            replies = [proc.host.response(r["id"], PATIENCE) for r in burst]
            assert [r.get("error") for r in replies] == [None] * count
    finally:
        done.set()
        sampler.join(PATIENCE)
        for writer in writers:
            writer.join(PATIENCE)
    trees = {as_oid(tree_key(f"root{n}")) for n in range(2)}
    assert [lock for lock in seen if lock[1] in trees or lock[1] == WRITER_LOCK] == []
    after = [proc.host.call("server/stats")["lock_waits"]["count"] for proc in procs]
    assert after == before  # neither process waited for the other's lock
    for n, burst in enumerate(bursts):
        assert queued_texts(db, f"child{n}") == [r["params"]["message"] for r in burst]


def test_two_processes_writing_one_tree_still_take_turns(pg_stores, spawn_process):
    db = pg_stores.url()
    a = start(spawn_process, db, "--lock-wait-ms=60000")
    b = start(spawn_process, db, "--lock-wait-ms=60000")
    a.host.open("root")
    a.host.spawn("root", "child")
    b.host.open("other")
    b.host.spawn("other", "elsewhere")
    with tree_group(db, "root"):  # a group of process a on tree root is open
        write = a.host.start("send_message", send("root", "child", "waits its turn"))
        wanted = (TREE_LOCKS, as_oid(tree_key("root")), 2)
        wait_for(lambda: wanted in waiting_locks(db), "the write waits for the tree's lock")
        assert unread(a.host) == 0
        # process b writes another tree meanwhile, answered while a still waits
        free = b.host.response(b.host.start("send_message", send("other", "elsewhere", "free")))
        assert "error" not in free, free
        assert unread(a.host) == 0
    reply = a.host.response(write, PATIENCE)
    assert "error" not in reply, reply
    assert queued_texts(db, "child") == ["waits its turn"]


# Each writing request the dispatcher confines to one tree (server/dispatcher.py TREE_SCOPED, and
# tools/call by its caller): (method, params on tree n, with its root, child and child's turn).
SCOPED_WRITES = {
    "spawn_agent": lambda n, turn: {"caller": f"root{n}", "label": "more", "prompt": "go"},
    "interrupt_agent": lambda n, turn: {"caller": f"root{n}", "agent_id": f"child{n}"},
    "report": lambda n, turn: {"caller": f"child{n}", "output": "found it"},
    "tools/call": lambda n, turn: {
        "name": "send_message",
        "arguments": {"subagent_id": f"child{n}", "message": "through MCP"},
        "_meta": {"subagentd/caller": f"root{n}"},
    },
    "agents/spawn": lambda n, turn: {"caller": f"root{n}", "label": "host", "prompt": "go"},
    "agents/followup": lambda n, turn: {"agent_id": f"root{n}", "message": "more work"},
    "agents/interrupt": lambda n, turn: {"agent_id": f"child{n}"},
    "agents/budget": lambda n, turn: {"agent_id": f"root{n}", "budget": {"max_turns": 50}},
    "agents/stop": lambda n, turn: {"agent_id": f"child{n}"},
    "turns/end": lambda n, turn: {"agent_id": f"child{n}", "turn_id": turn, "reason": "completed"},
    "transcript/append": lambda n, turn: {
        "agent_id": f"child{n}",
        "turn_id": turn,
        "events": [{"type": "note", "data": {"n": n}}],
    },
}


def answered_well(reply):
    result = reply.get("result")
    return "error" not in reply and not (isinstance(result, dict) and result.get("isError"))


@pytest.mark.parametrize("method", list(SCOPED_WRITES))
def test_every_tree_scoped_write_waits_for_its_own_tree_only(pg_stores, spawn_process, method):
    """The request on tree root0 runs while another process's group holds tree root1; the same
    request on root1 waits in PostgreSQL's lock queue for root1's key, never for WRITER_LOCK
    exclusive (every tree)."""
    db = pg_stores.url()
    proc = start(spawn_process, db, "--lock-wait-ms=60000")
    host = proc.host
    turns = []
    for n in range(2):
        host.open(f"root{n}")
        turns.append(host.spawn(f"root{n}", f"child{n}")["turn_id"])
    params = SCOPED_WRITES[method]
    with tree_group(db, "root1"):
        seen = []
        write = host.start(method, params(0, turns[0]))
        reply = host.response(write, PATIENCE)
        seen.extend(waiting_locks(db))
        assert answered_well(reply), reply
        assert seen == []
        other = host.start(method, params(1, turns[1]))
        wanted = (TREE_LOCKS, as_oid(tree_key("root1")), 2)
        wait_for(lambda: wanted in waiting_locks(db), f"{method} on root1 waits for its lock")
        assert all(lock[1] != WRITER_LOCK for lock in waiting_locks(db))
    reply = host.response(other, PATIENCE)
    assert answered_well(reply), reply


def test_a_runner_turn_end_takes_its_own_tree_lock_only(pg_stores, spawn_process):
    """Work outside a request (a --runner turn's end, written by the runner task; the tools/call
    that spawned it) is scoped to the agent's tree too: all of it is written while another
    process's group holds another tree, and nothing waits for a lock."""
    db = pg_stores.url()
    first = start(spawn_process, db)
    first.host.open("root0")
    assert first.stop() == 0
    runner = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
    proc = spawn_process(
        "--caller", "root0", "--runner", runner, "--lock-wait-ms=60000", "--lease-ttl=600", db=db
    )
    host = proc.host
    host.initialize(hostNotifications=True)
    host.call("tools/list", {})  # started: the start-up's every-tree writes are done
    with tree_group(db, "root1"):
        spawned = host.call(
            "tools/call",
            {"name": "spawn_agent", "arguments": {"label": "t", "prompt": "hello"}},
        )
        assert spawned["isError"] is False, spawned
        settled = host.notification("agent/settled", timeout=PATIENCE)
        assert settled["reason"] == "completed", settled
        assert waiting_locks(db) == []


def operator(*args):
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done
    return done.stdout


def test_operator_tools_and_waits_are_exact_while_groups_hold_every_live_tree(
    pg_stores, spawn_process
):
    """Two processes wrote their own trees at once; with a group of another process open on
    each of those trees, `stats`, `inspect` and `agents/wait_idle` answer at once and count
    every committed row, and `prune` deletes an old settled tree without waiting for them."""
    db, count = pg_stores.url(), 50
    procs = [start(spawn_process, db, "--lock-wait-ms=60000", "--lease-ttl=600") for _ in range(2)]
    bursts, writers = pipelined_bursts(procs, count)
    for proc, burst in zip(procs, bursts, strict=True):
        assert [proc.host.response(r["id"], PATIENCE).get("error") for r in burst] == [None] * count
    for writer in writers:
        writer.join(PATIENCE)
    # an old settled tree, written as a process of long ago would have left it
    old = start(spawn_process, db)
    old.host.open("ancient")
    assert old.stop() == 0
    with psycopg.connect(db, autocommit=True) as pg:
        pg.execute("UPDATE events SET at = '2020-01-01T00:00:00.000000Z'")
        pg.execute(
            "UPDATE sessions SET created_at = '2020-01-01T00:00:00.000000Z' WHERE id = 'ancient'"
        )
    with tree_group(db, "root0"), tree_group(db, "root1"):
        stats = json.loads(operator("stats", "--db", db))
        assert stats["queued_messages"] == 2 * count, stats
        listing = json.loads(operator("inspect", "--json", "--db", db))
        ids = {row["id"] for row in listing["sessions"]}
        assert ids == {"root0", "root1", "child0", "child1", "ancient"}, listing
        for n, proc in enumerate(procs):
            answer = proc.host.call("agents/wait_idle", {"agent_id": f"root{n}", "timeout_ms": 0})
            assert answer == {"idle": False, "running": [f"child{n}"]}, answer
        pruned = operator("prune", "--older-than", "1d", "--db", db)
        assert pruned.startswith("pruned 1 settled tree(s)"), pruned
        assert waiting_locks(db) == []
    for n in range(2):
        assert queued_texts(db, f"child{n}") == [r["params"]["message"] for r in bursts[n]]


def test_quiet_heartbeats_hold_up_no_tree(pg_stores, spawn_process):
    """A heartbeat with nothing to reap, fence, forget or take (read first, without a lock)
    takes no lock at all: beats every 0.5 s while another process's group holds a tree for
    several beats, and nobody ever waits for a lock. Once an owner lapses, a beat takes every
    tree's lock to fence it: not while that group holds its tree, at once after."""
    db = pg_stores.url()
    proc = start(spawn_process, db, "--lease-ttl=1.5", "--lock-wait-ms=60000")
    proc.host.open("root0")
    lapsed = "elsewhere:1:x:serve"  # a process of another host whose row expired
    seen = []
    with tree_group(db, "root1"):
        deadline = time.monotonic() + 2.0  # four beats
        while time.monotonic() < deadline:
            seen.extend(waiting_locks(db))
        assert seen == []
        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute(
                "INSERT INTO owners (owner, expires_at, fenced, wake) VALUES (%s, %s, 0, NULL)",
                (lapsed, time.time() - 10),
            )
        time.sleep(1.5)  # three beats: each due, none can take every tree's lock
        assert query(db, "SELECT fenced FROM owners WHERE owner = ?", lapsed) == [(0,)]
    wait_for(
        lambda: query(db, "SELECT fenced FROM owners WHERE owner = ?", lapsed) == [(1,)],
        "the lapsed owner is fenced",
    )
