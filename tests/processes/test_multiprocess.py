"""Several subagentd processes on one database: leases keep a live session in exactly one of them.

Every process here is a real `python -m subagentd` over pipes; stalls are SIGSTOP/SIGCONT. Waits
are on events (replies, notifications, rows in the shared database), each bounded generously.
Each test runs on a shared SQLite file and on a shared PostgreSQL database (tests/pg.py).
"""

import fcntl
import json
import os
import signal
import sqlite3
import struct
import termios
import time

import psycopg
import pytest

from subagentd.schema.codes import Code
from subagentd.storage.postgres import is_postgres
from subagentd.storage.postgres.connection import to_psycopg
from subagentd.storage.postgres.group import WRITER_LOCK
from tests.spawned import RpcError, ServerProcess

LOST = (
    "this subagentd process lost its leases to another process sharing the database (it was"
    " stalled longer than --lease-ttl); its live agents were let go and the request was not applied"
)
PATIENCE = 30.0  # seconds any wait below may take on a loaded machine before the test fails


def start(spawn_process, db, *args):
    proc = spawn_process(*args, db=db)
    ready(proc.host)
    return proc


def ready(host):
    """Initialized, with its database open and migrated (`initialize` is answered before that):
    the next process then starts on a database that is already set up."""
    host.initialize()
    assert refused(host, "agents/get", {"agent_id": "-"}).code == Code.UNKNOWN_AGENT


def refused(host, method, params):
    with pytest.raises(RpcError) as caught:
        host.call(method, params)
    return caught.value


def _busy_refusal(error):
    return (
        error is not None
        and error["code"] == Code.OVERLOADED
        and (error.get("data") or {}).get("reason") == "busy"
    )


def unless_busy(host, method, params, patience=30.0):
    """The result, once the other process's write lock lets this one write: a write that meets
    the lock is answered 1011 busy (PROTOCOL.md section 1) and retried, as a client should."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return host.call(method, params)
        except RpcError as error:
            busy = error.code == Code.OVERLOADED and (error.data or {}).get("reason") == "busy"
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request, tmp_path):
    """The database the test's processes share: a SQLite file, or a PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return request.getfixturevalue("pg_stores").url()


def query(db, sql, *params):
    """Rows of the shared database, read (or written) on the test's own connection."""
    if is_postgres(db):
        with psycopg.connect(db, autocommit=True) as pg:
            cursor = pg.execute(to_psycopg(sql), params)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
    conn = sqlite3.connect(db, timeout=PATIENCE, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def writer_lock_free(db):
    """No process holds the write lock right now (SQLite's, or the writer advisory lock)."""
    if is_postgres(db):
        with psycopg.connect(db) as pg:  # a transaction: the lock, if taken, goes with it
            [[free]] = pg.execute("SELECT pg_try_advisory_xact_lock(%s)", (WRITER_LOCK,))
            pg.rollback()
            return free
    probe = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def owner_of(db, session_id):
    [[owner]] = query(db, "SELECT owner FROM leases WHERE session_id = ?", session_id)
    return owner


def crash_ends(db):
    """Turns ended by crash recovery: what a reap writes."""
    return query(
        db, "SELECT session_id FROM events WHERE type = 'turn_end' AND data LIKE '%\"crash\"%'"
    )


def wait_for(condition, what):
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def stop_outside_a_transaction(proc, db):
    """SIGSTOP at a moment the process holds no write lock (a stopped lock holder would block
    every other process until SIGCONT, which is SQLite's rule, not the lease rules under test)."""
    pid = proc.proc.pid
    deadline = time.monotonic() + PATIENCE
    while True:
        assert time.monotonic() < deadline, "never found the database unlocked"
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: _state(pid) in "Tt", "the process stopped")
        if writer_lock_free(db):
            return
        os.kill(pid, signal.SIGCONT)  # it (or the other process) holds the lock right now
        time.sleep(0.01)


