"""Settlement, notices, ownership, closing and crash recovery: SEMANTICS.md sections 1 and 8."""

import pytest

from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost

FIRST_LINE = {
    "completed": "Background subagent c1 finished and will do no further work unless you send it more.",
    "aborted": "Background subagent c1 was stopped before it finished.",
    "max-tokens": "Background subagent c1 ran out of room before it finished.",
    "refusal": "Background subagent c1 declined the task.",
    "error": "Background subagent c1 failed before it finished.",
}


@pytest.mark.parametrize("reason", list(FIRST_LINE))
@pytest.mark.parametrize("output", ["closing words", None])
def test_settlement_notice_texts(reason, output):
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.end("c1", reason, output)
    assert core.take("agent/settled", "c1") == [{"agent_id": "c1", "reason": reason}]
    [start] = core.take("turn/start", "root")
    [message] = start["messages"]
    tail = ["Its closing message:", output] if output else ["It left no closing message."]
    assert [b["text"] for b in message["content"]] == [FIRST_LINE[reason], *tail]
    assert message["source"] == {
        "kind": "subagent-settled",
        "form": "notice",
        "summary": FIRST_LINE[reason],
        "sender_session_id": "c1",
    }


def test_long_summary_is_cut_to_119_characters_and_an_ellipsis():
    core = CoreHost()
    core.open("root")
    long_id = "c" * 80
    core.spawn("root", long_id)
    core.end(long_id)
    [start] = core.take("turn/start", "root")
    first = start["messages"][0]["content"][0]["text"]
    summary = start["messages"][0]["source"]["summary"]
    assert len(first) > 120
    assert summary == first[:119] + "…" and len(summary) == 120


def test_a_child_does_not_settle_while_its_own_child_is_live():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.end("c1")
    assert core.status("c1") == "idle"
    assert core.take("agent/settled", "c1") == []
    core.end("g1", "completed", "leaf")
    # c1 runs the notice turn, then settles with nothing left
    assert core.texts_of_turns("c1")[-1][0].startswith("Background subagent g1 finished")
    core.end("c1", "completed", "all")
    assert core.take("agent/settled", "c1") == [{"agent_id": "c1", "reason": "completed"}]


def test_roots_never_settle():
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["hello"])
    core.end("root")
    assert core.status("root") == "idle"
    assert core.take("agent/settled") == []


def test_one_shot_child_is_disposed_after_its_turn_without_a_notice():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "once", mode="one-shot")
    [start] = core.take("turn/start", "once")
    assert "instructions" not in start
    core.end("once", "completed", "result")
    assert core.take("agent/settled", "once") == [{"agent_id": "once", "reason": "completed"}]
    assert core.take("turn/start", "root") == []
    assert core.status("once") == "ready"


def test_closing_a_root_drains_running_descendants_and_records_their_notices():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.spawn("root", "c2")
    core.end("c2")  # root now runs the notice turn for c2
    core.take("turn/start")
    closed = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    interrupts = core.take("turn/interrupt")
    assert sorted(n["agent_id"] for n in interrupts) == ["c1", "g1", "root"]
    assert all(n["cause"] == {"kind": "shutdown"} for n in interrupts)
    core.end("root", "aborted")
    core.end("g1", "aborted")
    assert closed == []
    core.end("c1", "aborted")
    assert closed == [True]
    assert core.svc.agents.registry.get("root") is None
    assert core.take("turn/start") == []  # notices to closing parents are recorded, not woken
    events = core.svc.records.read_transcript("c1", None, None).events
    assert any(e.type == "notice" for e in events)


def test_closing_drain_force_ends_turns_the_host_never_ends():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    closed = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    assert core.timers.fire_all() == 1
    assert closed == [True]


def test_open_turns_at_a_crash_are_ended_with_error_and_the_parent_is_told(tmp_path):
    path = str(tmp_path / "crash.db")
    first = CoreHost(store=SqliteStore(path))
    first.open("root")
    first.spawn("root", "c1")
    first.send("root", "c1", "queued before the crash")
    first.store.commit()
    first.store.conn.close()  # the process dies here: no shutdown

    # the first process is gone: its leases no longer hold anything live
    second = CoreHost(store=SqliteStore(path), owner_alive=lambda owner: False)
    events = second.svc.records.read_transcript("c1", None, None).events
    end = [e for e in events if e.type == "turn_end"][-1]
    assert end.data["reason"] == "error" and end.data["cause"] == "crash"
    assert second.status("c1") == "ready"
    second.open("root")
    [notice] = second.texts_of_turns("root")
    assert notice == [
        "Background subagent c1 failed before it finished.",
        "It left no closing message.",
    ]
    second.end("root")
    second.send("root", "c1", "after restart")
    assert second.texts_of_turns("c1") == [["queued before the crash"]]
    second.end("c1")
    assert second.texts_of_turns("c1") == [["after restart"]]


def below_a_disposed_one_shot(core: CoreHost) -> None:
    """root -> once (one-shot) -> late (drain), steady (finish); `once` ends and is disposed."""
    core.spawn("root", "once", mode="one-shot")
    core.spawn("once", "late", on_parent_close="drain")
    core.spawn("once", "steady", on_parent_close="finish")
    core.end("once", "completed", "one-shot answer")


def test_a_parents_settling_applies_no_close_policy_its_live_child_keeps_it_or_is_adopted():
    """PROTOCOL.md section 12, "When the parent goes": `on_parent_close` acts on closes only. A
    continuable parent cannot settle while its child lives; a one-shot parent is disposed after
    its turn and its children, whatever their policy, are adopted and run on; the host ends such
    a subtree with agents/stop on the disposed one-shot."""
    from subagentd.schema.budgets import StopParams

    core = CoreHost()
    core.open("root")
    core.spawn("root", "p")
    core.spawn("p", "kid", on_parent_close="drain")
    core.notes.clear()
    core.end("p", "completed", "p is done")
    assert (core.status("p"), core.turn("kid") is not None) == ("idle", True)
    assert core.take("agent/settled") == [] and core.take("turn/interrupt") == []

    core.notes.clear()
    below_a_disposed_one_shot(core)
    assert core.take("agent/settled") == [{"agent_id": "once", "reason": "completed"}]
    assert core.take("turn/interrupt") == []  # neither policy acts: nothing is drained
    for child in ("late", "steady"):
        assert core.turn(child) is not None
        assert core.svc.agents.registry.get(child).owner_id == "root"  # adopted
    stopped = core.svc.budgets.stop(StopParams(agent_id="once"))
    assert sorted(stopped.interrupted) == ["late", "steady"]
    causes = {n["agent_id"]: n["cause"] for n in core.take("turn/interrupt")}
    assert causes == {"late": {"kind": "stop"}, "steady": {"kind": "stop"}}


def test_a_close_of_the_root_applies_an_adopted_childs_own_policy():
    core = CoreHost()
    core.open("root")
    below_a_disposed_one_shot(core)
    core.notes.clear()
    closed: list[bool] = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    assert [n["agent_id"] for n in core.take("turn/interrupt")] == ["late"]
    core.end("late", "aborted")
    assert closed == [] and core.turn("steady") is not None  # finish: its turn runs on
    core.end("steady", "completed", "finished anyway")
    assert closed == [True]
