"""A write waits its turn for another process's write lock instead of being refused (PROTOCOL.md
section 1, a locked database): real processes over pipes, on a shared SQLite file and on a shared
PostgreSQL database; the foreign lock is a sqlite3 connection's BEGIN IMMEDIATE or a psycopg
connection's writer advisory lock. Waits are on replies, each bounded generously.
"""

import json
import sqlite3
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest

from subagentd.core.settings import Settings
from subagentd.errors import LeaseLostError
from subagentd.server.dispatcher import Dispatcher
from subagentd.server.handlers import METHODS
from subagentd.storage.database import SqliteStore
from subagentd.storage.postgres import is_postgres
from subagentd.storage.postgres.group import WRITER_LOCK
from subagentd.wire.session import Session
from tests.core_host import FakeClock
from tests.processes.test_multiprocess import PATIENCE, query, start, unread

LOCKED = "the database is locked by another process; retry with backoff"
BUSY = {  # as a direct tool method (send_message) answers it: with the model-visible text
    "code": 1011,
    "message": LOCKED,
    "data": {"reason": "busy", "text": f"Error: {LOCKED}"},
}


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request, tmp_path):
    """The database the test's processes share: a SQLite file, or a PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return request.getfixturevalue("pg_stores").url()


@contextmanager
def foreign_lock(db):
    """Another process's write lock on the shared database, held until the block ends."""
    if is_postgres(db):
        with psycopg.connect(db) as pg:  # a transaction: the lock goes with its rollback
            pg.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
            try:
                yield
            finally:
                pg.rollback()
        return
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def send(caller, child, text):
    return {"caller": caller, "subagent_id": child, "message": text}


def sends(prefix, caller, child, count):
    return [
        {
            "jsonrpc": "2.0",
            "id": f"{prefix}{i}",
            "method": "send_message",
            "params": send(caller, child, f"{prefix}{i}"),
        }
        for i in range(count)
    ]


def pipelined_bursts(procs, count):
    """Process n opens root{n} and spawns child{n}, then each pipelines `count` sends to its
    child from a thread, all at once: the bursts and the started writer threads."""
    for n, proc in enumerate(procs):
        proc.host.open(f"root{n}")
        proc.host.spawn(f"root{n}", f"child{n}")
    bursts = [sends(f"p{n}-", f"root{n}", f"child{n}", count) for n in range(len(procs))]
    writers = [
        threading.Thread(
            target=proc.host.send_bytes,
            args=(b"".join(json.dumps(r).encode() + b"\n" for r in burst),),
        )
        for proc, burst in zip(procs, bursts, strict=True)
    ]
    for writer in writers:
        writer.start()
    return bursts, writers


def queued_texts(db, child):
    rows = query(
        db,
        "SELECT content FROM inbox WHERE session_id = ? AND state = 'queued' ORDER BY position",
        child,
    )
    return [json.loads(content)[0]["text"] for (content,) in rows]


def test_pipelined_bursts_from_two_processes_are_all_committed_in_order_none_refused(
    shared, spawn_process
):
    db, count = shared, 2000
    # a patience far above any group's hold, even on a loaded machine: this is about waiting
    procs = [start(spawn_process, db, "--max-queued=0", "--lock-wait-ms=60000") for _ in range(2)]
    bursts, writers = pipelined_bursts(procs, count)  # each process's groups meet the other's lock
    for n, (proc, burst) in enumerate(zip(procs, bursts, strict=True)):
        replies = [proc.host.response(r["id"], PATIENCE) for r in burst]
        assert [r.get("error") for r in replies] == [None] * count
        texts = {r["result"]["text"] for r in replies}
        assert texts == {f"message queued as the next turn for subagent child{n}"}
    for writer in writers:
        writer.join(PATIENCE)
    for n, burst in enumerate(bursts):  # every message committed, in the order it was sent
        assert queued_texts(db, f"child{n}") == [r["params"]["message"] for r in burst]


