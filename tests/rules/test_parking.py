"""Parking after interrupts and the waking inputs that end it: SEMANTICS.md sections 1 and 5.

An interrupt parks only what is queued; the next waking input (send_message, host follow-up, a
wakeup report or a settlement notice from one of its children) unparks the inbox, and the parked
messages run first, in order, each as its own turn, then the waking one."""

import pytest

from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost

G1_DONE = "Background subagent g1 finished and will do no further work unless you send it more."
C1_STOPPED = "Background subagent c1 was stopped before it finished."


def states(core: CoreHost, *message_ids: str) -> list[str]:
    return [core.svc.records.get_message(m).state for m in message_ids]


def parked_flag(core: CoreHost, agent_id: str) -> bool:
    record = core.store.get_session(agent_id)
    assert record is not None
    return record.parked


@pytest.fixture
def parked_c1():
    """root -> c1 -> g1 (both running); c1 is interrupted holding one queued message."""
    core = CoreHost.with_tree()
    held = core.send("root", "c1", "held").message_id
    core.interrupt("root", "c1")
    core.end("c1", "aborted")
    assert core.status("c1") == "idle"
    assert states(core, held) == ["parked"]
    core.notes.clear()
    return core, held


def test_a_wakeup_report_from_a_child_unparks_parked_messages_first(parked_c1):
    core, held = parked_c1
    report = core.report("g1", "partial finding").message_id
    assert states(core, held, report)[1] == "queued"
    assert core.texts_of_turns("c1") == [["held"]]
    assert states(core, held) == ["claimed"]
    core.end("c1")
    assert core.texts_of_turns("c1") == [["Background subagent g1 reported:", "partial finding"]]
    assert states(core, report) == ["claimed"]


def test_a_settlement_notice_about_a_child_unparks_and_the_whole_tree_settles(parked_c1):
    core, held = parked_c1
    core.end("g1", "completed", "leaf done")
    assert core.texts_of_turns("c1") == [["held"]]  # the parked message first
    core.end("c1")
    assert core.texts_of_turns("c1") == [[G1_DONE, "Its closing message:", "leaf done"]]
    core.end("c1", "completed", "all done")
    assert core.take("agent/settled", "c1") == [{"agent_id": "c1", "reason": "completed"}]
    [[first, *_]] = core.texts_of_turns("root")
    assert first.startswith("Background subagent c1 finished")
    assert parked_flag(core, "c1") is False


def test_a_quiet_report_wakes_nothing_and_keeps_the_parking():
    core = CoreHost(report_delivery="quiet")
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    held = core.send("root", "c1", "held").message_id
    core.interrupt("root", "c1")
    core.end("c1", "aborted")
    core.notes.clear()
    quiet = core.report("g1", "fyi").message_id
    assert core.take("turn/start") == []
    assert [n["agent_id"] for n in core.take("agent/inject")] == ["c1"]
    assert states(core, held, quiet) == ["parked", "claimed"]


def test_a_host_followup_to_a_parked_live_agent_unparks_it(parked_c1):
    core, held = parked_c1
    followup = core.svc.host.followup("c1", "from the host").message_id
    assert core.texts_of_turns("c1") == [["held"]]
    assert states(core, followup) == ["queued"]


def test_an_interrupt_parks_only_what_is_queued():
    core = CoreHost.with_tree()
    core.interrupt("root", "c1")  # nothing queued
    assert parked_flag(core, "c1") is False
    core.end("c1", "aborted")
    # c1 waits on g1 with nothing parked; its report then starts a turn at once
    core.report("g1", "news")
    assert core.texts_of_turns("c1") == [["Background subagent g1 reported:", "news"]]


def test_a_second_interrupt_while_unparked_messages_drain_parks_the_rest():
    core = CoreHost.with_tree()
    first = core.send("root", "c2", "first").message_id
    second = core.send("root", "c2", "second").message_id
    core.interrupt("root", "c2")
    core.end("c2", "aborted")
    newest = core.send("root", "c2", "newest").message_id  # unparks: "first" runs
    assert core.texts_of_turns("c2") == [["first"]]
    assert states(core, first, second, newest) == ["claimed", "queued", "queued"]
    core.interrupt("root", "c2")  # the rest is queued again, so it parks again
    assert states(core, second, newest) == ["parked", "parked"]
    core.end("c2", "aborted")
    assert core.take("turn/start", "c2") == []
    assert core.status("c2") == "idle"
    core.svc.host.followup("c2", "wake")
    assert core.texts_of_turns("c2") == [["second"]]
    core.end("c2")
    core.end("c2")
    assert core.texts_of_turns("c2") == [["newest"], ["wake"]]


def test_an_interrupted_idle_child_settles_aborted_once_what_kept_it_is_gone():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "once", mode="one-shot")
    core.end("c1", "completed", "first turn words")
    assert core.status("c1") == "idle"  # owns the running one-shot child
    core.notes.clear()
    result = core.interrupt("root", "c1")
    assert (result.accepted, result.previous_status) == (True, "idle")
    assert core.take("turn/interrupt") == []  # no open turn to stop
    assert core.status("c1") == "idle"
    core.end("once", "completed", "one-shot result")  # no notice to c1: nothing wakes it
    assert core.take("agent/settled") == [
        {"agent_id": "once", "reason": "completed"},
        {"agent_id": "c1", "reason": "aborted"},
    ]
    assert core.texts_of_turns("root") == [[C1_STOPPED, "It left no closing message."]]


