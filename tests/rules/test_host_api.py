"""The trusted host API on core/ (PROTOCOL.md sections 4, 6 and 8): follow-ups, host turns and
interrupts, transcripts, message cancellation, agents/get and agents/list, closing and shutdown.
Fast, in-process; written for the mutants the wire tests alone killed (docs/mutation.md)."""

from __future__ import annotations

from subagentd.errors import (
    ActivationClosingError,
    AdmissionDrainingError,
    AgentUnknownError,
    InvalidParamsError,
    StateInvalidError,
)
from subagentd.schema.host_methods import Event, ListParams
from tests.core_host import CoreHost, events_of, refused


def parked_child() -> CoreHost:
    """root -> c1, c1 interrupted with one message queued: idle, holding it parked."""
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.send("root", "c1", "queued")
    core.interrupt("root", "c1")
    core.end("c1", "aborted")
    core.notes.clear()
    return core


# --- interrupts: the transcript, and the host's own interrupt --------------------------------


def test_an_interrupt_is_recorded_in_the_interrupted_turn_with_its_cause():
    core = CoreHost.with_tree()
    turn = core.turn("c1")
    core.interrupt("root", "g1")
    g1_turn = core.svc.agents.registry.get("g1").turn.turn_id
    core.svc.host.host_interrupt("c1")
    [tool] = [e for e in events_of(core, "g1") if e.type == "interrupt"]
    assert (tool.turn_id, tool.data) == (g1_turn, {"cause": "parent", "by": "root"})
    [host] = [e for e in events_of(core, "c1") if e.type == "interrupt"]
    assert (host.turn_id, host.data) == (turn, {"cause": "user", "by": None})


def test_the_host_interrupts_a_live_agent_with_user_authority_and_parks_its_inbox():
    core = CoreHost.with_tree()
    core.send("root", "c2", "waiting")
    turn = core.turn("c2")
    result = core.svc.host.host_interrupt("c2")
    assert (result.accepted, result.previous_status) == (True, "running")
    assert core.take("turn/interrupt") == [
        {"agent_id": "c2", "turn_id": turn, "cause": {"kind": "user"}}
    ]
    core.end("c2", "aborted")
    info = core.svc.records.get("c2")
    assert (info.status, info.queued, info.parked) == ("idle", 0, 1)
    result = core.svc.host.host_interrupt("root")  # roots too
    assert (result.accepted, result.previous_status) == (True, "idle")


def test_the_host_interrupt_of_a_session_that_is_not_live_is_not_accepted():
    core = CoreHost.with_tree()
    core.end("c2")  # settles: ready
    core.notes.clear()
    result = core.svc.host.host_interrupt("c2")
    assert (result.accepted, result.previous_status) == (False, "ready")
    assert core.notes == []
    message = refused(core, AgentUnknownError, core.svc.host.host_interrupt, "nobody")
    assert message == 'agent "nobody" does not exist'


def test_the_host_interrupt_of_an_agent_being_disposed_is_not_accepted():
    core = CoreHost.with_tree()
    core.svc.host.close_root("root", lambda: None)
    core.notes.clear()
    result = core.svc.host.host_interrupt("c1")
    assert (result.accepted, result.previous_status) == (False, "running")
    assert core.take("turn/interrupt") == []


# --- agents/followup ---------------------------------------------------------------------------


def test_a_followup_unparks_a_live_agent_and_runs_after_the_parked_messages():
    core = parked_child()
    result = core.svc.host.followup("c1", "from the user")
    assert core.svc.records.get_message(result.message_id).source.kind == "user"
    assert core.texts_of_turns("c1") == [["queued"]]
    core.end("c1")
    [start] = core.take("turn/start", "c1")
    [message] = start["messages"]
    assert message["content"] == [{"type": "text", "text": "from the user"}]
    assert message["source"] == {"kind": "user", "form": "followup"}


def test_a_followup_to_a_ready_agent_waits_for_its_next_activation_and_unparks_its_inbox():
    core = parked_child()
    core.svc.host.close_root("root", lambda: None)  # c1 leaves with its parked message
    assert core.status("c1") == "ready"
    assert core.svc.records.get("c1").parked == 1
    message_id = core.svc.host.followup("c1", "later").message_id
    # a follow-up is a waking input (SEMANTICS.md section 1): the parked message is queued
    # again, ahead of it, and neither starts a turn while c1 is not live
    assert core.svc.records.get_message(message_id).state == "queued"
    assert core.take("turn/start") == []  # a ready agent is not resumed
    info = core.svc.records.get("c1")
    assert (info.status, info.queued, info.parked) == ("ready", 2, 0)
    assert core.store.next_queued("c1").message_id != message_id

    fresh = CoreHost.with_tree()
    fresh.end("c2")  # settles, not parked
    message_id = fresh.svc.host.followup("c2", "later").message_id
    assert fresh.svc.records.get_message(message_id).state == "queued"
    assert fresh.status("c2") == "ready"


