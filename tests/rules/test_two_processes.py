"""Two subagentd processes on one database, in-process and fast: what one sees of the other's
sessions (status, "live in another process"), the heartbeat's reaping, fencing, and what a fenced
process tells its host (with status events too).

Each "process" is a Service with its own SqliteStore on the shared file; a fake clock shared by
both decides every expiry (the stores' renewal threads tick every ttl/3 of real time: never here).
"""

from __future__ import annotations

import os
import time

import pytest

from subagentd.core.stamps import stamp
from subagentd.errors import LeaseLostError
from subagentd.schema.codes import Code
from subagentd.schema.records import IdempotencyRecord
from subagentd.schema.tools import SendMessageArgs
from tests.core_host import TTL, CoreHost, FakeClock, owners, process, step
from tests.rules.test_rebuild import view

DAY = 86400.0  # a fenced owner's row is kept this long (core/recovery.py _OWNERS_KEPT)


def crash_ends(core: CoreHost, agent_id: str) -> list[dict]:
    return [
        e.data
        for e in core.svc.records.read_transcript(agent_id, None, None).events
        if e.type == "turn_end" and e.data.get("cause") == "crash"
    ]


def test_a_fenced_process_with_status_events_tells_each_agent_settled_then_ready(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1", status_events=True)
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    closed: list[str] = []
    step(first, first.svc.host.close_root, "root", lambda: closed.append("root"))  # waits for c1
    first.notes.clear()
    clock.advance(TTL)
    # p1 stalled past its lease: fenced, c1 reaped
    assert step(second, second.svc.recovery.recover) == 1
    with pytest.raises(LeaseLostError):
        with first.svc.transaction():
            raise AssertionError("the transaction of a fenced process must not begin")
    assert first.notes == [
        ("agent/settled", {"agent_id": "root", "reason": "lease-lost"}),
        ("agent/status", {"agent_id": "root", "status": "ready"}),
        ("agent/settled", {"agent_id": "c1", "reason": "lease-lost"}),
        ("agent/status", {"agent_id": "c1", "status": "ready"}),
    ]
    assert closed == ["root"] and first.svc.agents.closing == {}
    assert first.svc.agents.owner == "p1#2" and len(first.svc.agents.registry) == 0
    assert first.timers.fire_all() == 0  # c1's grace timer (the close interrupted it) is gone
    # a second loss: the generation counts on
    step(first, first.open, "again")
    clock.advance(TTL)
    step(second, second.svc.recovery.recover)
    first.notes.clear()
    with pytest.raises(LeaseLostError):
        with first.svc.transaction():
            pass
    assert first.svc.agents.owner == "p1#3"
    assert first.notes == [
        ("agent/settled", {"agent_id": "again", "reason": "lease-lost"}),
        ("agent/status", {"agent_id": "again", "status": "ready"}),
    ]
    assert owners(second)["p1#3"] == (clock.now + TTL, 0)


def test_the_status_of_an_agent_live_in_another_process_is_its_lease_while_that_owner_holds(
    tmp_path,
):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.open, "left")
    step(first, first.svc.host.close_root, "left", lambda: None)
    step(second, second.open, "mine")
    statuses = {a: second.svc.records.get(a).status for a in ("root", "c1", "left", "mine")}
    assert statuses == {"root": "idle", "c1": "running", "left": "ready", "mine": "idle"}
    assert second.svc.agents.status_of("c1") == "running"
    # p1's own view comes from its registry
    assert (first.status("root"), first.status("c1"), first.status("mine")) == (
        "idle",
        "running",
        "idle",
    )
    # an owner whose process is gone from this host holds nothing, whatever its lease says
    second.svc.settings.owner_alive = lambda owner: owner != "p1"
    assert (second.status("root"), second.status("c1"), second.status("mine")) == (
        "ready",
        "ready",
        "idle",
    )
    second.svc.settings.owner_alive = lambda owner: True
    assert second.status("c1") == "running"
    # nor does an owner whose lease expired by the clock (before anyone fenced it)
    clock.advance(TTL)
    assert (second.status("root"), second.status("c1")) == ("ready", "ready")
    assert owners(second)["p1"][1] == 0