def test_settling_clears_the_parked_flag():
    core = CoreHost.with_tree()
    held = core.send("root", "c2", "held").message_id
    core.interrupt("root", "c2")
    core.end("c2", "aborted")
    assert parked_flag(core, "c2") is True
    assert core.status("c2") == "idle"  # the parked message keeps it resident
    core.svc.host.cancel_message(held)
    assert core.take("agent/settled", "c2") == [{"agent_id": "c2", "reason": "aborted"}]
    assert parked_flag(core, "c2") is False
    assert (core.svc.records.get("c2").queued, core.svc.records.get("c2").parked) == (0, 0)


def test_a_closing_drain_keeps_parked_messages_parked_for_the_next_activation():
    core = CoreHost.with_tree()
    first = core.send("root", "c2", "first").message_id
    second = core.send("root", "c2", "second").message_id
    core.interrupt("root", "c2")
    core.end("c2", "aborted")
    closed = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    core.end("g1", "aborted")
    core.end("c1", "aborted")
    assert closed == [True]
    assert {"agent_id": "c2", "reason": "closed"} in core.take("agent/settled")
    assert states(core, first, second) == ["parked", "parked"]
    assert parked_flag(core, "c2") is True
    core.open("root")
    core.notes.clear()
    newest = core.send("root", "c2", "newest").message_id  # cold resume: parked ones first
    [start] = core.take("turn/start", "c2")
    assert start["resume"]["label"] == "task"
    assert [b["text"] for m in start["messages"] for b in m["content"]] == ["first"]
    assert states(core, second, newest) == ["queued", "queued"]
    core.end("c2")
    core.end("c2")
    assert core.texts_of_turns("c2") == [["second"], ["newest"]]


def crashed_with_parked_child(path: str) -> None:
    """root -> c2 running with two messages parked by an interrupt; the process dies."""
    first = CoreHost(store=SqliteStore(path))
    first.open("root")
    first.spawn("root", "c2")
    first.send("root", "c2", "parked one")
    first.send("root", "c2", "parked two")
    first.interrupt("root", "c2")
    first.store.commit()
    first.store.conn.close()


def test_a_cold_resume_reads_the_stored_parked_flag_and_runs_parked_messages_first(tmp_path):
    path = str(tmp_path / "cold.db")
    crashed_with_parked_child(path)
    second = CoreHost(store=SqliteStore(path), owner_alive=lambda owner: False)
    assert second.status("c2") == "ready"
    assert parked_flag(second, "c2") is True
    assert (second.svc.records.get("c2").queued, second.svc.records.get("c2").parked) == (0, 2)
    second.open("root")
    second.end("root")  # the crash notice about c2
    second.notes.clear()
    new = second.send("root", "c2", "after restart").message_id
    assert second.texts_of_turns("c2") == [["parked one"]]
    second.end("c2")
    assert second.texts_of_turns("c2") == [["parked two"]]
    second.end("c2")
    assert second.texts_of_turns("c2") == [["after restart"]]
    assert states(second, new) == ["claimed"]
    second.end("c2")
    assert second.take("agent/settled", "c2") == [{"agent_id": "c2", "reason": "completed"}]
    assert (second.svc.records.get("c2").queued, second.svc.records.get("c2").parked) == (0, 0)


def test_a_followup_to_a_ready_parked_agent_unparks_its_stored_inbox(tmp_path):
    path = str(tmp_path / "ready.db")
    crashed_with_parked_child(path)
    second = CoreHost(store=SqliteStore(path), owner_alive=lambda owner: False)
    followup = second.svc.host.followup("c2", "from the host").message_id
    assert second.status("c2") == "ready"  # not resumed
    assert parked_flag(second, "c2") is False
    assert (second.svc.records.get("c2").queued, second.svc.records.get("c2").parked) == (3, 0)
    assert states(second, followup) == ["queued"]


def test_crash_recovery_notice_to_a_parked_non_live_parent_keeps_its_parked_order(tmp_path):
    """The parent's stored parking is honoured: the crash notice (a waking input) unparks it, so
    at its next activation the message parked by the interrupt runs first, then the notice."""
    path = str(tmp_path / "parent.db")
    first = CoreHost(store=SqliteStore(path))
    first.open("root")
    first.svc.host.begin_turn("root", ["work"])
    first.spawn("root", "c1")
    held = first.svc.host.followup("root", "held for root").message_id
    assert first.svc.host.host_interrupt("root").accepted is True
    first.end("root", "aborted")
    assert states(first, held) == ["parked"]
    first.store.commit()
    first.store.conn.close()  # dies with c1's turn open

    second = CoreHost(store=SqliteStore(path), owner_alive=lambda owner: False)
    assert parked_flag(second, "root") is False  # unparked by the notice
    assert (second.svc.records.get("root").queued, second.svc.records.get("root").parked) == (2, 0)
    second.open("root")
    assert second.texts_of_turns("root") == [["held for root"]]
    second.end("root")
    assert second.texts_of_turns("root") == [
        ["Background subagent c1 failed before it finished.", "It left no closing message."]
    ]


def test_interrupting_a_target_being_disposed_is_a_no_op():
    core = CoreHost.with_tree()
    waiting = core.send("root", "c2", "waiting").message_id
    closed = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    [stop] = core.take("turn/interrupt", "c2")
    assert stop["cause"] == {"kind": "shutdown"}
    core.notes.clear()
    result = core.interrupt("root", "c2")
    assert (result.text, result.accepted, result.previous_status) == (
        "interrupt requested for agent c2",
        True,
        "running",
    )
    assert core.take("turn/interrupt") == []
    assert states(core, waiting) == ["queued"]  # a drain parks nothing
    assert parked_flag(core, "c2") is False
    events = [e.type for e in core.svc.records.read_transcript("c2", None, None).events]
    assert events.count("interrupt") == 1  # only the shutdown's
    host = core.svc.host.host_interrupt("c2")
    assert (host.accepted, host.previous_status) == (False, "running")