def test_a_followup_is_refused_below_a_closing_root_and_at_shutdown():
    core = CoreHost.with_tree()
    core.svc.host.close_root("root", lambda: None)
    message = refused(core, AdmissionDrainingError, core.svc.host.followup, "c1", "x")
    assert message == (
        'continuable subagents below parent "root" are draining; the operation was not admitted'
    )
    core.svc.host.followup("stranger", "another tree is open")
    core.svc.settlement.shutdown(lambda: None)
    message = refused(core, AdmissionDrainingError, core.svc.host.followup, "stranger", "x")
    assert message == "continuable subagents are draining; the operation was not admitted"
    message = refused(core, AgentUnknownError, core.svc.host.followup, "nobody", "x")
    assert message == 'agent "nobody" does not exist'


# --- turns/begin ---------------------------------------------------------------------------


def test_a_host_turn_claims_its_messages_and_does_not_unpark():
    core = parked_child()
    turn_id = core.svc.host.begin_turn("c1", ["first", "second"]).turn_id
    [start] = core.take("turn/start", "c1")
    assert start["turn_id"] == turn_id
    assert [m["content"][0]["text"] for m in start["messages"]] == ["first", "second"]
    assert {m["source"]["kind"] + "/" + m["source"]["form"] for m in start["messages"]} == {
        "user/direct"
    }
    for message in start["messages"]:
        info = core.svc.records.get_message(message["message_id"])
        assert (info.state, info.turn_id, info.agent_id) == ("claimed", turn_id, "c1")
    core.end("c1")
    assert core.take("turn/start") == []  # the parked message still waits for a waking input
    assert core.svc.records.get("c1").parked == 1
    empty = core.svc.host.begin_turn("c1", None).turn_id
    [start] = core.take("turn/start", "c1")
    assert (start["turn_id"], start["messages"]) == (empty, [])


def test_a_host_turn_needs_a_live_free_agent_that_is_not_being_disposed():
    core = CoreHost.with_tree()
    turn = core.turn("c1")
    message = refused(core, StateInvalidError, core.svc.host.begin_turn, "c1", ["x"])
    assert message == f'agent "c1" is already running turn {turn}'
    core.end("c2")
    message = refused(core, StateInvalidError, core.svc.host.begin_turn, "c2", ["x"])
    assert message == 'agent "c2" is not live'
    message = refused(core, AgentUnknownError, core.svc.host.begin_turn, "nobody", ["x"])
    assert message == 'agent "nobody" does not exist'
    core.svc.host.close_root("root", lambda: None)  # root stays while c1 and g1 drain
    message = refused(core, ActivationClosingError, core.svc.host.begin_turn, "root", ["x"])
    assert message == 'agent "root" activation is being disposed'


# --- transcripts -----------------------------------------------------------------------------


def test_transcript_pages_are_full_pages_of_at_most_1000_with_next():
    core = CoreHost()
    core.open("root")
    last = core.svc.records.append_transcript(
        "root", "t1", [Event(type="note", data=i) for i in range(1005)]
    )
    whole = events_of(core, "root")  # default: 1000
    assert len(whole) == 1000
    first = core.svc.records.read_transcript("root", None, 5000)  # capped at 1000
    assert first.events == whole and first.next == whole[-1].seq
    rest = core.svc.records.read_transcript("root", first.next, None)
    assert [e.data for e in rest.events] == [999, 1000, 1001, 1002, 1003, 1004]
    assert rest.next is None and rest.events[-1].seq == last
    assert {e.turn_id for e in rest.events} == {"t1"}
    exact = core.svc.records.read_transcript("root", first.next, 6)
    assert exact.events == rest.events and exact.next == last  # a full page carries next
    assert core.svc.records.read_transcript("root", last, None).events == []


