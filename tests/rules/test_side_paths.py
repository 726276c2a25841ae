"""Core paths the other rule tests pass by: draining texts, lookups' errors, interrupts of idle
or already interrupted turns, shutdown's interrupts that do not park, a parked root reopened, a
one-shot's settlement reason; fast and in-process."""

from __future__ import annotations

import msgspec

from subagentd.core import texts
from subagentd.core.clock import ManualClock
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import OpenParams, TurnEndParams
from tests.core_host import CoreHost
from tests.rules.test_events_and_notices import notice
from tests.rules.test_rebuild import view

DRAINING_ALL = "continuable subagents are draining; the operation was not admitted"
STOPPED = "Background subagent {id} was stopped before it finished."


def test_admissions_during_a_close_or_a_shutdown_are_refused_with_the_documented_texts():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.open("other")
    core.spawn("other", "o1")
    core.svc.host.close_root("root", lambda: None)
    below = 'continuable subagents below parent "root" are draining; the operation was not admitted'
    error = core.refusal(core.spawn, "c1", "g1")
    assert (error.code, error.message) == (Code.DRAINING, below)
    error = core.refusal(core.send, "root", "c1")
    assert (error.code, error.message) == (Code.DRAINING, f"message not delivered: {below}")
    core.spawn("other", "o2")  # another tree is not draining
    core.svc.settlement.shutdown(lambda: None)
    error = core.refusal(core.spawn, "other", "o3")
    assert (error.code, error.message) == (Code.DRAINING, DRAINING_ALL)
    error = core.refusal(core.send, "other", "o1")
    assert (error.code, error.message) == (Code.DRAINING, f"message not delivered: {DRAINING_ALL}")
    error = core.refusal(core.open, "late")
    assert (error.code, error.message) == (Code.DRAINING, DRAINING_ALL)


def test_lookups_name_the_agent_that_is_unknown_or_not_live():
    core = CoreHost()
    core.open("root")
    core.svc.host.close_root("root", lambda: None)
    error = core.refusal(core.svc.records.get, "ghost")
    assert (error.code, error.message) == (Code.UNKNOWN_AGENT, 'agent "ghost" does not exist')
    end = TurnEndParams(agent_id="ghost", turn_id="t", reason="completed")
    error = core.refusal(core.svc.host.finish_turn, end)
    assert (error.code, error.message) == (Code.UNKNOWN_AGENT, 'agent "ghost" does not exist')
    error = core.refusal(core.svc.host.begin_turn, "root", None)
    assert (error.code, error.message) == (Code.INVALID_STATE, 'agent "root" is not live')


def test_an_interrupt_is_recorded_once_and_tells_the_host_who_asked():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    turn = core.turn("c1")
    core.notes.clear()
    first = core.interrupt("root", "c1")
    again = core.interrupt("root", "c1")
    assert (first.previous_status, again.previous_status) == ("running", "running")
    assert core.take("turn/interrupt") == [
        {"agent_id": "c1", "turn_id": turn, "cause": {"kind": "parent", "by": "root"}}
    ]
    types = [e.type for e in core.svc.records.read_transcript("c1", None, None).events]
    assert types.count("interrupt") == 1
    assert core.timers.fire_all() == 1  # one grace timer


def test_an_idle_agent_interrupted_counts_its_last_turn_as_aborted():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.end("c1", "completed", "o")  # c1 idle, kept live by g1
    result = core.interrupt("root", "c1")
    assert result.previous_status == "idle"
    stored = core.store.get_session("c1")
    assert (stored.last_reason, stored.last_output) == ("aborted", None)
    core.svc.commit()
    before = view(core)
    core.svc.recovery.rebuild()  # memory agrees with storage: the live agent counts it so too
    assert view(core) == before
    # when c1 is drained, its parent is told it was stopped, with no closing message
    core.svc.host.close_root("root", lambda: None)
    core.end("g1", "aborted")
    root = core.svc.records.read_transcript("root", None, None).events
    assert root[-2].type == "notice"
    message = {k: v for k, v in root[-2].data.items() if k != "message_id"}
    assert message == notice("c1", STOPPED.format(id="c1"), None)


def test_a_shutdown_interrupt_leaves_queued_messages_queued_and_a_user_interrupt_parks_them():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    queued = core.send("root", "c1", "next").message_id
    core.svc.host.close_root("root", lambda: None)
    assert core.svc.records.get_message(queued).state == "queued"
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["hi"])
    queued = core.svc.host.followup("root", "next").message_id
    assert core.svc.host.host_interrupt("root").previous_status == "running"
    assert core.svc.records.get_message(queued).state == "parked"


