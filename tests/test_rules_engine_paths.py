"""Engine paths the other rule tests pass by: draining texts, lookups' errors, interrupts of idle
or already interrupted turns, shutdown's interrupts that do not park, a parked root reopened, a
one-shot's settlement reason; fast and in-process."""

from __future__ import annotations

from subagentd.schema.codes import Code
from subagentd.schema.host import OpenParams, TurnEndParams
from tests.core_host import CoreHost
from tests.test_rules_engine_events import notice
from tests.test_rules_engine_rebuild import view

DRAINING_ALL = "continuable subagents are draining; the operation was not admitted"
STOPPED = "Background subagent {id} was stopped before it finished."


def test_admissions_during_a_close_or_a_shutdown_are_refused_with_the_documented_texts():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.open("other")
    core.spawn("other", "o1")
    core.svc.close_root("root", lambda: None)
    below = 'continuable subagents below parent "root" are draining; the operation was not admitted'
    error = core.refusal(core.spawn, "c1", "g1")
    assert (error.code, error.message) == (Code.DRAINING, below)
    error = core.refusal(core.send, "root", "c1")
    assert (error.code, error.message) == (Code.DRAINING, f"message not delivered: {below}")
    core.spawn("other", "o2")  # another tree is not draining
    core.svc.shutdown(lambda: None)
    error = core.refusal(core.spawn, "other", "o3")
    assert (error.code, error.message) == (Code.DRAINING, DRAINING_ALL)
    error = core.refusal(core.send, "other", "o1")
    assert (error.code, error.message) == (Code.DRAINING, f"message not delivered: {DRAINING_ALL}")
    error = core.refusal(core.open, "late")
    assert (error.code, error.message) == (Code.DRAINING, DRAINING_ALL)


def test_lookups_name_the_agent_that_is_unknown_or_not_live():
    core = CoreHost()
    core.open("root")
    core.svc.close_root("root", lambda: None)
    error = core.refusal(core.svc.get, "ghost")
    assert (error.code, error.message) == (Code.UNKNOWN_AGENT, 'agent "ghost" does not exist')
    end = TurnEndParams(agent_id="ghost", turn_id="t", reason="completed")
    error = core.refusal(core.svc.finish_turn, end)
    assert (error.code, error.message) == (Code.UNKNOWN_AGENT, 'agent "ghost" does not exist')
    error = core.refusal(core.svc.begin_turn, "root", None)
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
    types = [e.type for e in core.svc.read_transcript("c1", None, None).events]
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
    core.svc.rebuild()  # memory agrees with storage: the live agent counts it so too
    assert view(core) == before
    # when c1 is drained, its parent is told it was stopped, with no closing message
    core.svc.close_root("root", lambda: None)
    core.end("g1", "aborted")
    root = core.svc.read_transcript("root", None, None).events
    assert root[-2].type == "notice"
    message = {k: v for k, v in root[-2].data.items() if k != "message_id"}
    assert message == notice("c1", STOPPED.format(id="c1"), None)


def test_a_shutdown_interrupt_leaves_queued_messages_queued_and_a_user_interrupt_parks_them():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    queued = core.send("root", "c1", "next").message_id
    core.svc.close_root("root", lambda: None)
    assert core.svc.get_message(queued).state == "queued"
    core = CoreHost()
    core.open("root")
    core.svc.begin_turn("root", ["hi"])
    queued = core.svc.followup("root", "next").message_id
    assert core.svc.host_interrupt("root").previous_status == "running"
    assert core.svc.get_message(queued).state == "parked"


def test_a_root_closed_while_parked_is_reopened_parked_with_its_waiting_messages_counted():
    core = CoreHost(max_queued=3)
    core.open("root")
    core.svc.begin_turn("root", ["hi"])
    core.svc.followup("root", "f1")
    core.svc.followup("root", "f2")
    core.svc.host_interrupt("root")
    core.end("root", "aborted")
    core.svc.close_root("root", lambda: None)
    core.notes.clear()
    core.open("root")
    assert core.notes == []  # parked: nothing starts
    assert core.svc.get("root").parked == 2
    core.svc.followup("root", "f3")  # waking: the parked ones run first
    assert core.texts_of_turns("root") == [["f1"]]
    core.svc.followup("root", "f4")  # f2, f3, f4 wait: the inbox is full
    error = core.refusal(core.svc.followup, "root", "f5")
    assert (error.code, error.message) == (
        Code.OVERLOADED,
        'agent "root" already has 3 messages waiting (the limit per inbox); wait until it has'
        " taken some",
    )


def test_a_followup_to_a_parked_root_that_is_not_live_unparks_its_inbox():
    core = CoreHost()
    core.open("root")
    core.svc.begin_turn("root", ["hi"])
    core.svc.followup("root", "f1")
    core.svc.host_interrupt("root")
    core.end("root", "aborted")
    core.svc.close_root("root", lambda: None)
    assert core.store.get_session("root").parked is True
    core.svc.followup("root", "f2")
    info = core.svc.get("root")
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
    events = core.svc.read_transcript("once", None, None).events
    assert (events[-1].type, events[-1].data) == ("settled", {"reason": "refusal"})


def test_a_message_claimed_by_a_turn_names_that_turn():
    core = CoreHost()
    core.open("root")
    spawned = core.spawn("root", "c1")
    info = core.svc.get_message(spawned.message_id)
    assert (info.state, info.turn_id) == ("claimed", core.turn("c1"))


def test_reopening_a_root_reads_its_last_turn_as_stored():
    core = CoreHost()
    core.svc.open(OpenParams(agent_id="root"))
    core.svc.begin_turn("root", ["hi"])
    core.end("root", "max-tokens", "half")
    core.svc.close_root("root", lambda: None)
    core.open("root")
    agent = core.svc.registry.get("root")
    assert (agent.last_reason, agent.last_output) == ("max-tokens", "half")
    core.svc.commit()
    before = view(core)
    core.svc.rebuild()
    assert view(core) == before
