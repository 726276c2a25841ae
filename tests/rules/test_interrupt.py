"""interrupt_agent: SEMANTICS.md section 5 in its exact order, on core/."""

import pytest

from subagentd.schema.codes import Code
from tests.core_host import CoreHost


@pytest.fixture
def tree():
    return CoreHost.with_tree()


def test_stale_caller_is_refused_even_for_unknown_target(tree):
    error = tree.refusal(tree.interrupt, "ghost", "nobody")
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'interrupting "nobody" requires the exact live ancestor agent',
    )
    error = tree.refusal(tree.interrupt, "root", "c1", activation="old")
    assert error.message == 'interrupting "c1" requires the exact live ancestor agent'


def test_self_interrupt_is_refused(tree):
    error = tree.refusal(tree.interrupt, "c1", "c1")
    assert (error.code, error.message) == (Code.UNAUTHORIZED, 'agent "c1" cannot interrupt itself')


@pytest.mark.parametrize("target", ["nobody", "stranger", "once", "ready-child"])
def test_targets_without_live_continuable_activation_are_accepted_no_ops(tree, target):
    tree.spawn("root", "once", mode="one-shot")
    tree.spawn("root", "ready-child")
    tree.end("ready-child")
    tree.notes.clear()
    result = tree.interrupt("root", target)
    assert result.text == f"interrupt requested for agent {target}"
    assert result.accepted is True
    assert tree.take("turn/interrupt") == []
    assert tree.status("ready-child") == "ready"  # never resumes anything


def test_sibling_is_refused_with_sibling_text(tree):
    error = tree.refusal(tree.interrupt, "c2", "c1")
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'subagent "c1" is a sibling of agent "c2", not its descendant',
    )


@pytest.mark.parametrize(
    ("caller", "target"), [("stranger", "c1"), ("g1", "c1"), ("c2", "g1"), ("c1", "c2")]
)
def test_callers_outside_the_ancestry_are_refused(tree, caller, target):
    error = tree.refusal(tree.interrupt, caller, target)
    if caller == "c1" and target == "c2":
        assert error.message == 'subagent "c2" is a sibling of agent "c1", not its descendant'
    else:
        assert error.message == f'subagent "{target}" is not a live descendant of agent "{caller}"'
    assert tree.take("turn/interrupt") == []


def test_parent_interrupts_running_child_once(tree):
    turn = tree.turn("c1")
    result = tree.interrupt("root", "c1")
    assert (result.accepted, result.previous_status) == (True, "running")
    assert tree.take("turn/interrupt") == [
        {"agent_id": "c1", "turn_id": turn, "cause": {"kind": "parent", "by": "root"}}
    ]
    tree.interrupt("root", "c1")
    assert tree.take("turn/interrupt") == []  # repeated interrupts of the same turn are no-ops


def test_deep_ancestor_may_interrupt(tree):
    tree.interrupt("root", "g1")
    assert [n["agent_id"] for n in tree.take("turn/interrupt")] == ["g1"]


def test_interrupt_leaves_descendants_running_and_target_idle(tree):
    tree.interrupt("root", "c1")
    tree.end("c1", "aborted")
    assert tree.status("g1") == "running"
    assert tree.status("c1") == "idle"  # kept live by its running child
    assert tree.take("turn/start", "c1") == []
    tree.end("g1", "completed", "leaf done")
    # g1's settlement notice is a waking input: it wakes the interrupted c1 (SEMANTICS.md 1, 5)
    assert tree.texts_of_turns("c1") == [
        [
            "Background subagent g1 finished and will do no further work unless you send it more.",
            "Its closing message:",
            "leaf done",
        ]
    ]
    tree.end("c1", "completed", "tree done")
    # and the whole tree settles: the root hears about c1
    assert tree.take("agent/settled", "c1") == [{"agent_id": "c1", "reason": "completed"}]
    [[first, *_]] = tree.texts_of_turns("root")
    assert first == (
        "Background subagent c1 finished and will do no further work unless you send it more."
    )


def test_queued_messages_stay_parked_until_the_next_send(tree):
    tree.send("root", "c2", "first queued")
    tree.send("root", "c2", "second queued")
    tree.interrupt("root", "c2")
    tree.end("c2", "aborted")
    assert tree.take("turn/start", "c2") == []
    assert tree.status("c2") == "idle"
    info = tree.svc.records.get("c2")
    assert (info.queued, info.parked) == (0, 2)
    tree.send("root", "c2", "newest")
    assert tree.texts_of_turns("c2") == [["first queued"]]
    tree.end("c2")
    tree.end("c2")
    assert tree.texts_of_turns("c2") == [["second queued"], ["newest"]]


def test_message_states_follow_parking(tree):
    queued = tree.send("root", "c2", "waiting").message_id
    assert tree.svc.records.get_message(queued).state == "queued"
    tree.interrupt("root", "c2")
    assert tree.svc.records.get_message(queued).state == "parked"
    tree.send("root", "c2", "unpark")
    assert tree.svc.records.get_message(queued).state == "queued"


def test_interrupted_child_with_nothing_left_settles_and_parent_is_told(tree):
    tree.interrupt("root", "c2")
    tree.end("c2", "aborted")
    assert tree.take("agent/settled", "c2") == [{"agent_id": "c2", "reason": "aborted"}]
    [notice] = tree.texts_of_turns("root")
    assert notice == [
        "Background subagent c2 was stopped before it finished.",
        "It left no closing message.",
    ]


def test_interrupting_an_idle_child_holding_parked_work_keeps_it_resident(tree):
    tree.end("g1")  # g1 settles, c1 gets a notice turn
    tree.end("c1")  # c1's first turn
    tree.take("agent/settled")
    # c1 now runs the notice turn; end it with queued work so it stays live and idle
    tree.send("root", "c1", "later")
    tree.interrupt("root", "c1")
    tree.end("c1", "aborted")
    assert tree.status("c1") == "idle"
    result = tree.interrupt("root", "c1")
    assert result.previous_status == "idle"
    assert tree.status("c1") == "idle"  # a parked message keeps it resident


def test_interrupted_turn_the_host_never_ends_is_force_ended_after_grace(tree):
    tree.interrupt("root", "c2")
    assert tree.status("c2") == "running"
    assert tree.timers.fire_all() == 1
    assert tree.status("c2") == "ready"
    events = tree.svc.records.read_transcript("c2", None, None).events
    end = [e for e in events if e.type == "turn_end"][-1]
    assert end.data["reason"] == "aborted" and end.data["cause"] == "interrupt-timeout"


def test_grace_timer_is_cancelled_when_the_host_ends_the_turn(tree):
    tree.interrupt("root", "c2")
    tree.end("c2", "aborted")
    assert tree.timers.fire_all() == 0
