"""Edges of the rules that mutation testing found unchecked, on core/: the order of
interrupt_agent's first checks, what a no-op interrupt reports, the notice's closing-message and
summary boundaries (SEMANTICS.md section 8) and the --report-rate window (PROTOCOL.md section 5)."""

from __future__ import annotations

import pytest

from subagentd.core import texts
from subagentd.core.clock import Clock
from subagentd.schema.codes import Code
from subagentd.schema.messages import ToolFilter
from tests.core_host import CoreHost


@pytest.fixture
def tree():
    return CoreHost.with_tree()


# --- interrupt_agent: stale, then self, then the no-op (SEMANTICS.md section 5, steps 1-3) ----


def test_a_stale_caller_naming_itself_gets_the_stale_text_not_the_self_text(tree):
    error = tree.refusal(tree.interrupt, "c1", "c1", activation="an-old-activation")
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'interrupting "c1" requires the exact live ancestor agent',
    )
    error = tree.refusal(tree.interrupt, "ghost", "ghost")  # not live at all
    assert error.message == 'interrupting "ghost" requires the exact live ancestor agent'
    assert tree.take("turn/interrupt") == []


def test_self_is_refused_before_the_no_op_for_targets_without_a_continuable_activation(tree):
    # a root is ordinary: as a target it would be an accepted no-op, but naming itself comes first
    error = tree.refusal(tree.interrupt, "root", "root")
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'agent "root" cannot interrupt itself',
    )
    assert tree.take("turn/interrupt") == []


# --- interrupt_agent: what an accepted no-op reports (PROTOCOL.md section 5) ------------------


def test_a_no_op_interrupt_of_a_ready_child_reports_ready_and_changes_nothing(tree):
    tree.end("c2")  # c2 settles: ready
    tree.notes.clear()
    result = tree.interrupt("root", "c2")
    assert (result.text, result.accepted, result.previous_status) == (
        "interrupt requested for agent c2",
        True,
        "ready",
    )
    assert tree.take("turn/interrupt") == []
    assert tree.notes == []  # nothing resumed, nothing parked, nothing settled
    info = tree.svc.records.get("c2")
    assert (info.status, info.queued, info.parked) == ("ready", 0, 0)
    assert tree.store.get_session("c2").parked is False


def test_a_no_op_interrupt_of_an_unknown_id_reports_no_previous_status(tree):
    result = tree.interrupt("root", "nobody")
    assert (result.text, result.accepted, result.previous_status) == (
        "interrupt requested for agent nobody",
        True,
        None,
    )
    assert tree.notes == []
    assert tree.store.get_session("nobody") is None  # a no-op never creates anything


# --- settlement notices: closing message and summary (SEMANTICS.md section 8) ----------------


def notice_of(core: CoreHost, child: str, output: str | None):
    core.end(child, "completed", output)
    [start] = core.take("turn/start", "root")
    [message] = start["messages"]
    return [b["text"] for b in message["content"]], message["source"]["summary"]


@pytest.mark.parametrize("output", ["", None])
def test_an_empty_output_is_no_closing_message(output):
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    content, summary = notice_of(core, "c1", output)
    first = "Background subagent c1 finished and will do no further work unless you send it more."
    assert content == [first, "It left no closing message."]
    assert summary == first


def test_a_first_line_of_exactly_120_characters_is_the_summary_uncut():
    core = CoreHost()
    core.open("root")
    child = "c" * 38  # the completed line is 82 characters plus the id
    core.spawn("root", child)
    content, summary = notice_of(core, child, "done")
    assert len(content[0]) == 120
    assert summary == content[0]
    assert content[1:] == ["Its closing message:", "done"]


def test_a_first_line_of_121_characters_is_cut_to_119_and_an_ellipsis():
    core = CoreHost()
    core.open("root")
    child = "c" * 39
    core.spawn("root", child)
    content, summary = notice_of(core, child, "done")
    assert len(content[0]) == 121
    assert summary == content[0][:119] + "…"
    assert len(summary) == 120


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0), (1, 1), (119, 119), (120, 120), (121, 120), (500, 120)],
)
def test_summary_of_cuts_only_past_120_characters(length, expected):
    line = "".join(chr(0x61 + i % 26) for i in range(length))
    summary = texts.summary_of(line)
    assert len(summary) == expected
    if length <= 120:
        assert summary == line
    else:
        assert summary == line[:119] + "…"