def unread(host):
    """Bytes waiting in the pipe from subagentd's stdout that its host has not read yet."""
    return struct.unpack("i", fcntl.ioctl(host.read_fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _state(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]


def test_a_session_live_in_one_process_is_never_activated_by_another(shared, spawn_process):
    db = shared
    a = start(spawn_process, db)
    b = start(spawn_process, db)
    a.host.open("root")
    a.host.spawn("root", "c1", label="worker")
    error = refused(b.host, "agents/open", {"agent_id": "root"})
    assert error.code == Code.INVALID_STATE
    assert error.message == 'agent "root" is live in another subagentd process'
    # b sees a's live children with their true status
    assert b.host.call("list_agents", {"caller": "root"})["text"] == "c1 [running] — worker"
    assert b.host.call("agents/get", {"agent_id": "c1"})["status"] == "running"


def test_a_killed_process_leaves_its_sessions_resumable_elsewhere(shared, spawn_process):
    db = shared
    a = start(spawn_process, db, "--lease-ttl", "0.6")
    b = start(spawn_process, db, "--lease-ttl", "0.6")
    a.host.open("root")
    child = a.host.spawn("root", "c1", label="worker")
    a.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "queued in a"})
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    assert b.host.call("agents/get", {"agent_id": "c1"})["status"] == "ready"
    b.host.open("root")
    # c1's turn was open when a died: b's next heartbeat records it as ended by crash, root is told
    notice = b.host.notification("turn/start", agent_id="root")
    assert (
        notice["messages"][0]["content"][0]["text"]
        == "Background subagent c1 failed before it finished."
    )
    events = b.host.call("transcript/read", {"agent_id": "c1"})["events"]
    crash = [e for e in events if e["type"] == "turn_end"]
    assert crash[-1]["data"] == {"turn_id": child["turn_id"], "reason": "error", "cause": "crash"}
    b.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "from b"})
    resumed = b.host.notification("turn/start", agent_id="c1")
    assert resumed["resume"]["label"] == "worker"
    assert resumed["messages"][0]["content"][0]["text"] == "queued in a"


def test_a_process_stalled_past_the_ttl_is_fenced_and_never_writes_to_its_sessions_again(
    shared, spawn_process
):
    db = shared
    # TTL 1 s: a renewal thread that a loaded machine delays by 0.6 s still renews in time (b
    # must keep its lease while it takes a's over)
    a = start(spawn_process, db, "--lease-ttl", "1")
    b = start(spawn_process, db, "--lease-ttl", "1")
    a.host.open("root")
    c1 = a.host.spawn("root", "c1", label="worker")
    a_owner = owner_of(db, "root")
    assert refused(b.host, "agents/open", {"agent_id": "root"}).code == Code.INVALID_STATE

    stop_outside_a_transaction(a, db)
    try:
        # once a's lease has expired, b's write transaction fences a and takes root over
        def b_opened_root():
            try:
                b.host.open("root")
                return True
            except RpcError as exc:
                assert exc.message == 'agent "root" is live in another subagentd process'
                return False

        wait_for(b_opened_root, "b could open root")
        assert query(db, "SELECT fenced FROM owners WHERE owner = ?", a_owner) == [(1,)]
        # a really stalled: c1's open turn is reaped (by b's heartbeat), and root hears of it
        notice = b.host.notification("turn/start", agent_id="root")
        assert [block["text"] for block in notice["messages"][0]["content"]] == [
            "Background subagent c1 failed before it finished.",
            "It left no closing message.",
        ]
        assert crash_ends(db) == [("c1",)]
        c1_events = query(db, "SELECT seq FROM events WHERE session_id = 'c1'")
        # a's host ends c1's turn while a is stopped: the request waits in a's stdin
        late = a.host.start(
            "turns/end",
            {"agent_id": "c1", "turn_id": c1["turn_id"], "reason": "completed", "output": "late"},
        )
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)

    # The first write transaction a begins after SIGCONT finds it fenced: this request's, or its
    # heartbeat's just before it; either way the request is not applied.
    error = a.host.response(late)["error"]
    assert (error["code"], error["message"]) in {
        (Code.LEASE_LOST, LOST),
        (Code.INVALID_STATE, 'agent "c1" is not live'),
    }
    # a tells its host that it let both go
    assert a.host.notification("agent/settled", agent_id="root")["reason"] == "lease-lost"
    assert a.host.notification("agent/settled", agent_id="c1")["reason"] == "lease-lost"
    # nothing of a reached c1 after the fence; root is b's
    assert query(db, "SELECT seq FROM events WHERE session_id = 'c1'") == c1_events
    assert query(db, "SELECT open_turn_id, last_reason FROM sessions WHERE id = 'c1'") == [
        (None, "error")
    ]
    b_owner = owner_of(db, "root")
    assert b_owner != a_owner
    error = refused(a.host, "agents/open", {"agent_id": "root"})
    assert (error.code, error.message) == (
        Code.INVALID_STATE,
        'agent "root" is live in another subagentd process',
    )
    error = refused(
        a.host, "turns/end", {"agent_id": "c1", "turn_id": c1["turn_id"], "reason": "completed"}
    )
    assert (error.code, error.message) == (Code.INVALID_STATE, 'agent "c1" is not live')
    # a serves on under a new owner id holding nothing of before; b still holds root
    a.host.open("fresh")
    assert owner_of(db, "fresh") == f"{a_owner}#2"
    assert b.host.call("agents/get", {"agent_id": "root"})["status"] == "running"
    assert crash_ends(db) == [("c1",)]
    # and a sent nothing more about them (no turn started, nothing settled twice)
    assert [n for n in a.host.notifications if n["params"].get("agent_id") in ("root", "c1")] == []


