"""Ownership follows the durable tree (PROTOCOL.md section 8), over the real server: a continuable
child whose one-shot parent is disposed is adopted by its nearest live owner, which it keeps
resident, whose root's close drains it, and whose ancestry lets the root interrupt below it."""

import pytest

from subagentd.schema.codes import Code
from tests.spawned import RpcError


def spawn_below_a_disposed_one_shot(host, owner: str) -> dict:
    """owner -> once (one-shot) -> late (continuable); `once` ends its turn and is disposed."""
    once = host.spawn(owner, "once", mode="one-shot")
    late = host.spawn("once", "late", label="outlives its parent")
    host.end_turn("once", once["turn_id"], "completed", "one-shot answer")
    assert host.notification("agent/settled", agent_id="once") == {
        "agent_id": "once",
        "reason": "completed",
    }
    assert host.call("agents/get", {"agent_id": "late"})["status"] == "running"
    return late


def test_closing_the_root_drains_a_child_whose_one_shot_parent_was_disposed(host):
    host.open("root")
    late = spawn_below_a_disposed_one_shot(host, "root")
    closing = host.start("agents/close", {"agent_id": "root"})
    stop = host.notification("turn/interrupt", agent_id="late")
    assert stop == {"agent_id": "late", "turn_id": late["turn_id"], "cause": {"kind": "shutdown"}}
    with pytest.raises(RpcError) as refused:  # admissions below the closing root are refused
        host.call(
            "agents/spawn", {"caller": "late", "label": "more", "prompt": "go", "child_id": "x"}
        )
    assert (refused.value.code, refused.value.message) == (
        Code.DRAINING,
        'continuable subagents below parent "root" are draining; the operation was not admitted',
    )
    host.call("ping")
    assert closing not in host.responses  # the close waits for `late`
    host.end_turn("late", late["turn_id"], "aborted")
    assert host.response(closing)["result"] == {}
    assert host.notification("agent/settled", agent_id="late") == {
        "agent_id": "late",
        "reason": "closed",
    }
    assert host.call("agents/get", {"agent_id": "late"})["status"] == "ready"
    host.open("root")
    listing = host.tool("list_agents", "root", scope="descendants")
    assert (
        listing["text"]
        == "late [ready, last turn was stopped] parent=once depth=2 — outlives its parent"
    )


def test_the_root_can_interrupt_what_an_adopted_child_starts(host):
    host.open("root")
    spawn_below_a_disposed_one_shot(host, "root")
    leaf = host.spawn("late", "leaf")
    result = host.tool("interrupt_agent", "root", agent_id="leaf")
    assert result == {
        "text": "interrupt requested for agent leaf",
        "accepted": True,
        "previous_status": "running",
    }
    assert host.notification("turn/interrupt", agent_id="leaf") == {
        "agent_id": "leaf",
        "turn_id": leaf["turn_id"],
        "cause": {"kind": "parent", "by": "root"},
    }
    result = host.tool("interrupt_agent", "root", agent_id="late")
    assert result["previous_status"] == "running"
    assert host.notification("turn/interrupt", agent_id="late")["cause"] == {
        "kind": "parent",
        "by": "root",
    }


def test_an_adopted_child_keeps_its_new_owner_resident_and_its_notice_is_only_recorded(host):
    host.open("root")
    p = host.spawn("root", "p")
    late = spawn_below_a_disposed_one_shot(host, "p")
    host.end_turn("p", p["turn_id"], "completed", "p waits")
    assert host.call("agents/get", {"agent_id": "p"})["status"] == "idle"  # owns `late`
    with pytest.raises(RpcError) as refused:
        host.tool("report", "late", output="anyone there?")
    assert (refused.value.code, refused.value.message) == (
        Code.PARENT_UNAVAILABLE,
        "direct parent is not live; report was not delivered",
    )
    host.settle_quietly()
    assert [n for n in host.drain_notifications() if n["method"] == "agent/settled"] == []
    host.end_turn("late", late["turn_id"], "completed", "late result")
    assert host.notification("agent/settled", agent_id="late")["reason"] == "completed"
    # the one-shot parent never runs again: the notice is in its transcript, not its inbox
    once = host.call("agents/get", {"agent_id": "once"})
    assert (once["status"], once["queued"], once["parked"]) == ("ready", 0, 0)
    events = host.call("transcript/read", {"agent_id": "once"})["events"]
    [notice] = [e for e in events if e["type"] == "notice"]
    assert [b["text"] for b in notice["data"]["content"]] == [
        "Background subagent late finished and will do no further work unless you send it more.",
        "Its closing message:",
        "late result",
    ]
    # with nothing left below it, `p` settles and the root hears about it
    assert host.notification("agent/settled", agent_id="p") == {
        "agent_id": "p",
        "reason": "completed",
    }
    start = host.notification("turn/start", agent_id="root")
    assert start["messages"][0]["content"][0]["text"] == (
        "Background subagent p finished and will do no further work unless you send it more."
    )
