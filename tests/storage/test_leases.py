"""Lease owners on one database file: renewal, fencing, and what a fenced process does.

Two services share a file here, each with its own store, as two processes would; a fake clock
shared by both stands in for time passing (the renewal threads tick only every ttl/3 of real time,
far beyond these tests), so every expiry below happens exactly when the test says.
"""

from __future__ import annotations

import pytest

from subagentd.errors import LeaseLostError
from subagentd.schema.codes import Code
from subagentd.storage.database import SqliteStore
from tests.core_host import TTL, FakeClock, owners, process, step
from tests.processes.test_multiprocess import LOST
from tests.spawned import InProcessServer, RpcError


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "shared.db")


def test_every_process_has_an_owner_row_that_long_groups_renew_and_give_back_to_the_others(
    path, clock
):
    start = clock.now
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    assert owners(first) == {"p1": (start + TTL, 0), "p2": (start + TTL, 0)}
    # a group that held the write lock for 5 s: its owner's lease counts from its commit, and the
    # other owner, which could not renew meanwhile, gets those 5 s back
    with first.svc.transaction():
        first.open("root")
        clock.advance(5)
    first.svc.commit()
    assert owners(second) == {"p1": (start + 5 + TTL, 0), "p2": (start + 5 + TTL, 0)}
    # a quick group renews nothing until a third of the lease is spent
    clock.advance(TTL / 3 - 5)
    step(first, first.open, "quick")
    assert owners(second)["p1"] == (start + 5 + TTL, 0)
    clock.advance(6)
    step(first, first.open, "later")
    assert owners(second)["p1"] == (pytest.approx(start + TTL / 3 + 6 + TTL), 0)


def test_a_reaper_fences_an_owner_only_once_its_lease_expired(path, clock):
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    assert step(second, second.svc.recovery.recover) == 0
    error = second.refusal(step, second, second.open, "root")
    assert (error.code, error.message) == (
        Code.INVALID_STATE,
        'agent "root" is live in another subagentd process',
    )
    clock.advance(TTL - 1)
    assert step(second, second.svc.recovery.recover) == 0
    assert owners(second)["p1"][1] == 0
    clock.advance(1)  # p1's lease ends now: it renewed nothing (a stalled process)
    assert step(second, second.svc.recovery.recover) == 1
    assert owners(second)["p1"][1] == 1
    assert second.store.get_lease("root") is None and second.store.get_lease("c1") is None
    events = second.svc.records.read_transcript("c1", None, None).events
    assert events[-1].type == "turn_end"
    assert events[-1].data["reason"] == "error" and events[-1].data["cause"] == "crash"
    step(second, second.open, "root")
    assert second.texts_of_turns("root") == [
        ["Background subagent c1 failed before it finished.", "It left no closing message."]
    ]


def test_an_owner_whose_process_is_gone_is_fenced_before_its_lease_expires(path, clock):
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    second = process(path, clock, "p2", owner_alive=lambda owner: owner != "p1")
    assert owners(second)["p1"][1] == 1
    step(second, second.open, "root")


def test_a_fence_that_finds_the_owner_renewed_under_the_lock_does_nothing(path, clock):
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    second = process(path, clock, "p2")
    stale = clock.now  # what second read before first renewed
    clock.advance(TTL / 2)
    step(first, first.open, "renewing")  # a third spent: this commit renews p1
    with second.svc.transaction():
        assert second.store.fence("p1", stale) is False
    second.svc.commit()
    assert owners(second)["p1"] == (clock.now + TTL, 0)
    assert second.store.get_lease("root")[0] == "p1"