def spawns(first, count):
    return [
        {
            "jsonrpc": "2.0",
            "id": f"spawn-{first + i}",
            "method": "agents/spawn",
            "params": {"caller": "root", "child_id": f"k{first + i}", "label": "w", "prompt": "go"},
        }
        for i in range(count)
    ]


def one_batch_frame(host, requests):
    """One frame, one group commit: the write lock is held until the last spawn is done."""
    host.send(requests)
    replies = None
    while not isinstance(replies, list):
        replies = host.read_any(PATIENCE)
    return replies


def frames_back_to_back(host, requests):
    """One frame each, written at once: group commits follow each other with no pause."""
    host.send_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
    return [host.response(r["id"], PATIENCE) for r in requests]


@pytest.mark.parametrize("shape", [one_batch_frame, frames_back_to_back])
def test_a_process_busy_for_several_ttls_keeps_its_leases_and_reaps_nobody(
    shared, spawn_process, shape
):
    ttl = 1.0  # renewed every third of it: a renewal thread delayed by 0.6 s still holds
    db = shared
    # thousands of live children under one root: the live-agent quotas (SECURITY.md) are lifted
    unbounded = (
        "--max-children=0",
        "--max-live-per-root=0",
        "--max-live=0",
        "--tree-max-spawns=0",
        "--tree-max-turns=0",
    )
    a = start(spawn_process, db, "--lease-ttl", str(ttl), *unbounded)
    b = start(spawn_process, db, "--lease-ttl", str(ttl), *unbounded)
    b.host.open("broot")
    b.host.spawn("broot", "bchild")
    a.host.open("root")
    a.host.spawn("root", "c0")
    # spawns, doubled until one round kept a's event loop busy for several TTLs: a's heartbeat
    # cannot run meanwhile, and in one batch frame b cannot renew either (a holds the lock)
    size, busy, spawned = 250, 0.0, 0
    while busy < 3 * ttl:
        began = time.monotonic()
        requests = spawns(spawned, size)
        replies = shape(a.host, requests)
        busy = time.monotonic() - began
        # a spawn that met b's write lock (a heartbeat, a renewal) past the wait is refused 1011
        # busy, nothing done (PROTOCOL.md section 1); it is sent again, as a client should
        refused = {r["id"] for r in replies if _busy_refusal(r.get("error"))}
        assert [r.get("error") for r in replies if r["id"] not in refused] == [None] * (
            size - len(refused)
        )
        for request in requests:
            if request["id"] in refused:
                unless_busy(a.host, "agents/spawn", request["params"])
        spawned += size
        size *= 2

    a_owner, b_owner = owner_of(db, "root"), owner_of(db, "broot")

    def both_still_hold_their_sessions():
        """A follow-up from the other process is a write (1011 busy while the lock is taken,
        retried); it is queued for the process that holds the agent, which still does."""
        for host, agent_id, holder in (
            (b.host, "c0", a_owner),
            (b.host, f"k{spawned - 1}", a_owner),
            (a.host, "bchild", b_owner),
        ):
            reply = unless_busy(host, "agents/followup", {"agent_id": agent_id, "message": "x"})
            assert set(reply) == {"message_id"}
            assert owner_of(db, agent_id) == holder

    both_still_hold_their_sessions()  # right after the batch's commit: the riskiest moment
    b.host.settle_quietly(3 * ttl)  # each process's heartbeat runs every ttl/3 meanwhile
    both_still_hold_their_sessions()
    # no false reaps: no turn ended by crash, no notice, nobody lost a lease
    assert crash_ends(db) == []
    assert query(db, "SELECT count(*) FROM owners WHERE fenced = 1") == [(0,)]
    for host in (a.host, b.host):
        unexpected = [
            (n["method"], n["params"]["agent_id"])
            for n in host.notifications
            if n["method"] != "turn/start" or n["params"]["agent_id"] in ("root", "broot")
        ]
        assert unexpected == []
    assert b.host.call("agents/get", {"agent_id": "c0"})["status"] == "running"
    assert a.host.call("agents/get", {"agent_id": "bchild"})["status"] == "running"
    for proc in (a, b):  # no graceful drain of thousands of agents: the checks are done
        proc.proc.kill()


