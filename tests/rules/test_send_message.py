"""send_message: every branch and text of SEMANTICS.md section 4, on core/."""

import pytest

from subagentd.schema.codes import Code
from tests.core_host import CoreHost


@pytest.fixture
def tree():
    return CoreHost.with_tree()


def test_parent_send_to_running_child_is_queued_as_its_next_turn(tree):
    result = tree.send("root", "c1", "second task")
    assert result.text == "message queued as the next turn for subagent c1"
    assert tree.texts_of_turns("c1") == []  # never redirects the running turn
    tree.end("c1")
    assert tree.texts_of_turns("c1") == [["second task"]]
    assert tree.svc.records.get_message(result.message_id).state == "claimed"


def test_each_queued_message_is_its_own_turn_in_fifo_order(tree):
    for text in ("one", "two", "three"):
        tree.send("root", "c2", text)
    tree.end("c2")
    assert tree.texts_of_turns("c2") == [["one"]]
    tree.end("c2")
    tree.end("c2")
    assert tree.texts_of_turns("c2") == [["two"], ["three"]]


def test_relayed_message_source_names_the_sender(tree):
    tree.send("root", "c2", "x")
    tree.end("c2")
    [start] = tree.take("turn/start", "c2")
    assert start["messages"][0]["source"] == {
        "kind": "coordinator",
        "form": "relay",
        "sender_session_id": "root",
    }
    assert start["messages"][0]["content"] == [{"type": "text", "text": "x"}]


@pytest.mark.parametrize(
    ("caller", "target", "code", "text"),
    [
        (
            "root",
            "g1",
            Code.UNAUTHORIZED,
            'message not delivered: subagent "g1" belongs to another parent session',
        ),
        (
            "c2",
            "c1",
            Code.UNAUTHORIZED,
            'message not delivered: subagent "c1" belongs to another parent session',
        ),
        (
            "c1",
            "c1",
            Code.UNAUTHORIZED,
            'message not delivered: subagent "c1" belongs to another parent session',
        ),
        (
            "stranger",
            "c1",
            Code.UNAUTHORIZED,
            'message not delivered: subagent "c1" belongs to another parent session',
        ),
        (  # a child writing to the agent that started it is pointed at report
            "g1",
            "c1",
            Code.UNAUTHORIZED,
            'message not delivered: agent "c1" started you: reach it with the report tool, not'
            " send_message",
        ),
        (
            "root",
            "nobody",
            Code.NOT_RESUMABLE,
            'message not delivered: subagent "nobody" is unavailable',
        ),
        (
            "ghost",
            "nobody",
            Code.NOT_RESUMABLE,
            'message not delivered: subagent "nobody" is unavailable',
        ),
        (
            "ghost",
            "c1",
            Code.UNAUTHORIZED,
            'message not delivered: subagent "c1" delivery requires the exact live parent agent',
        ),
    ],
)
def test_send_message_refusals(tree, caller, target, code, text):
    error = tree.refusal(tree.send, caller, target)
    assert (error.code, error.message) == (code, text)
    assert tree.take("turn/start") == []


def test_stale_activation_is_refused_for_a_live_child(tree):
    error = tree.refusal(tree.send, "root", "c1", activation="not-the-current-one")
    assert error.code == Code.UNAUTHORIZED
    assert (
        error.message
        == 'message not delivered: subagent "c1" delivery requires the exact live parent agent'
    )


def test_current_activation_is_accepted(tree):
    activation = tree.svc.agents.registry.get("root").activation_id
    assert tree.send("root", "c1", activation=activation).text.startswith("message queued")


def settle(core, agent_id, reason="completed", output=None):
    core.end(agent_id, reason, output)
    assert core.status(agent_id) == "ready"


def test_ready_child_is_cold_resumed_with_its_descriptor(tree):
    settle(tree, "c2")
    old = tree.take("agent/settled", "c2")
    assert old == [{"agent_id": "c2", "reason": "completed"}]
    tree.send("root", "c2", "wake up")
    [start] = tree.take("turn/start", "c2")
    assert start["resume"] == {"version": 1, "mode": "continuable", "label": "task"}
    assert start["instructions"]
    assert [b["text"] for b in start["messages"][0]["content"]] == ["wake up"]
    assert tree.status("c2") == "running"
    tree.end("c2")
    tree.send("root", "c2", "again")
    [second] = tree.take("turn/start", "c2")
    assert second["resume"] == start["resume"]  # settled again, so resumed again