def test_a_write_waits_for_a_lock_held_briefly_and_the_frames_behind_it_wait_too(
    shared, spawn_process
):
    db = shared
    proc = start(spawn_process, db)
    host = proc.host
    host.open("root")
    host.spawn("root", "c1")
    with foreign_lock(db):
        before = host.start("ping")
        write = host.start("send_message", send("root", "c1", "after the lock"))
        behind = host.start("ping")
        # the frames before the write are answered while it waits: the event loop serves on
        assert host.response(before)["result"] == {}
        held = time.monotonic()
        while time.monotonic() - held < 0.2:  # the lock is held 200 ms: nothing else comes
            assert unread(host) == 0
            time.sleep(0.02)
    reply = host.response(write, PATIENCE)
    assert "error" not in reply, reply
    assert host.response(behind)["result"] == {}
    ids = [json.loads(line).get("id") for line in host.raw]
    assert ids.index(write) < ids.index(behind)  # answered in the order they came
    assert queued_texts(db, "c1") == ["after the lock"]
    waits = host.call("server/stats")["lock_waits"]  # the wait, counted by the process itself
    assert (waits["count"], waits["gave_up"]) == (1, 0), waits
    assert waits["max_ms"] >= 200 and waits["total_ms"] == waits["max_ms"], waits


def test_a_write_past_the_patience_is_refused_busy_and_the_next_ones_do_not_wait(
    shared, spawn_process
):
    db = shared
    proc = start(spawn_process, db, "--lock-wait-ms", "300")
    host = proc.host
    host.open("root")
    host.spawn("root", "c1")
    with foreign_lock(db):
        started = time.monotonic()
        first = host.start("send_message", send("root", "c1", "refused"))
        ping = host.start("ping")
        rest = [host.start("send_message", send("root", "c1", f"m{i}")) for i in range(20)]
        refused = host.response(first, PATIENCE)
        waited = time.monotonic() - started
        assert refused["error"] == BUSY
        assert waited >= 0.3, waited
        assert host.response(ping)["result"] == {}
        for request_id in rest:  # after the given-up wait the next writes are refused at once
            assert host.response(request_id, PATIENCE)["error"] == BUSY
        assert time.monotonic() - started < 0.3 + 4.0
    host.call("send_message", send("root", "c1", "once the lock is free"))
    assert queued_texts(db, "c1") == ["once the lock is free"]
    waits = host.call("server/stats")["lock_waits"]
    assert (waits["count"], waits["gave_up"]) == (1, 1), waits  # the refused ones did not wait
    assert waits["max_ms"] >= 300, waits


def test_a_lock_taken_ahead_of_a_write_still_checks_fencing_before_it(tmp_path):
    path, clock, lost = str(tmp_path / "s.db"), FakeClock(), []
    mine, theirs = SqliteStore(path, clock=clock), SqliteStore(path, clock=clock)
    mine.hold("mine", 10.0, lambda: lost.append(True))
    theirs.hold("theirs", 10.0, lambda: None)
    clock.advance(11.0)
    with theirs.atomic():
        assert theirs.fence("mine", theirs.clock()) is True
        assert mine.take_lock() is False  # theirs holds the lock: not taken, no wait
    theirs.commit()
    assert mine.take_lock() is True
    with pytest.raises(LeaseLostError):  # before the request's first write
        with mine.atomic():
            mine.insert_message("late", "a", "[]", "{}", "queued", "t")
    assert lost == [True]
    assert not mine.dirty  # the lock taken ahead was let go with the group
    assert theirs.get_message("late") is None
    mine.close()
    theirs.close()


def test_reads_and_read_only_tools_never_wait_for_another_process_lock(shared, spawn_process):
    db = shared
    proc = start(spawn_process, db)
    host = proc.host
    host.open("root")
    host.spawn("root", "c1", label="worker")
    listing = {
        "name": "list_agents",
        "arguments": {},
        "_meta": {"subagentd/caller": "root"},
    }
    with foreign_lock(db):  # held until every answer below came: none of them waits for it
        assert host.call("ping") == {}
        assert host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
        assert host.call("tools/call", listing)["content"][0]["text"] == "c1 [running] — worker"
        assert host.call("list_agents", {"caller": "root"})["text"] == "c1 [running] — worker"