def test_appending_needs_events_and_an_existing_session():
    core = CoreHost()
    core.open("root")
    message = refused(
        core, InvalidParamsError, core.svc.records.append_transcript, "root", None, []
    )
    assert message == "events must not be empty"
    message = refused(
        core,
        AgentUnknownError,
        core.svc.records.append_transcript,
        "nobody",
        None,
        [Event(type="x")],
    )
    assert message == 'agent "nobody" does not exist'
    seq = core.svc.records.append_transcript(
        "root", None, [Event(type="a"), Event(type="b", data=[1])]
    )
    assert [(e.seq, e.type, e.data, e.turn_id) for e in events_of(core, "root")[-2:]] == [
        (seq - 1, "a", None, None),
        (seq, "b", [1], None),
    ]
    message = refused(
        core, AgentUnknownError, core.svc.records.read_transcript, "nobody", None, None
    )
    assert message == 'agent "nobody" does not exist'


# --- messages/cancel and messages/get ----------------------------------------------------------


def test_cancelling_withdraws_an_unclaimed_message_and_is_recorded():
    core = CoreHost.with_tree()
    keep = core.send("root", "c2", "keep").message_id
    drop = core.send("root", "c2", "drop").message_id
    info = core.svc.host.cancel_message(drop)
    assert (info.message_id, info.agent_id, info.state, info.turn_id) == (
        drop,
        "c2",
        "cancelled",
        None,
    )
    assert info.source.kind == "coordinator" and info.source.sender_session_id == "root"
    [event] = [e for e in events_of(core, "c2") if e.type == "message_cancelled"]
    assert event.data == {"message_id": drop}
    core.end("c2")
    assert core.texts_of_turns("c2") == [["keep"]]
    core.end("c2")  # nothing else: c2 settles
    assert core.status("c2") == "ready"
    message = refused(core, StateInvalidError, core.svc.host.cancel_message, keep)
    assert message == f'message "{keep}" is claimed; it cannot be cancelled'
    message = refused(core, StateInvalidError, core.svc.host.cancel_message, drop)
    assert message == f'message "{drop}" is cancelled; it cannot be cancelled'
    for action in (core.svc.host.cancel_message, core.svc.records.get_message):
        message = refused(core, InvalidParamsError, action, "no-such-message")
        assert message == 'message "no-such-message" does not exist'


def test_cancelling_the_last_parked_message_lets_an_interrupted_child_settle():
    core = parked_child()
    [parked] = [
        m for m in core.store.conn.execute("SELECT message_id FROM inbox WHERE state = 'parked'")
    ]
    core.svc.host.cancel_message(parked[0])
    assert core.take("agent/settled", "c1") == [{"agent_id": "c1", "reason": "aborted"}]
    assert core.status("c1") == "ready"


# --- agents/get and agents/list ------------------------------------------------------------------


def test_agents_get_describes_each_kind_of_session():
    core = CoreHost()
    core.open("root", label="the root")
    core.spawn("root", "c1", label="worker")
    core.spawn("root", "once", label="one go", mode="one-shot")
    core.spawn("root", "broken", label="kept label")
    core.store.conn.execute("UPDATE descriptors SET body = '{' WHERE session_id = 'broken'")
    core.send("root", "c1", "more")
    described = {
        agent_id: (i.kind, i.mode, i.label, i.parent_id, i.depth, i.status, i.queued, i.parked)
        for agent_id in ("root", "c1", "once", "broken")
        for i in [core.svc.records.get(agent_id)]
    }
    assert described == {
        "root": ("ordinary", None, "the root", None, 0, "idle", 0, 0),
        "c1": ("continuable", "continuable", "worker", "root", 1, "running", 1, 0),
        "once": ("one-shot", "one-shot", "one go", "root", 1, "running", 0, 0),
        "broken": ("unknown", None, "kept label", "root", 1, "running", 0, 0),
    }
    assert core.svc.records.get("c1").created_at == core.store.get_session("c1").created_at
    message = refused(core, AgentUnknownError, core.svc.records.get, "nobody")
    assert message == 'agent "nobody" does not exist'


def test_agents_list_pages_with_opaque_cursors_and_can_leave_out_one_shot_children():
    core = CoreHost()
    core.open("root")
    for i in range(5):
        core.spawn("root", f"c{i}", mode="one-shot" if i == 2 else "continuable")
    seen, cursor, pages = [], None, 0
    while True:
        page = core.svc.records.list_host(ListParams(root_id="root", limit=2, cursor=cursor))
        pages += 1
        seen += [(a.id, a.mode) for a in page.agents]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3
    assert seen == [(f"c{i}", "one-shot" if i == 2 else "continuable") for i in range(5)]
    whole = core.svc.records.list_host(ListParams(root_id="root", limit=5))
    assert len(whole.agents) == 5 and whole.next_cursor is None
    without = core.svc.records.list_host(ListParams(root_id="root", include_one_shot=False))
    assert [a.id for a in without.agents] == ["c0", "c1", "c3", "c4"]
    message = refused(
        core, InvalidParamsError, core.svc.records.list_host, ListParams(root_id="root", cursor="x")
    )
    assert message == 'invalid cursor "x"'
    message = refused(
        core, AgentUnknownError, core.svc.records.list_host, ListParams(root_id="nobody")
    )
    assert message == 'agent "nobody" does not exist'