def test_a_fenced_process_lets_every_agent_go_at_its_next_write_and_carries_on_with_nothing(
    path, clock
):
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.open, "solo")
    step(first, first.spawn, "solo", "s1")
    closed = []
    step(first, first.svc.host.close_root, "solo", lambda: closed.append("solo"))
    first.notes.clear()
    c1_events = len(first.svc.records.read_transcript("c1", None, None).events)
    clock.advance(TTL)
    step(second, second.svc.recovery.recover)  # p1 stalled past its lease: fenced, its turns reaped
    with pytest.raises(LeaseLostError) as lost:
        with first.svc.transaction():
            raise AssertionError("the transaction of a fenced process must not begin")
    assert (lost.value.code, lost.value.message) == (Code.LEASE_LOST, LOST)
    assert first.notes == [
        ("agent/settled", {"agent_id": agent_id, "reason": "lease-lost"})
        for agent_id in ("root", "c1", "solo", "s1")
    ]
    assert closed == ["solo"]  # the waiting close is answered: the root left this process
    assert len(first.svc.agents.registry) == 0
    assert first.svc.agents.timers.fire_all() == 0  # s1's interrupt grace timer was cancelled
    events = first.svc.records.read_transcript("c1", None, None).events
    assert len(events) == c1_events + 1  # second's
    # first serves on under a new owner id that holds nothing of before
    assert first.svc.agents.owner == "p1#2"
    step(first, first.open, "root")
    assert first.store.get_lease("root")[0] == "p1#2"
    assert owners(second)["p1#2"] == (clock.now + TTL, 0)
    error = second.refusal(step, second, second.open, "root")
    assert error.code == Code.INVALID_STATE


def test_the_agents_a_fenced_process_let_go_no_longer_count_against_its_quotas(path, clock):
    """--max-live counts the live registry: after a lost lease it is empty, not the old one."""
    first = process(path, clock, "p1", max_live=2)
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.open, "other")
    clock.advance(TTL)
    step(second, second.svc.recovery.recover)  # p1 stalled past its lease: fenced
    with pytest.raises(LeaseLostError):
        with first.svc.transaction():
            pass
    assert len(first.svc.agents.registry) == 0
    step(first, first.open, "fresh")
    step(first, first.open, "fresh2")  # room for two again
    error = first.refusal(step, first, first.open, "fresh3")
    assert (error.code, error.data["quota"]) == (Code.OVERLOADED, "max-live")


def test_a_request_that_finds_its_process_fenced_fails_after_the_host_hears_what_it_lost(
    path, clock
):
    server = InProcessServer(store=SqliteStore(path, clock=clock), lease_ttl=TTL, owner="p1")
    reaper = SqliteStore(path, clock=clock)  # another process: it found p1 expired and fenced it
    try:
        host = server.host
        host.initialize()
        host.open("root")
        child = host.spawn("root", "c1")
        clock.advance(TTL)
        assert reaper.fence("p1", clock.now) is True
        reaper.commit()
        ended = host.start(
            "turns/end", {"agent_id": "c1", "turn_id": child["turn_id"], "reason": "completed"}
        )
        assert host.response(ended)["error"] == {
            "code": Code.LEASE_LOST,
            "message": LOST,
            "data": {"reason": "LEASE_LOST"},
        }
        assert [host.notification("agent/settled") for _ in range(2)] == [
            {"agent_id": "root", "reason": "lease-lost"},
            {"agent_id": "c1", "reason": "lease-lost"},
        ]
        with pytest.raises(RpcError) as refused:
            host.end_turn("c1", child["turn_id"])
        assert (refused.value.code, refused.value.message) == (
            Code.INVALID_STATE,
            'agent "c1" is not live',
        )
        # through the MCP bridge the loss is a tool error, and the host is told too
        host.open("root")
        clock.advance(TTL)
        assert reaper.fence("p1#2", clock.now) is True
        reaper.commit()
        result = host.call(
            "tools/call",
            {
                "name": "send_message",
                "arguments": {"subagent_id": "c1", "message": "x"},
                "_meta": {"subagentd/caller": "root"},
            },
        )
        assert result == {"content": [{"type": "text", "text": f"Error: {LOST}"}], "isError": True}
        assert host.notification("agent/settled") == {"agent_id": "root", "reason": "lease-lost"}
        assert host.call("agents/open", {"agent_id": "root"})["agent_id"] == "root"
    finally:
        server.stop()
        reaper.close()