def test_cold_resume_gets_a_new_activation(tree):
    first = tree.svc.agents.registry.get("c2").activation_id
    settle(tree, "c2")
    tree.send("root", "c2")
    assert tree.svc.agents.registry.get("c2").activation_id != first


def test_stale_caller_to_ready_child_is_refused(tree):
    settle(tree, "c2")
    error = tree.refusal(tree.send, "root", "c2", activation="old")
    assert (
        error.message
        == 'message not delivered: subagent "c2" delivery requires the exact live parent agent'
    )
    assert tree.status("c2") == "ready"


def test_ready_child_of_another_parent_is_refused(tree):
    settle(tree, "c2")
    error = tree.refusal(tree.send, "stranger", "c2")
    assert error.message == 'message not delivered: subagent "c2" belongs to another parent session'
    assert tree.status("c2") == "ready"


NOT_RESUMABLE = (
    'message not delivered: subagent "{id}" has no supported continuation state and cannot be resumed;'
    " do not retry send_message with this id"
)


def test_one_shot_child_cannot_be_resumed(tree):
    tree.spawn("root", "once", mode="one-shot")
    tree.end("once")
    assert tree.take("agent/settled", "once") == [{"agent_id": "once", "reason": "completed"}]
    error = tree.refusal(tree.send, "root", "once")
    assert (error.code, error.message) == (Code.NOT_RESUMABLE, NOT_RESUMABLE.format(id="once"))


def test_live_one_shot_child_is_refused_too(tree):
    tree.spawn("root", "once", mode="one-shot")
    error = tree.refusal(tree.send, "root", "once")
    assert (error.code, error.message) == (Code.NOT_RESUMABLE, NOT_RESUMABLE.format(id="once"))


def test_ordinary_fork_session_cannot_be_resumed(tree):
    tree.open("fork", parent_id="root")
    tree.svc.host.close_root("fork", lambda: None)
    error = tree.refusal(tree.send, "root", "fork")
    assert (error.code, error.message) == (Code.NOT_RESUMABLE, NOT_RESUMABLE.format(id="fork"))


@pytest.mark.parametrize(
    "body",
    [
        None,
        "not json",
        "[1,2]",
        '{"version": 1}',
        '{"version": 1, "mode": "weird", "label": "x"}',
        '{"version": 7, "mode": "continuable", "label": "x"}',
    ],
)
def test_child_with_broken_descriptor_cannot_be_resumed(tree, body):
    settle(tree, "c2")
    if body is None:
        tree.store.conn.execute("DELETE FROM descriptors WHERE session_id = 'c2'")
    else:
        tree.store.conn.execute("UPDATE descriptors SET body = ? WHERE session_id = 'c2'", (body,))
    error = tree.refusal(tree.send, "root", "c2")
    assert (error.code, error.message) == (Code.NOT_RESUMABLE, NOT_RESUMABLE.format(id="c2"))
    assert tree.status("c2") == "ready"


def test_messages_queued_before_a_cold_resume_run_first_in_order(tree):
    settle(tree, "c2")
    tree.svc.host.followup(
        "c2", "queued while ready"
    )  # host-authority message: durable, does not resume
    assert tree.status("c2") == "ready"
    tree.send("root", "c2", "newest")
    assert tree.texts_of_turns("c2") == [["queued while ready"]]
    tree.end("c2")
    assert tree.texts_of_turns("c2") == [["newest"]]


def test_send_below_a_closing_root_is_refused_as_draining(tree):
    tree.svc.host.close_root("root", lambda: None)
    error = tree.refusal(tree.send, "c1", "g1")
    assert error.code == Code.DRAINING
    assert error.message == (
        'message not delivered: continuable subagents below parent "root" are draining;'
        " the operation was not admitted"
    )


def test_send_during_shutdown_is_refused_as_draining(tree):
    tree.svc.settlement.shutdown(lambda: None)
    error = tree.refusal(tree.send, "root", "c1")
    assert error.code == Code.DRAINING
    assert error.message == (
        "message not delivered: continuable subagents are draining; the operation was not admitted"
    )