def test_a_host_that_stops_reading_never_keeps_the_write_lock_from_another_process(
    shared, spawn_process
):
    """Output waiting for a slow host must not hold a write transaction open: while a's writes
    to its stdout are stuck, what a does meanwhile is still committed at once, so b can write."""
    db = shared
    a = start(spawn_process, db)
    b = start(spawn_process, db)
    a.host.open("root")
    a.host.reading.clear()  # a's host stops reading: a's stdout pipe fills up
    pings = [{"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"} for i in range(4000)]
    a.host.send(pings)  # about 130 KiB of replies in one batch: more than a pipe holds
    wait_for(lambda: unread(a.host) >= 65536, "a filled its stdout pipe")
    # a write request handled while a's flusher is stuck writing the batch's replies
    a.host.send(
        {
            "jsonrpc": "2.0",
            "id": "spawn",
            "method": "agents/spawn",
            "params": {"caller": "root", "child_id": "c1", "label": "w", "prompt": "go"},
        }
    )
    wait_for(
        lambda: query(db, "SELECT count(*) FROM sessions WHERE id = 'c1'") == [(1,)],
        "a committed the spawn while its host was not reading",
    )
    assert b.host.open("broot")["agent_id"] == "broot"  # no 1011 busy: a holds no lock
    a.host.reading.set()
    replies = a.host.read_any(PATIENCE)
    assert isinstance(replies, list) and len(replies) == len(pings)
    assert a.host.response("spawn", PATIENCE)["result"]["child_id"] == "c1"


def test_a_quiet_process_keeps_its_leases_past_the_ttl(shared, spawn_process):
    ttl = 3.0  # renewals every second: a renewal may come two seconds late before anything lapses
    db = shared
    # thousands of live children under one root: the live-agent quotas (SECURITY.md) are lifted
    unbounded = (
        "--max-children=0",
        "--max-live-per-root=0",
        "--max-live=0",
        "--tree-max-spawns=0",
        "--tree-max-turns=0",
    )
    a = start(spawn_process, db, "--lease-ttl", str(ttl), *unbounded)
    b = start(spawn_process, db, "--lease-ttl", str(ttl), *unbounded)
    a.host.open("root")
    owner = owner_of(db, "root")

    def expiry():
        [[expires_at]] = query(db, "SELECT expires_at FROM owners WHERE owner = ?", owner)
        return expires_at

    first = expiry()
    # no request reaches a from here on: only its renewal thread can move its expiry on, and it
    # must do so past the time the first expiry would have ended the lease
    wait_for(lambda: time.time() > first and expiry() > first + ttl / 2, "a renewed its lease")
    error = refused(b.host, "agents/open", {"agent_id": "root"})
    assert (error.code, error.message) == (
        Code.INVALID_STATE,
        'agent "root" is live in another subagentd process',
    )
    assert query(db, "SELECT fenced FROM owners WHERE owner = ?", owner) == [(0,)]