def test_an_agent_waiting_in_another_process_is_in_its_turn_for_wait_idle(tmp_path):
    """A child waiting for an answer elsewhere (its lease says `waiting`) is in its turn, as one
    whose lease says `running`: wait_idle names it running."""
    from subagentd.schema.tools import AskParentArgs

    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.svc.asking.ask_parent, "c1", None, AskParentArgs(question="a or b?"))
    assert second.svc.agents.status_of("c1") == "waiting"
    answer = step(second, second.svc.delegation.wait_idle, "root", 0)
    assert (answer.idle, answer.running) == (False, ["root", "c1"])


def test_a_listing_in_another_process_follows_every_change_at_once(tmp_path):
    """list_agents reads statuses and parked counts with the rows (no kept reading): the other
    process's writes, its owner going away, its lease expiring by the clock and this process's
    own writes show in the very next listing, for both scopes."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1", label="one")
    step(first, first.spawn, "c1", "g1", label="deep")

    def both() -> tuple[str, str]:
        return step(second, second.list, "root").text, step(
            second, second.list, "root", "descendants"
        ).text

    assert both() == (
        "c1 [running] — one",
        "c1 [running] parent=root depth=1 — one\ng1 [running] parent=c1 depth=2 — deep",
    )
    step(first, first.spawn, "root", "c2", label="two")  # another process's write
    assert both()[0] == "c1 [running] — one\nc2 [running] — two"
    step(first, first.send, "root", "c1", "held")
    step(first, first.interrupt, "root", "c1")
    step(first, first.end, "c1", "aborted")  # idle, holding one parked message
    assert both() == (
        "c1 [idle, 1 parked] — one\nc2 [running] — two",
        "c1 [idle, 1 parked] parent=root depth=1 — one\ng1 [running] parent=c1 depth=2 — deep"
        "\nc2 [running] parent=root depth=1 — two",
    )
    second.svc.settings.owner_alive = lambda owner: owner != "p1"  # its process is gone
    # ready: c1's last turn was stopped; c2's turn was left open by a process that is gone
    assert (
        both()[0]
        == "c1 [ready, last turn was stopped, 1 parked] — one\nc2 [ready, last turn failed] — two"
    )
    second.svc.settings.owner_alive = lambda owner: True
    assert both()[0] == "c1 [idle, 1 parked] — one\nc2 [running] — two"
    clock.advance(TTL)  # p1 renewed nothing: its leases lapse by time, before anyone fences it
    assert both() == (
        "c1 [ready, last turn was stopped, 1 parked] — one\nc2 [ready, last turn failed] — two",
        "c1 [ready, last turn was stopped, 1 parked] parent=root depth=1 — one\n"
        "g1 [ready, last turn failed] parent=c1 depth=2 — deep\n"
        "c2 [ready, last turn failed] parent=root depth=1 — two",
    )
    step(second, second.svc.recovery.recover)  # fences p1
    step(second, second.open, "root")  # now live here: its own registry decides
    step(second, second.send, "root", "c1", "again")  # unparks c1 and wakes it here
    assert both()[0] == "c1 [running] — one\nc2 [ready, last turn failed] — two"


@pytest.mark.sqlite_only  # PostgresStore.changes() moves on every call: it keeps no reading
def test_requests_read_together_share_one_reading_of_other_leases_until_this_process_writes(
    tmp_path,
):
    """Within a snapshot (frames read in one chunk, server/dispatcher.py) the other processes'
    leases are read once: those requests all arrived before it was taken. A write of this
    process, or the end of the snapshot, makes the next lookup read them again; a reading made
    inside an open write group is not kept (the group may still roll back)."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    reads: list[float] = []
    foreign_leases = second.store.foreign_leases

    def counted(owner: str, now: float) -> list:
        reads.append(now)
        return foreign_leases(owner, now)

    second.store.foreign_leases = counted
    agents = second.svc.agents
    assert (second.status("c1"), len(reads)) == ("running", 1)
    assert (second.status("c1"), len(reads)) == ("running", 2)  # no snapshot: read every time
    agents.in_snapshot = True
    assert (second.status("c1"), second.status("c2"), len(reads)) == ("running", "ready", 3)
    step(first, first.spawn, "root", "c2")  # another process's write
    assert (second.status("c2"), len(reads)) == ("ready", 3)  # the snapshot's reading
    step(second, second.open, "mine")  # this process wrote: read again
    assert (second.status("c2"), second.status("c1"), len(reads)) == ("running", "running", 4)
    with second.svc.transaction():
        second.open("other")
        assert (second.status("c2"), second.status("c2"), len(reads)) == ("running", "running", 6)
    second.store.rollback()
    step(first, first.spawn, "root", "c3")
    assert (second.status("c3"), len(reads)) == ("running", 7)  # the open group's was not kept
    agents.end_snapshot()
    assert (agents.in_snapshot, second.status("c3"), len(reads)) == (False, "running", 8)