# --- --report-rate: a sliding window of 60 seconds per child (PROTOCOL.md section 5) --------


class FakeTime(Clock):
    """The clock the report window reads (Settings.clock), moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return FakeTime()


def rated_tree(rate: int, clock: Clock) -> CoreHost:
    """root -> c1 -> g1, g2 with --report-rate `rate`; c1 idle (kept live by its children)."""
    core = CoreHost(report_rate=rate, clock=clock)
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.spawn("c1", "g2")
    core.end("c1")
    core.notes.clear()
    return core


def woke(core: CoreHost, output: str, child: str = "g1") -> bool:
    """Report and tell how it was delivered: True for a wakeup turn, False for a quiet inject."""
    message_id = core.report(child, output).message_id
    starts = core.take("turn/start", "c1")
    injects = core.take("agent/inject", "c1")
    if starts:
        assert injects == []
        [start] = starts
        assert [m["message_id"] for m in start["messages"]] == [message_id]
        core.end("c1")  # back to idle for the next report
        return True
    [inject] = injects
    assert [m["message_id"] for m in inject["messages"]] == [message_id]
    assert [b["text"] for b in inject["messages"][0]["content"]] == [
        f"Background subagent {child} reported:",
        output,
    ]
    assert core.svc.records.get_message(message_id).state == "claimed"
    return False


def test_past_the_rate_reports_are_quiet_until_60_seconds_have_passed(clock):
    core = rated_tree(1, clock)
    assert woke(core, "one") is True
    clock.now += 59.0
    assert woke(core, "two") is False  # still within the minute
    clock.now += 1.5  # 60.5 s after the first wakeup
    assert woke(core, "three") is True
    clock.now += 30.0
    assert woke(core, "four") is False  # the window slides: "three" counts now


def test_the_rate_bounds_each_child_on_its_own(clock):
    core = rated_tree(2, clock)
    assert woke(core, "a1") is True
    clock.now += 10.0
    assert woke(core, "a2") is True
    assert woke(core, "a3") is False  # two wakeups within the minute: the third is quiet
    assert woke(core, "b1", child="g2") is True  # another child has its own window
    clock.now += 50.5  # 60.5 s after a1, 50.5 s after a2
    assert woke(core, "a4") is True
    assert woke(core, "a5") is False


def test_without_a_rate_every_report_wakes(clock):
    core = rated_tree(0, clock)
    for i in range(5):
        assert woke(core, f"r{i}") is True


# --- more edges the first mutation run found (docs/mutation.md) ------------------------------


def test_a_ready_child_below_a_closing_root_is_not_resumed(tree):
    tree.end("c2")  # ready
    tree.svc.host.close_root("root", lambda: None)  # root stays while c1 and g1 drain
    tree.notes.clear()
    error = tree.refusal(tree.send, "root", "c2")  # the target is not live: the caller's root
    assert (error.code, error.message) == (
        Code.DRAINING,
        'message not delivered: continuable subagents below parent "root" are draining;'
        " the operation was not admitted",
    )
    assert tree.take("turn/start") == [] and tree.status("c2") == "ready"


def test_only_the_first_turn_after_a_cold_resume_carries_the_descriptor(tree):
    tree.end("c2")
    tree.send("root", "c2", "wake")
    tree.send("root", "c2", "and more")
    [first] = tree.take("turn/start", "c2")
    assert first["resume"] == {"version": 1, "mode": "continuable", "label": "task"}
    tree.end("c2")
    [second] = tree.take("turn/start", "c2")
    assert "resume" not in second  # the agent was rebuilt once; it is live now


def test_a_spawned_childs_whole_descriptor_comes_back_on_its_cold_resume():
    core = CoreHost()
    core.open("root")
    core.spawn(
        "root",
        "c1",
        label="worker",
        agent_provider="p",
        agent_model="m",
        persona="terse",
        tool_filter=ToolFilter(allow=["read"], deny=["write"]),
    )
    core.end("c1")
    core.notes.clear()
    core.send("root", "c1", "wake")
    [start] = core.take("turn/start", "c1")
    assert start["resume"] == {
        "version": 1,
        "mode": "continuable",
        "label": "worker",
        "agent_provider": "p",
        "agent_model": "m",
        "persona": "terse",
        "tool_filter": {"allow": ["read"], "deny": ["write"]},
    }
    [descriptor] = [
        e
        for e in core.svc.records.read_transcript("c1", None, None).events
        if e.type == "descriptor"
    ]
    assert descriptor.data == start["resume"]


def test_report_is_not_offered_to_a_stale_activation(tree):
    current = tree.svc.agents.registry.get("g1").activation_id
    assert tree.svc.tools.can_report("g1", current)
    assert not tree.svc.tools.can_report("g1", "an-old-activation")
    assert not tree.svc.tools.can_report(None, None)


def test_a_report_is_recorded_in_the_turn_it_was_made_in(tree):
    turn = tree.turn("g1")
    result = tree.report("g1", "found it")
    [event] = [
        e for e in tree.svc.records.read_transcript("g1", None, None).events if e.type == "report"
    ]
    assert (event.turn_id, event.data) == (
        turn,
        {"message_id": result.message_id, "output": "found it"},
    )


def test_turns_are_recorded_with_their_messages_and_ends():
    core = CoreHost()
    core.open("root")
    spawned = core.spawn("root", "c1")
    turn = core.turn("c1")
    core.end("c1", "completed", "the answer")
    events = [
        (e.type, e.turn_id, e.data)
        for e in core.svc.records.read_transcript("c1", None, None).events
    ]
    [message] = [e for e in events if e[0] == "message"]
    assert message[1] == turn and message[2]["message_id"] == spawned.message_id
    assert ("turn_start", turn, {"turn_id": turn, "message_ids": [spawned.message_id]}) in events
    assert (
        "turn_end",
        turn,
        {"turn_id": turn, "reason": "completed", "output": "the answer"},
    ) in events
    assert events[-1] == ("settled", None, {"reason": "completed"})


def test_spawn_refusals_name_the_problem_exactly(tree):
    cases = [
        (
            {"caller": "root", "child_id": "x", "activation": "an-old-activation"},
            Code.UNAUTHORIZED,
            'spawning requires the exact live caller; agent "root" is not live'
            " or its activation is not current",
        ),
        (
            {"caller": "nobody", "child_id": "x"},
            Code.UNKNOWN_AGENT,
            'agent "nobody" does not exist',
        ),
        (
            {"caller": "root", "child_id": "c1"},
            Code.DUPLICATE_CHILD,
            'an agent with id "c1" already exists',
        ),
    ]
    for params, code, text in cases:
        error = tree.refusal(tree.spawn, **params)
        assert (error.code, error.message) == (code, text)
    deep = CoreHost(max_depth=1)
    deep.open("root")
    deep.spawn("root", "d1")
    error = deep.refusal(deep.spawn, "d1", "d2")
    assert (error.code, error.message) == (
        Code.DEPTH_EXCEEDED,
        "spawning below depth 1 exceeds the maximum depth 1",
    )
    tree.svc.host.close_root("root", lambda: None)
    error = tree.refusal(tree.spawn, "root", "x")
    assert (error.code, error.message) == (
        Code.DRAINING,
        'continuable subagents below parent "root" are draining; the operation was not admitted',
    )
    assert tree.store.get_session("x") is None


def test_a_cold_resumed_child_keeps_its_parent_and_depth(tree):
    tree.end("c2")  # settles; root runs the notice turn
    tree.end("root")
    tree.notes.clear()
    tree.send("root", "c2", "wake")
    tree.spawn("c2", "g2")  # depth from the stored record
    assert tree.svc.records.get("g2").depth == 2
    tree.end("g2")
    tree.end("c2")  # its turn; then the notice turn from g2
    tree.end("c2")  # and it settles: its parent is told again
    assert tree.texts_of_turns("root") == [
        [
            "Background subagent c2 finished and will do no further work unless you send it more.",
            "It left no closing message.",
        ]
    ]


def test_refusals_of_a_ready_target_carry_their_codes(tree):
    tree.end("c2")
    stale = tree.refusal(tree.send, "root", "c2", activation="an-old-activation")
    assert (stale.code, stale.message) == (
        Code.UNAUTHORIZED,
        'message not delivered: subagent "c2" delivery requires the exact live parent agent',
    )
    other = tree.refusal(tree.send, "stranger", "c2")
    assert (other.code, other.message) == (
        Code.UNAUTHORIZED,
        'message not delivered: subagent "c2" belongs to another parent session',
    )