def test_a_root_closed_while_parked_is_reopened_parked_with_its_waiting_messages_counted():
    core = CoreHost(max_queued=3)
    core.open("root")
    core.svc.host.begin_turn("root", ["hi"])
    core.svc.host.followup("root", "f1")
    core.svc.host.followup("root", "f2")
    core.svc.host.host_interrupt("root")
    core.end("root", "aborted")
    core.svc.host.close_root("root", lambda: None)
    core.notes.clear()
    core.open("root")
    assert core.notes == []  # parked: nothing starts
    assert core.svc.records.get("root").parked == 2
    core.svc.host.followup("root", "f3")  # waking: the parked ones run first
    assert core.texts_of_turns("root") == [["f1"]]
    core.svc.host.followup("root", "f4")  # f2, f3, f4 wait: the inbox is full
    error = core.refusal(core.svc.host.followup, "root", "f5")
    assert (error.code, error.message) == (
        Code.OVERLOADED,
        'agent "root" already has 3 messages waiting (the limit per inbox); wait until it has'
        " taken some",
    )


def test_a_followup_to_a_parked_root_that_is_not_live_unparks_its_inbox():
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["hi"])
    core.svc.host.followup("root", "f1")
    core.svc.host.host_interrupt("root")
    core.end("root", "aborted")
    core.svc.host.close_root("root", lambda: None)
    assert core.store.get_session("root").parked is True
    core.svc.host.followup("root", "f2")
    info = core.svc.records.get("root")
    assert (info.queued, info.parked, core.store.get_session("root").parked) == (2, 0, False)
    core.notes.clear()
    core.open("root")
    assert core.texts_of_turns("root") == [["f1"]]


def test_a_one_shot_child_settles_with_its_turns_reason():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "once", mode="one-shot")
    core.end("once", "refusal", "no")
    assert core.take("agent/settled") == [{"agent_id": "once", "reason": "refusal"}]
    events = core.svc.records.read_transcript("once", None, None).events
    assert (events[-1].type, events[-1].data) == ("settled", {"reason": "refusal"})


def test_a_message_claimed_by_a_turn_names_that_turn():
    core = CoreHost()
    core.open("root")
    spawned = core.spawn("root", "c1")
    info = core.svc.records.get_message(spawned.message_id)
    assert (info.state, info.turn_id) == ("claimed", core.turn("c1"))


def test_reopening_a_root_reads_its_last_turn_as_stored():
    core = CoreHost()
    core.svc.host.open(OpenParams(agent_id="root"))
    core.svc.host.begin_turn("root", ["hi"])
    core.end("root", "max-tokens", "half")
    core.svc.host.close_root("root", lambda: None)
    core.open("root")
    agent = core.svc.agents.registry.get("root")
    assert (agent.last_reason, agent.last_output) == ("max-tokens", "half")
    core.svc.commit()
    before = view(core)
    core.svc.recovery.rebuild()
    assert view(core) == before


def test_turn_start_names_the_activation_and_turn_and_carries_instructions_and_resume_as_due():
    core = CoreHost()
    root = core.open("root")
    core.svc.host.begin_turn("root", ["hi"])
    child = core.spawn("root", "c1", label="worker")
    once = core.spawn("root", "once", mode="one-shot")
    starts = {n["agent_id"]: n for n in core.take("turn/start")}
    assert starts["root"] == {
        "agent_id": "root",
        "activation_id": root,
        "turn_id": core.turn("root"),
        "messages": starts["root"]["messages"],
    }  # an ordinary agent: no instructions, no resume
    assert starts["c1"]["activation_id"] == child.activation_id
    assert starts["c1"]["turn_id"] == core.turn("c1")
    assert (
        starts["c1"]["instructions"] == texts.REPORT_INSTRUCTIONS and "resume" not in starts["c1"]
    )
    assert starts["once"]["activation_id"] == once.activation_id
    assert "instructions" not in starts["once"] and "resume" not in starts["once"]
    core.end("c1", "completed", "done")  # settles
    core.send("root", "c1", "again")  # a cold resume: the descriptor comes with the first turn
    resumed = core.take("turn/start", "c1")
    assert resumed[0]["resume"] == {"version": 1, "mode": "continuable", "label": "worker"}
    assert resumed[0]["instructions"] == texts.REPORT_INSTRUCTIONS
    core.send("root", "c1", "more")
    core.end("c1", "completed")
    later = core.take("turn/start", "c1")
    assert len(later) == 1 and "resume" not in later[0]


