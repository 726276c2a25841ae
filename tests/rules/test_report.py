"""report: SEMANTICS.md section 7 (who may report, recipient, delivery modes, framing), on core/."""

import pytest

from subagentd.schema.codes import Code
from tests.core_host import CoreHost


def tree(**settings):
    core = CoreHost(**settings)
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.notes.clear()
    return core


def test_report_wakes_an_idle_parent_with_the_exact_framing():
    core = tree()
    core.end("c1")  # c1 idle: kept live by g1
    result = core.report("g1", "half the answer")
    assert (
        result.text
        == f"report accepted by the agent that started you as message {result.message_id}"
    )
    [start] = core.take("turn/start", "c1")
    [message] = start["messages"]
    assert message == {
        "message_id": result.message_id,
        "content": [
            {"type": "text", "text": "Background subagent g1 reported:"},
            {"type": "text", "text": "half the answer"},
        ],
        "source": {"kind": "subagent-report", "form": "relay", "sender_session_id": "g1"},
    }
    assert core.status("g1") == "running"  # reporting never ends the child's turn


def test_report_to_a_busy_parent_waits_for_its_current_turn():
    core = tree()
    core.report("g1", "early finding")
    assert core.take("turn/start", "c1") == []
    core.end("c1")
    assert core.texts_of_turns("c1") == [["Background subagent g1 reported:", "early finding"]]


def test_reports_go_one_edge_up_only():
    core = tree()
    core.report("g1", "for c1 only")
    core.end("c1")
    assert core.take("turn/start", "root") == []
    assert core.texts_of_turns("c1") == [["Background subagent g1 reported:", "for c1 only"]]


def test_zero_or_many_reports_are_allowed_and_each_is_its_own_turn():
    core = tree()
    core.report("g1", "one")
    core.report("g1", "two")
    core.end("c1")
    core.end("c1")
    assert core.texts_of_turns("c1") == [
        ["Background subagent g1 reported:", "one"],
        ["Background subagent g1 reported:", "two"],
    ]


def test_quiet_delivery_injects_without_starting_a_turn():
    core = tree(report_delivery="quiet")
    core.end("c1")
    result = core.report("g1", "quietly")
    assert core.take("turn/start", "c1") == []
    [inject] = core.take("agent/inject", "c1")
    assert inject["messages"][0]["message_id"] == result.message_id
    assert [b["text"] for b in inject["messages"][0]["content"]] == [
        "Background subagent g1 reported:",
        "quietly",
    ]
    events = core.svc.records.read_transcript("c1", None, None).events
    assert any(e.type == "message" and e.data["message_id"] == result.message_id for e in events)


@pytest.mark.parametrize(
    ("caller", "activation"),
    [("root", None), ("nobody", None), ("g1", "stale-activation")],
)
def test_only_live_continuable_children_may_report(caller, activation):
    core = tree()
    error = core.refusal(core.report, caller, "x", activation=activation)
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        f'agent "{caller}" is not a live continuable subagent and cannot report',
    )


def test_one_shot_child_cannot_report():
    core = tree()
    core.spawn("root", "once", mode="one-shot")
    error = core.refusal(core.report, "once", "x")
    assert error.message == 'agent "once" is not a live continuable subagent and cannot report'
    assert not core.svc.tools.can_report("once", None)
    assert core.svc.tools.can_report("g1", None)


def test_report_to_a_parent_that_is_not_live_is_refused():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "once", mode="one-shot")
    core.spawn("once", "orphan")
    core.end("once")  # the one-shot parent is disposed after its one turn
    error = core.refusal(core.report, "orphan", "x")
    assert (error.code, error.message) == (
        Code.PARENT_UNAVAILABLE,
        "direct parent is not live; report was not delivered",
    )


def test_report_from_an_activation_being_disposed_is_refused():
    core = tree()
    core.svc.host.close_root("root", lambda: None)
    error = core.refusal(core.report, "g1", "x")
    assert (error.code, error.message) == (
        Code.ACTIVATION_CLOSING,
        'subagent "g1" activation is being disposed; the report was not delivered',
    )


def test_report_is_recorded_in_the_childs_transcript():
    core = tree()
    result = core.report("g1", "noted")
    events = core.svc.records.read_transcript("g1", None, None).events
    [report] = [e for e in events if e.type == "report"]
    assert report.data == {"message_id": result.message_id, "output": "noted"}