def test_a_frame_takes_the_lock_ahead_only_when_its_method_writes():
    dispatcher = Dispatcher(
        Session(), Settings(), invoke=lambda call, handler, message: None, methods=METHODS
    )

    def request(method, **params):
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}

    def tool(name):
        return request("tools/call", name=name, arguments={})

    writes = dispatcher.writes
    assert writes(request("send_message", caller="r", subagent_id="c", message="m"))
    assert writes(request("agents/spawn")) and writes(request("turns/end"))
    assert writes(tool("send_message")) and writes(tool("report"))
    assert writes(tool("interrupt_agent"))
    assert not writes(tool("list_agents")) and not writes(tool("no such tool"))
    assert not writes(request("tools/call", name=["not", "a", "name"]))
    for read in ("ping", "initialize", "agents/get", "agents/list", "transcript/read"):
        assert not writes(request(read)), read
    assert not writes(request("no/such/method")) and not writes("not an object")
    assert writes([request("ping"), tool("send_message")])  # a batch with one writer
    assert not writes([request("ping"), tool("list_agents")])


def four_bursts(spawn_process, db, count, method, params, *args):
    """Four processes each sending `count` requests `method` (`params(n, i)`) pipelined, all at
    once; each one's replies (none refused) and then its lock waits."""
    lifted = ("--max-children=0", "--max-live-per-root=0", "--max-live=0", "--tree-max-spawns=0")
    procs = [start(spawn_process, db, *lifted, *args) for _ in range(4)]
    for n, proc in enumerate(procs):
        proc.host.open(f"root{n}")
    bursts = [
        [
            {"jsonrpc": "2.0", "id": f"s{n}-{i}", "method": method, "params": params(n, i)}
            for i in range(count)
        ]
        for n in range(4)
    ]
    writers = [
        threading.Thread(
            target=proc.host.send_bytes,
            args=(b"".join(json.dumps(r).encode() + b"\n" for r in burst),),
        )
        for proc, burst in zip(procs, bursts, strict=True)
    ]
    for writer in writers:  # all at once: each process's groups meet the others' locks
        writer.start()
    for proc, burst in zip(procs, bursts, strict=True):
        replies = [proc.host.response(r["id"], 4 * PATIENCE) for r in burst]
        assert [r.get("error") for r in replies] == [None] * count
    for writer in writers:
        writer.join(PATIENCE)
    return [proc.host.call("server/stats")["lock_waits"] for proc in procs]


def test_four_processes_opening_roots_pipelined_on_postgresql_take_turns_none_refused(
    pg_stores, spawn_process
):
    # at the default --lock-wait-ms: opening a root writes every tree (docs/architecture.md
    # "Per-tree writers"), so each waits in PostgreSQL's lock queue, and a group that held the
    # writer lock 100 ms lets it go before its next frame (storage/postgres/group.py)
    db, count = pg_stores.url(), 400
    waits = four_bursts(
        spawn_process, db, count, "agents/open", lambda n, i: {"agent_id": f"r{n}-{i}"}
    )
    for each in waits:  # each waited for the others, never past its patience
        assert each["count"] > 0 and each["gave_up"] == 0, each
    (opened,) = query(db, "SELECT count(*) FROM sessions WHERE parent_id IS NULL")[0]
    assert opened == 4 * count + 4


def test_four_processes_spawning_pipelined_into_their_own_trees_never_wait(
    pg_stores, spawn_process
):
    # spawns are tree-scoped writes: four processes each spawning below its own root hold
    # their own tree's lock only, and none waits for another's
    db, count = pg_stores.url(), 400
    waits = four_bursts(
        spawn_process,
        db,
        count,
        "agents/spawn",
        lambda n, i: {"caller": f"root{n}", "label": "w", "prompt": "go", "child_id": f"c{n}-{i}"},
        "--lease-ttl=600",  # no heartbeat (an every-tree write) meanwhile
    )
    assert [(each["count"], each["gave_up"]) for each in waits] == [(0, 0)] * 4, waits
    (spawned,) = query(db, "SELECT count(*) FROM sessions WHERE parent_id IS NOT NULL")[0]
    assert spawned == 4 * count