def test_a_turn_whose_message_count_drifted_from_storage_is_recounted_before_settling():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    queued = core.send("root", "c1", "next").message_id
    core.store.cancel_message(queued)  # behind the engine's back: its count says 1 waiting
    assert core.svc.agents.registry.get("c1").pending == 1
    core.end("c1", "completed", "done")
    assert core.take("agent/settled") == [{"agent_id": "c1", "reason": "completed"}]
    assert core.svc.agents.registry.get("c1") is None


def test_the_grace_period_is_the_configured_one():
    core = CoreHost(interrupt_grace=2.5)
    core.open("root")
    core.spawn("root", "c1")
    core.interrupt("root", "c1")
    assert [entry[0] for entry in core.timers.scheduled] == [2.5]


def test_the_report_rate_window_is_sliding_over_sixty_seconds():
    clock = ManualClock()
    core = CoreHost(report_rate=1, clock=clock)
    core.open("root")
    core.spawn("root", "c1")
    core.report("c1", "one")  # a wakeup
    clock.advance(59.999)
    core.report("c1", "two")  # within the minute: quiet
    assert [n["agent_id"] for n in core.take("agent/inject")] == ["root"]
    clock.advance(0.001)  # exactly 60 s after the wakeup: it no longer counts
    core.report("c1", "three")
    assert core.take("agent/inject") == []


def test_a_quiet_report_is_stored_claimed_and_recorded_with_its_source():
    core = CoreHost(report_delivery="quiet")
    core.open("root")
    core.spawn("root", "c1")
    result = core.report("c1", "half done")
    expected = {
        "message_id": result.message_id,
        "content": [
            {"type": "text", "text": "Background subagent c1 reported:"},
            {"type": "text", "text": "half done"},
        ],
        "source": {"kind": "subagent-report", "form": "relay", "sender_session_id": "c1"},
    }
    assert core.take("agent/inject") == [{"agent_id": "root", "messages": [expected]}]
    last = core.svc.records.read_transcript("root", None, None).events[-1]
    assert (last.type, last.turn_id, last.data) == ("message", None, expected)
    info = core.svc.records.get_message(result.message_id)
    assert (info.state, info.turn_id, info.source.kind) == ("claimed", None, "subagent-report")
    stored = core.store.get_message(result.message_id)
    assert msgspec.json.decode(stored.content) == expected["content"]


def test_a_child_that_left_and_is_resumed_starts_with_a_fresh_report_window_and_budget():
    """Windows go with the activation (quotas.forget, engine.leave): memory stays bounded by live
    agents."""
    core = CoreHost(report_rate=1, report_budget=10)
    core.open("root")
    core.spawn("root", "c1")
    core.report("c1", "0123456789")  # the one wakeup and the whole budget
    core.end("c1", "completed")  # c1 settles and leaves
    core.send("root", "c1", "again")
    core.report("c1", "0123456789")  # accepted, and a wakeup again
    assert core.take("agent/inject") == []
    assert core.svc.records.get("root").queued == 2  # c1's notice and its second report


def test_settling_clears_the_parked_flag_and_a_drain_leaves_parked_messages_parked():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    waiting = core.send("root", "c1", "m1").message_id
    core.interrupt("root", "c1")
    core.end("c1", "aborted")  # idle, m1 parked: it stays live
    assert core.store.get_session("c1").parked is True
    core.svc.host.cancel_message(waiting)  # nothing waits any more: c1 settles
    assert core.take("agent/settled") == [{"agent_id": "c1", "reason": "aborted"}]
    assert core.store.get_session("c1").parked is False
    # a drain disposes c2 with one parked message: the message and the flag stay parked
    core.spawn("root", "c2")
    kept = core.send("root", "c2", "m2").message_id
    core.interrupt("root", "c2")
    core.end("c2", "aborted")
    core.svc.host.close_root("root", lambda: None)
    assert core.take("agent/settled") == [{"agent_id": "c2", "reason": "closed"}]
    assert core.store.get_session("c2").parked is True
    assert core.svc.records.get_message(kept).state == "parked"
    assert (core.svc.records.get("c2").queued, core.svc.records.get("c2").parked) == (0, 1)


def test_a_continuable_child_settles_with_its_last_turns_reason():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.end("c1", "error")
    assert core.take("agent/settled") == [{"agent_id": "c1", "reason": "error"}]


def test_a_notice_to_a_one_shot_parent_still_running_is_only_recorded():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "once", mode="one-shot")
    core.spawn("once", "oc")
    core.end("oc", "completed", "found it")
    assert core.svc.records.get("once").queued == 0 and core.status("once") == "running"
    last = core.svc.records.read_transcript("once", None, None).events[-1]
    assert last.type == "notice"
    assert [b["text"] for b in last.data["content"]][-1] == "found it"
