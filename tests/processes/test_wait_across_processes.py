"""`agents/wait_idle` and `wait_agents` over a tree spread across three real subagentd processes
sharing one database (a SQLite file, or a PostgreSQL database): root live in p1, its child c1
resumed in p2, its grandchild g1 resumed in p3. The tree is waited for as a whole, and the
answers come once the last turn anywhere in it ended."""

from __future__ import annotations

import pytest

from tests.spawned import ServerProcess

PATIENCE = 30.0


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def spread(request, tmp_path):
    """(p1, p2, p3, s1's turn, g1's turn): root live in p1; c1, an ordinary session below root,
    live in p2 with its subagent s1 running there; g1, an ordinary session below c1, live in p3
    running a turn the host began."""
    db = str(tmp_path / "shared.db") if request.param == "sqlite" else None
    if db is None:  # directly, or through PgBouncer in session pooling mode
        stores = request.getfixturevalue("pg_stores")
        db = stores.url("shared")
        if request.param == "pgbouncer":
            db = request.getfixturevalue("pgbouncers")["session"].url(stores.databases["shared"])
    procs = [ServerProcess("--lease-ttl", "300", db=db) for _ in range(3)]
    try:
        p1, p2, p3 = (proc.host for proc in procs)
        for host in (p1, p2, p3):
            host.initialize()
        p1.open("root")
        p2.open("c1", parent_id="root")
        s1 = p2.spawn("c1", "s1", label="researcher", prompt="look")
        p3.open("g1", parent_id="c1")
        g1 = p3.call("turns/begin", {"agent_id": "g1", "messages": ["dig"]})
        p3.notification("turn/start", PATIENCE, agent_id="g1")
        yield p1, p2, p3, s1["turn_id"], g1["turn_id"]
    finally:
        for proc in procs:
            proc.stop()


def test_wait_idle_waits_for_the_whole_tree_across_three_processes(spread):
    p1, p2, p3, s1_turn, g1_turn = spread
    # at once: the turns elsewhere are seen, in tree order, from any of the three
    for host in (p1, p2, p3):
        assert host.call("agents/wait_idle", {"agent_id": "root", "timeout_ms": 0}) == {
            "idle": False,
            "running": ["s1", "g1"],
        }
    waiting = p1.start("agents/wait_idle", {"agent_id": "root", "timeout_ms": 60_000})
    p2.end_turn("s1", s1_turn, "completed", "found")
    p2.notification("agent/settled", PATIENCE, agent_id="s1")
    notice = p2.notification("turn/start", PATIENCE, agent_id="c1")  # s1's notice wakes c1
    p3.end_turn("g1", g1_turn, "completed", "dug")
    p1.settle_quietly(0.3)
    assert waiting not in p1.responses  # c1 runs a turn in p2
    assert p1.call("agents/wait_idle", {"agent_id": "root", "timeout_ms": 0}) == {
        "idle": False,
        "running": ["c1"],
    }
    p2.end_turn("c1", notice["turn_id"], "completed", "noted")
    assert p1.response(waiting, PATIENCE)["result"] == {"idle": True}


def test_wait_idle_times_out_naming_what_runs_elsewhere_and_sees_queued_input(spread):
    p1, p2, p3, s1_turn, g1_turn = spread
    answer = p1.call("agents/wait_idle", {"agent_id": "c1", "timeout_ms": 300})
    assert answer == {"idle": False, "running": ["s1", "g1"]}
    # input for g1 while its turn runs: runnable once that turn ends, until p3 starts the next
    p1.call("agents/followup", {"agent_id": "g1", "message": "then this"})
    p3.end_turn("g1", g1_turn, "completed", "dug")
    nxt = p3.notification("turn/start", PATIENCE, agent_id="g1")
    assert p1.call("agents/wait_idle", {"agent_id": "g1", "timeout_ms": 0}) == {
        "idle": False,
        "running": ["g1"],
    }
    p3.end_turn("g1", nxt["turn_id"], "completed", "done")
    assert p1.call("agents/wait_idle", {"agent_id": "g1", "timeout_ms": 30_000}) == {"idle": True}


def test_wait_agents_follows_a_child_working_in_another_process(request, tmp_path):
    """The lease rules keep a subagent in its parent's process; the state where they differ is
    made as tests/processes/test_multiprocess.py makes it (root's lease row removed behind p1's back, so
    p2 can open root while p1 still runs c1). p2's wait for c1 ends when c1's turn ends in p1:
    nothing commits in p2 then, so p2 looks at c1's lease again until it is no longer working."""
    from tests.processes.test_multiprocess import query

    for backend in ("sqlite", "postgres"):
        db = str(tmp_path / "two.db") if backend == "sqlite" else None
        db = db or request.getfixturevalue("pg_stores").url()
        procs = [ServerProcess("--lease-ttl", "300", db=db) for _ in range(2)]
        try:
            p1, p2 = (proc.host for proc in procs)
            for host in (p1, p2):
                host.initialize()
            p1.open("root")
            c1 = p1.spawn("root", "c1", label="worker", prompt="work")
            query(db, "DELETE FROM leases WHERE session_id = ?", "root")
            p2.open("root")
            waiting = p2.start(
                "tools/call",
                {
                    "name": "wait_agents",
                    "arguments": {"agent_ids": ["c1"], "timeout_ms": 50_000},
                    "_meta": {"subagentd/caller": "root"},
                },
            )
            p2.settle_quietly(0.3)
            assert waiting not in p2.responses, backend  # c1 runs in p1
            p1.end_turn("c1", c1["turn_id"], "completed", "done")
            p1.notification("agent/settled", PATIENCE, agent_id="c1")
            result = p2.response(waiting, PATIENCE)["result"]
            assert result["structuredContent"]["agents"] == [
                {"agent_id": "c1", "status": "ready"}
            ], backend
            assert "timed_out" not in result["structuredContent"], backend  # omitted when false
        finally:
            for proc in procs:
                proc.stop()