def test_an_agent_live_in_another_process_is_not_activated_or_resumed_here(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.svc.host.close_root, "root", lambda: None)  # c1's turn keeps both live
    error = second.refusal(step, second, second.open, "root")
    assert (error.code, error.message) == (
        Code.INVALID_STATE,
        'agent "root" is live in another subagentd process',
    )
    # a follow-up for it is refused as draining, as p1 would refuse it (root is closing there)
    error = second.refusal(step, second, second.svc.host.followup, "c1", "from p2")
    assert (error.code, error.message) == (
        Code.DRAINING,
        'continuable subagents below parent "root" are draining; the operation was not admitted',
    )
    assert second.svc.records.get("c1").queued == 0
    # once p1 is fenced, its sessions are free here: p2 opens root and resumes c1
    clock.advance(TTL)
    assert step(second, second.svc.recovery.recover) == 1
    step(second, second.open, "root")
    assert second.texts_of_turns("root") == [
        ["Background subagent c1 failed before it finished.", "It left no closing message."]
    ]
    step(
        second,
        second.svc.tools.send_message,
        "root",
        None,
        SendMessageArgs(subagent_id="c1", message="again"),
    )
    assert second.texts_of_turns("c1") == [["again"]]
    assert second.store.get_lease("c1")[0] == "p2"