# --- closing, shutdown, and grace timers -----------------------------------------------------


def test_a_closed_root_leaves_with_a_closed_event_once_everything_below_has_left():
    core = CoreHost.with_tree()
    closed = []
    core.svc.host.close_root("root", lambda: closed.append("root"))
    core.end("c2", "aborted")
    core.end("g1", "aborted")
    assert closed == [] and core.svc.agents.registry.get("root") is not None
    core.end("c1", "aborted")
    assert closed == ["root"]
    assert events_of(core, "root")[-1].type == "closed"
    assert events_of(core, "root")[-1].data == {}
    assert [e.data for e in events_of(core, "c1") if e.type == "settled"] == [{"reason": "closed"}]
    assert core.svc.agents.registry.get("stranger") is not None  # another tree is not touched
    message = refused(core, StateInvalidError, core.svc.host.close_root, "root", lambda: None)
    assert message == 'agent "root" is not live'


def test_closing_a_subagent_is_refused():
    core = CoreHost.with_tree()
    message = refused(core, StateInvalidError, core.svc.host.close_root, "c1", lambda: None)
    assert (
        message == 'agent "c1" is a subagent; subagents settle, only ordinary sessions are closed'
    )


def test_shutdown_closes_every_tree_and_reports_once_when_all_have_left():
    core = CoreHost.with_tree()  # two trees: root (c1 -> g1, c2) and stranger
    core.open("third")
    core.spawn("third", "t1")
    done = []
    core.svc.settlement.shutdown(lambda: done.append(True))
    interrupts = core.take("turn/interrupt")
    assert sorted(n["agent_id"] for n in interrupts) == ["c1", "c2", "g1", "t1"]
    assert {n["cause"]["kind"] for n in interrupts} == {"shutdown"}
    assert core.svc.agents.registry.get("stranger") is None  # nothing running: it left at once
    core.end("t1", "aborted")  # "third" can leave now
    assert core.svc.agents.registry.get("third") is None
    assert done == []
    core.svc.settlement.force_end_all("shutdown")  # the host is gone: c1, g1 and c2 end now
    assert done == [True]
    assert len(core.svc.agents.registry) == 0
    for agent_id in ("c1", "g1", "c2"):
        [end] = [e for e in events_of(core, agent_id) if e.type == "turn_end"]
        assert end.data["reason"] == "aborted" and end.data["cause"] == "shutdown"
    settled = core.take("agent/settled")
    assert sorted(s["agent_id"] for s in settled) == ["c1", "c2", "g1", "t1"]
    assert {s["reason"] for s in settled} == {"closed"}


def test_shutdown_with_nothing_live_is_done_at_once():
    core = CoreHost()
    done = []
    core.svc.settlement.shutdown(lambda: done.append(True))
    assert done == [True]


def test_force_ending_touches_only_open_turns():
    core = CoreHost.with_tree()
    core.end("c2")  # settles; root then runs the notice turn
    core.end("root")
    core.notes.clear()
    core.svc.settlement.force_end_all("host-gone")
    ended = {
        agent_id: [e.data for e in events_of(core, agent_id) if e.type == "turn_end"][-1]
        for agent_id in ("c1", "g1")
    }
    assert {a: (d["reason"], d["cause"]) for a, d in ended.items()} == {
        "c1": ("aborted", "host-gone"),
        "g1": ("aborted", "host-gone"),
    }
    root_ends = [e.data for e in events_of(core, "root") if e.type == "turn_end"]
    assert [d.get("cause") for d in root_ends] == [None]  # its turn had ended already


def test_a_late_grace_timer_never_ends_a_later_turn():
    core = CoreHost.with_tree()
    core.send("root", "c2", "next")
    core.interrupt("root", "c2")
    [entry] = core.timers.scheduled
    core.end("c2", "aborted")
    core.send("root", "c2", "wake")  # unparks: "next" starts a new turn
    later = core.turn("c2")
    assert later is not None
    entry[1]()  # the old turn's timer fires anyway (a cancel that lost a race)
    assert core.turn("c2") == later
    assert core.take("agent/settled", "c2") == []
