"""A first end-to-end flow over the in-process server: open, spawn, end turn, settle."""


def test_child_settles_after_completed_turn_and_parent_gets_notice(host):
    host.open("root")
    child = host.spawn("root", "c1", label="child one")
    host.end_turn("c1", child["turn_id"], "completed", output="all done")
    settled = host.notification("agent/settled", agent_id="c1")
    assert settled["reason"] == "completed"
    start = host.notification("turn/start", agent_id="root")
    [message] = start["messages"]
    assert [b["text"] for b in message["content"]] == [
        "Background subagent c1 finished and will do no further work unless you send it more.",
        "Its closing message:",
        "all done",
    ]
    assert message["source"] == {
        "kind": "subagent-settled",
        "form": "notice",
        "summary": "Background subagent c1 finished and will do no further work unless you send it more.",
        "sender_session_id": "c1",
    }