# --- the four tools between two live processes -------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def pair(tmp_path_factory, request):
    """Two processes on one database, shared by the tests below (each uses its own agents)."""
    if request.param == "sqlite":
        db = str(tmp_path_factory.mktemp("pair") / "shared.db")
    else:
        server = request.getfixturevalue("pg_server")
        name = server.new_database()
        request.addfinalizer(lambda: server.drop_database(name))
        db = server.url(name)
    a = ServerProcess(db=db)
    ready(a.host)
    b = ServerProcess(db=db)
    try:
        ready(b.host)
        b.host.open("other")
        yield a.host, b.host, db
    finally:
        b.stop()
        a.stop()


@pytest.fixture
def two(pair, request):
    """a runs `root` and its running child `c1`; b runs its own root `other`. The ids are this
    test's own (`root-<n>`, `c1-<n>`), returned with the child's spawn result."""
    a, b, db = pair
    n = request.node.name
    root, c1 = f"root-{n}", f"c1-{n}"
    a.open(root)
    child = a.spawn(root, c1, label="worker")
    return a, b, db, root, c1, child


def tool_error(host, method, params):
    error = refused(host, method, params)
    assert error.data["text"] == f"Error: {error.message}"
    return error.code, error.message


def test_send_message_sent_to_the_process_that_does_not_run_the_caller_is_refused(two):
    a, b, db, root, c1, _ = two
    queued = a.tool("send_message", root, subagent_id=c1, message="next")["message_id"]
    # the caller is live in a only: in b it is stale
    assert tool_error(b, "send_message", {"caller": root, "subagent_id": c1, "message": "x"}) == (
        Code.UNAUTHORIZED,
        f'message not delivered: subagent "{c1}" delivery requires the exact live parent agent',
    )
    # b's own root is not c1's parent: authorization comes before where c1 is live
    assert tool_error(
        b, "send_message", {"caller": "other", "subagent_id": c1, "message": "x"}
    ) == (
        Code.UNAUTHORIZED,
        f'message not delivered: subagent "{c1}" belongs to another parent session',
    )
    assert b.call("agents/get", {"agent_id": c1})["queued"] == 1
    assert b.call("messages/get", {"message_id": queued})["state"] == "queued"


def test_send_message_to_a_child_live_in_another_process_is_delivered_there(two):
    """The lease rules never let a parent be live here while its child is live in another
    process; the state is made here by removing the parent's lease row behind a's back, so b can
    open the parent while a still runs the child. b commits the message and a runs it."""
    a, b, db, root, c1, child = two
    query(db, "DELETE FROM leases WHERE session_id = ?", root)
    b.open(root)
    # the same answer as for a local child, through the MCP bridge as the model sees it
    result = b.call(
        "tools/call",
        {
            "name": "send_message",
            "arguments": {"subagent_id": c1, "message": "from b"},
            "_meta": {"subagentd/caller": root},
        },
    )
    assert result["isError"] is False
    assert result["content"] == [
        {"type": "text", "text": f"message queued as the next turn for subagent {c1}"}
    ]
    message_id = result["structuredContent"]["message_id"]
    # committed by b, queued behind c1's running turn in a; a starts it when that turn ends
    assert b.call("messages/get", {"message_id": message_id})["state"] == "queued"
    assert owner_of(db, c1) != owner_of(db, root)
    a.end_turn(c1, child["turn_id"])
    start = a.notification("turn/start", agent_id=c1)
    assert [m["message_id"] for m in start["messages"]] == [message_id]
    assert [block["text"] for block in start["messages"][0]["content"]] == ["from b"]


def test_agents_followup_to_an_agent_live_in_another_process_starts_its_turn_there(shared):
    """An idle agent live in a: b's follow-up is committed by b, a is woken by its doorbell (not
    its heartbeat: the lease TTL here makes that one come every 100 s) and starts the turn."""
    db = shared
    a = ServerProcess("--lease-ttl", "300", db=db)
    b = ServerProcess("--lease-ttl", "300", db=db)
    try:
        ready(a.host)
        ready(b.host)
        a.host.open("root")
        assert b.host.call("agents/get", {"agent_id": "root"})["status"] == "idle"
        reply = b.host.call("agents/followup", {"agent_id": "root", "message": "from b"})
        start = a.host.notification("turn/start", PATIENCE, agent_id="root")
        assert [m["message_id"] for m in start["messages"]] == [reply["message_id"]]
        assert b.host.call("messages/get", {"message_id": reply["message_id"]}) == {
            "message_id": reply["message_id"],
            "agent_id": "root",
            "state": "claimed",
            "turn_id": start["turn_id"],
            "source": {"kind": "user", "form": "followup"},
        }
        # and the host's interrupt from b stops that turn in a
        interrupted = b.host.call("agents/interrupt", {"agent_id": "root"})
        assert interrupted == {"accepted": True, "previous_status": "running"}
        stop = a.host.notification("turn/interrupt", PATIENCE, agent_id="root")
        assert (stop["turn_id"], stop["cause"]) == (start["turn_id"], {"kind": "user"})
    finally:
        b.stop()
        a.stop()