def test_a_message_to_a_child_live_in_another_process_is_run_there(tmp_path):
    """The lease rules never let a parent be live here while its child is live elsewhere; the
    state is made by removing the parent's lease row behind p1's back. p2 commits the message
    and signals p1, which runs it after c1's current turn; p2 never activates c1."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    with first.svc.transaction():
        first.store.conn.execute("DELETE FROM leases WHERE session_id = 'root'")
    first.svc.commit()
    step(second, second.open, "root")
    sent = step(
        second,
        second.svc.tools.send_message,
        "root",
        None,
        SendMessageArgs(subagent_id="c1", message="x"),
    )
    assert sent.text == "message queued as the next turn for subagent c1"
    assert second.svc.agents.registry.get("c1") is None and second.svc.records.get("c1").queued == 1
    assert second.store.take_signals("p2") == []
    step(first, first.svc.scheduler.take_signals)
    assert first.svc.agents.registry.get("c1").pending == 1  # behind its running first turn
    step(first, first.end, "c1")
    assert first.texts_of_turns("c1")[-1] == ["x"]
    assert first.store.get_message(sent.message_id).state == "claimed"


# a deleted database file
@pytest.mark.sqlite_only
def test_the_heartbeat_reaps_a_stalled_process_and_stops_once_the_file_is_gone(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    turn = first.turn("c1")
    clock.advance(TTL - 1)
    step(second, second.svc.recovery.heartbeat)
    assert crash_ends(second, "c1") == [] and owners(second)["p1"][1] == 0
    clock.advance(1)
    step(second, second.svc.recovery.heartbeat)
    assert owners(second)["p1"][1] == 1
    events = second.svc.records.read_transcript("c1", None, None).events
    assert (events[-1].type, events[-1].turn_id) == ("turn_end", turn)
    assert crash_ends(second, "c1") == [{"turn_id": turn, "reason": "error", "cause": "crash"}]
    # the file deleted: the heartbeat reaps nothing (and writes nothing) any more
    third = process(path, clock, "p3")
    step(third, third.open, "r3")
    step(third, third.spawn, "r3", "c3")
    clock.advance(TTL)
    os.remove(path)
    second.svc.recovery.heartbeat()
    assert second.svc.store.dirty is False and owners(second)["p3"][1] == 0
    assert crash_ends(second, "c3") == []


def test_recovery_never_fences_its_own_owner_and_keeps_a_fenced_owner_row_for_a_day(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    clock.advance(TTL + 1)  # nobody renewed p1: only another process may fence it
    with first.svc.transaction():
        assert first.svc.recovery.recover() == 0
        assert owners(first)["p1"][1] == 0 and first.store.get_lease("c1")[0] == "p1"
    first.svc.commit()
    assert first.status("c1") == "running" and crash_ends(first, "c1") == []
    clock.advance(TTL + 1)
    second = process(path, clock, "p2")
    # p1 expired before p2's database answered it: p2 first watches it stay expired for a TTL
    # (a stall of the database would have stopped p1's renewals too)
    assert owners(second)["p1"][1] == 0
    clock.advance(TTL)
    step(second, second.svc.recovery.recover)
    assert owners(second)["p1"][1] == 1
    step(second, second.svc.recovery.recover)
    assert owners(second)["p1"][1] == 1  # kept: a process that wakes within a day finds it
    clock.advance(DAY)
    step(second, second.svc.recovery.recover)
    assert "p1" not in owners(second)


def test_a_lease_holds_only_while_its_owner_row_is_there_unfenced_unexpired_and_alive(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    for root in ("a", "b", "c", "d"):
        step(first, first.open, root)
    refused = second.refusal(step, second, second.open, "a")
    assert refused.message == 'agent "a" is live in another subagentd process'
    # an owner row fenced while its lease rows stayed (as no fence leaves them): holds nothing
    with second.svc.transaction():
        second.store.conn.execute("UPDATE owners SET fenced = 1 WHERE owner = 'p1'")
    second.svc.commit()
    step(second, second.open, "a")
    assert second.store.get_lease("a")[0] == "p2"
    # a lease whose owner has no row (gone, or from an older subagentd): holds nothing
    with second.svc.transaction():
        second.store.conn.execute("UPDATE owners SET fenced = 0 WHERE owner = 'p1'")
        second.store.conn.execute(
            "UPDATE leases SET owner = 'older' WHERE owner = 'p1' AND session_id = 'b'"
        )
    second.svc.commit()
    assert second.status("b") == "ready" and second.status("c") == "idle"
    step(second, second.open, "b")
    # an owner whose process is gone from this host is fenced by the first look at its lease
    second.svc.settings.owner_alive = lambda owner: owner != "p1"
    step(second, second.open, "c")
    assert owners(second)["p1"][1] == 1 and second.store.get_lease("d") is None
    second.svc.settings.owner_alive = lambda owner: True
    # an owner whose lease expired is fenced by the first look at its lease, too
    third = process(path, clock, "p3")
    step(third, third.open, "e")
    clock.advance(TTL)
    step(second, second.open, "e")
    assert owners(second)["p3"][1] == 1 and second.store.get_lease("e")[0] == "p2"


def test_a_renewal_that_lands_between_the_look_and_the_fence_keeps_the_lease(tmp_path):
    """holds() read the owner's row before the write lock: the fence re-reads it under the lock
    and leaves an owner that renewed meanwhile alone (its sessions stay live elsewhere)."""
    path = str(tmp_path / "shared.db")

    class RacingClock(FakeClock):
        race = None

        def __call__(self) -> float:
            race, RacingClock.race = RacingClock.race, None
            if race is not None:
                race()
            return self.now

    clock = RacingClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    clock.advance(TTL)  # p1's row expired: but p1 renews as second judges it
    RacingClock.race = lambda: step(first, first.open, "renewing")
    assert second.svc.leases.live_elsewhere("root") is True
    second.svc.commit()
    assert owners(second)["p1"] == (clock.now + TTL, 0)
    assert second.store.get_lease("root")[0] == "p1"


def test_recovery_forgets_idempotency_keys_exactly_past_the_retention(tmp_path):
    retention = 100.0  # days: a second per day of error moves the cut by 100 s
    core = CoreHost(idempotency_retention=retention)
    record = IdempotencyRecord(method="send_message", fingerprint="f", result="{}")
    cut = time.time() - retention * DAY
    core.store.put_idempotent("root", "past", record, stamp(cut - 30))
    core.store.put_idempotent("root", "within", record, stamp(cut + 30))
    core.svc.recovery.recover()
    assert core.store.get_idempotent("root", "past") is None
    assert core.store.get_idempotent("root", "within") is not None


FAILED = ["Background subagent {id} failed before it finished.", "It left no closing message."]


def test_a_turn_left_open_by_a_dead_process_ends_as_a_crash_when_its_session_is_activated_here(
    tmp_path,
):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.svc.host.begin_turn, "root", ["hi"])
    step(first, first.spawn, "root", "c1")
    root_turn, c1_turn = first.turn("root"), first.turn("c1")
    second.svc.settings.owner_alive = lambda owner: owner != "p1"  # p1 died
    step(second, second.open, "root")  # fences p1; root's open turn ends as a crash
    assert crash_ends(second, "root") == [
        {"turn_id": root_turn, "reason": "error", "cause": "crash"}
    ]
    agent = second.svc.agents.registry.get("root")
    assert (agent.last_reason, agent.last_output, agent.status) == ("error", None, "idle")
    before = view(second)
    second.svc.recovery.rebuild()  # memory agrees with storage
    assert view(second) == before
    assert second.store.get_session("c1").open_turn_id == c1_turn  # not reaped yet
    second.notes.clear()
    step(
        second,
        second.svc.tools.send_message,
        "root",
        None,
        SendMessageArgs(subagent_id="c1", message="again"),
    )
    # c1's activation ended its open turn first: its live parent was told, and woken
    assert crash_ends(second, "c1") == [{"turn_id": c1_turn, "reason": "error", "cause": "crash"}]
    assert second.texts_of_turns("root") == [[line.format(id="c1") for line in FAILED]]
    assert second.texts_of_turns("c1") == [["again"]]


def test_crash_notices_to_parents_that_are_not_live_are_queued_or_only_recorded(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    step(first, first.svc.host.begin_turn, "root", ["hi"])
    step(first, first.svc.host.followup, "root", "f1")
    step(first, first.svc.host.host_interrupt, "root")
    step(first, first.end, "root", "aborted")  # root idle, f1 parked
    step(first, first.spawn, "root", "c1")
    step(first, first.spawn, "root", "quick", mode="one-shot")  # a one-shot: no notice
    step(first, first.spawn, "root", "once", mode="one-shot")
    step(first, first.spawn, "once", "oc")
    step(first, first.end, "once", "completed")  # oc is adopted by root
    step(first, first.spawn, "root", "m")
    step(first, first.spawn, "m", "mc")
    assert first.store.get_session("root").parked is True
    # p1 dies; p2's start-up recovery fences it and ends every open turn as a crash
    second = process(path, clock, "p2", owner_alive=lambda owner: owner != "p1")
    for agent_id in ("c1", "quick", "oc", "m", "mc"):
        stored = second.store.get_session(agent_id)
        assert (stored.open_turn_id, stored.last_reason) == (None, "error"), agent_id
        assert len(crash_ends(second, agent_id)) == 1
    # an ordinary parent: the notices are queued, and they unpark its inbox (waking inputs)
    info = second.svc.records.get("root")
    assert (info.queued, info.parked, second.store.get_session("root").parked) == (3, 0, False)
    # a continuable parent: queued for its next activation
    assert (second.svc.records.get("m").queued, second.svc.records.get("m").parked) == (1, 0)
    # a one-shot parent never runs again: only recorded in its transcript
    assert second.svc.records.get("once").queued == 0
    last = second.svc.records.read_transcript("once", None, None).events[-1]
    assert last.type == "notice"
    assert [b["text"] for b in last.data["content"]] == [line.format(id="oc") for line in FAILED]
    second.notes.clear()
    step(second, second.open, "root")  # the parked message first, then the notices in order
    texts = second.texts_of_turns("root")
    assert texts == [["f1"]]


def test_a_crash_notice_to_a_parent_whose_descriptor_cannot_be_read_is_queued(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "m")
    step(first, first.spawn, "m", "mc")
    with first.svc.transaction():  # written by a newer subagentd, say
        first.store.conn.execute("UPDATE descriptors SET body = '{}' WHERE session_id = 'm'")
    first.svc.commit()
    second = process(path, clock, "p2", owner_alive=lambda owner: owner != "p1")
    assert second.svc.records.get("m").queued == 1  # mc's notice: m is not known to be a one-shot
    assert second.svc.records.get("root").queued == 0  # m's own crash: its kind unknown, no notice


# --- interrupts of an agent live in another process (signals, storage/signals.py) -------------


def root_moved_to(path: str, clock: FakeClock) -> tuple[CoreHost, CoreHost]:
    """p1 runs root -> c1 (continuable) and root -> o1 (one-shot), all in their first turns; root's
    lease row is removed behind p1's back so that p2 can open root too (the lease rules never
    let that happen: this is the state a signal must cope with, as in the message test above)."""
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.spawn, "root", "o1", mode="one-shot")
    with first.svc.transaction():
        first.store.conn.execute("DELETE FROM leases WHERE session_id = 'root'")
    first.svc.commit()
    step(second, second.open, "root")
    first.notes.clear()
    return first, second


def test_the_host_interrupts_an_agent_live_in_another_process_through_its_signal(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first, second = root_moved_to(path, clock)
    result = step(second, second.svc.host.host_interrupt, "c1")
    assert (result.accepted, result.previous_status) == (True, "running")
    assert first.take("turn/interrupt") == []  # p1 acts once it takes the signal
    step(first, first.svc.scheduler.take_signals)
    assert first.take("turn/interrupt") == [
        {"agent_id": "c1", "turn_id": first.turn("c1"), "cause": {"kind": "user"}}
    ]
    step(first, first.svc.host.close_root, "root", lambda: None)  # c1 and o1 are disposing
    result = step(second, second.svc.host.host_interrupt, "o1")
    assert (result.accepted, result.previous_status) == (False, "running")
    clock.advance(TTL)  # p1 stalled: its leases hold no more, nothing is signalled
    assert step(second, second.svc.host.host_interrupt, "c1").accepted is False


def test_interrupt_agent_of_an_agent_live_in_another_process_checks_its_recorded_ancestry(
    tmp_path,
):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first, second = root_moved_to(path, clock)
    step(second, second.spawn, "root", "c2")
    refused = second.refusal(step, second, second.interrupt, "root", "c1")
    assert (
        (refused.code, refused.message)
        == (
            Code.UNAUTHORIZED,
            'subagent "c1" is not a live descendant of agent "root"',  # root's activation here is not in it
        )
    )
    refused = second.refusal(step, second, second.interrupt, "c2", "c1")
    assert refused.message == 'subagent "c1" is a sibling of agent "c2", not its descendant'
    # p2's root made an ancestor in c1's recorded ancestry (what a real ancestor's activation is)
    here = second.svc.agents.registry.get("root").activation_id
    recorded = second.store.live_record("c1").ancestry
    with second.svc.transaction():
        second.store.conn.execute(
            "UPDATE leases SET ancestry = ? WHERE session_id = 'c1'", (f"{recorded} {here}",)
        )
    second.svc.commit()
    done = step(second, second.interrupt, "root", "c1")
    assert (done.text, done.accepted, done.previous_status) == (
        "interrupt requested for agent c1",
        True,
        "running",
    )
    one_shot = step(second, second.interrupt, "root", "o1")  # not continuable: a no-op
    assert (one_shot.accepted, one_shot.previous_status) == (True, "running")
    step(first, first.svc.scheduler.take_signals)
    assert first.take("turn/interrupt") == [
        {"agent_id": "c1", "turn_id": first.turn("c1"), "cause": {"kind": "parent", "by": "root"}}
    ]


def test_signals_for_agents_that_left_are_dropped_and_the_rest_still_act(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first, second = root_moved_to(path, clock)
    step(second, second.svc.host.host_interrupt, "c1")
    step(second, second.svc.host.followup, "o1", "after")
    step(first, first.end, "c1")  # c1 settles before p1 takes its signal
    first.notes.clear()
    step(first, first.svc.scheduler.take_signals)
    assert first.take("turn/interrupt") == []
    assert first.svc.agents.registry.get("o1").pending == 1  # o1's input still arrived
    clock.advance(TTL)  # p1 stalled: its leases hold no more, nothing is signalled
    assert step(second, second.svc.host.host_interrupt, "o1").accepted is False


def test_a_ring_naming_one_session_takes_its_signals_only_and_each_signal_acts_once(tmp_path):
    """A doorbell's ring names the session signalled (PostgreSQL's payload): the owner takes that
    session's signals alone (under its tree's lock, server/connection.py `_doorbell`), and the
    rest wait for the next look at all of them (a ring naming none, or the heartbeat's)."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "a")
    step(first, first.open, "b")
    step(second, second.svc.host.followup, "a", "to a")
    step(second, second.svc.host.followup, "b", "to b")
    step(first, first.svc.scheduler.take_signals, {"a"})
    assert (first.texts_of_turns("a"), first.texts_of_turns("b")) == ([["to a"]], [])
    step(first, first.svc.scheduler.take_signals)
    assert (first.texts_of_turns("a"), first.texts_of_turns("b")) == ([], [["to b"]])
    step(first, first.svc.scheduler.take_signals)
    step(first, first.svc.scheduler.take_signals, {"a", "b"})
    assert first.take("turn/start") == []