def test_interrupt_agent_across_processes_follows_the_recorded_ancestry(two):
    """A caller in b is never an ancestor activation of an agent live in a (the lease rules keep
    a tree in one process): it is refused as it would be for a local agent of another tree."""
    a, b, db, root, c1, child = two
    queued = a.tool("send_message", root, subagent_id=c1, message="next")["message_id"]
    assert tool_error(b, "interrupt_agent", {"caller": "other", "agent_id": c1}) == (
        Code.UNAUTHORIZED,
        f'subagent "{c1}" is not a live descendant of agent "other"',
    )
    # with the caller that is live in a only: stale in b
    assert tool_error(b, "interrupt_agent", {"caller": root, "agent_id": c1}) == (
        Code.UNAUTHORIZED,
        f'interrupting "{c1}" requires the exact live ancestor agent',
    )
    # c1's turn was not stopped: its inbox is not parked, no interrupt is in its transcript
    assert b.call("messages/get", {"message_id": queued})["state"] == "queued"
    events = b.call("transcript/read", {"agent_id": c1})["events"]
    assert "interrupt" not in [e["type"] for e in events]
    # the same call in a interrupts it
    assert a.tool("interrupt_agent", root, agent_id=c1)["accepted"] is True
    assert a.notification("turn/interrupt", agent_id=c1)["turn_id"] == child["turn_id"]
    assert b.call("messages/get", {"message_id": queued})["state"] == "parked"


def test_report_counts_only_in_the_process_that_runs_the_child(two):
    a, b, db, root, c1, _ = two
    assert tool_error(b, "report", {"caller": c1, "output": "half done"}) == (
        Code.UNAUTHORIZED,
        f'agent "{c1}" is not a live continuable subagent and cannot report',
    )
    assert b.call("agents/get", {"agent_id": root})["queued"] == 0
    result = a.tool("report", c1, output="half done")
    message_id = result["message_id"]
    assert (
        result["text"] == f"report accepted by the agent that started you as message {message_id}"
    )
    # the parent was idle in a: the report starts its next turn there, and b sees it claimed
    start = a.notification("turn/start", agent_id=root)
    assert [block["text"] for block in start["messages"][0]["content"]] == [
        f"Background subagent {c1} reported:",
        "half done",
    ]
    assert b.call("messages/get", {"message_id": message_id}) == {
        "message_id": message_id,
        "agent_id": root,
        "state": "claimed",
        "turn_id": start["turn_id"],
        "source": {"kind": "subagent-report", "form": "relay", "sender_session_id": c1},
    }


def test_agents_stop_from_another_process_interrupts_with_cause_stop_and_names_the_turn(two):
    a, b, db, root, c1, child = two
    queued = a.tool("send_message", root, subagent_id=c1, message="next")["message_id"]
    stopped = unless_busy(b, "agents/stop", {"agent_id": root})
    assert stopped == {"agent_id": root, "interrupted": [c1]}
    interrupt = a.notification("turn/interrupt", PATIENCE, agent_id=c1)
    assert (interrupt["turn_id"], interrupt["cause"]) == (child["turn_id"], {"kind": "stop"})
    assert b.call("messages/get", {"message_id": queued})["state"] == "parked"


def test_a_deadline_set_in_another_process_interrupts_the_running_turn_there(two):
    a, b, db, root, c1, child = two
    unless_busy(b, "agents/budget", {"agent_id": root, "budget": {"max_seconds": 1}})
    interrupt = a.notification("turn/interrupt", PATIENCE, agent_id=c1)
    assert (interrupt["turn_id"], interrupt["cause"]) == (child["turn_id"], {"kind": "deadline"})
