"""What the engine writes and tells, exactly: transcript events (PROTOCOL.md section 6, "Transcript
event types subagentd writes") and `agent/status` / `agent/settled` notifications, through a
child's life, a drain, a shutdown and a host that is gone; fast and in-process."""

from __future__ import annotations

from typing import Any

from tests.core_host import CoreHost

NOTICE_STOPPED = [
    "Background subagent {id} was stopped before it finished.",
    "It left no closing message.",
]


def events(core: CoreHost, agent_id: str) -> list[tuple[str, str | None, Any]]:
    return [
        (e.type, e.turn_id, e.data)
        for e in core.svc.records.read_transcript(agent_id, None, None).events
    ]


def notice(child: str, first: str, closing: str | None) -> dict[str, Any]:
    """A settlement notice's Message without its message id."""
    blocks = (
        [first, "Its closing message:", closing]
        if closing
        else [first, "It left no closing message."]
    )
    return {
        "content": [{"type": "text", "text": text} for text in blocks],
        "source": {
            "kind": "subagent-settled",
            "form": "notice",
            "sender_session_id": child,
            "summary": first,
        },
    }


def without_id(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "message_id"}


def test_a_continuable_childs_life_in_its_transcript_and_in_status_events():
    core = CoreHost(status_events=True)
    core.open("root")
    spawned = core.spawn("root", "c1")
    assert core.notes[:2] == [
        ("agent/status", {"agent_id": "root", "status": "idle"}),
        ("agent/status", {"agent_id": "c1", "status": "idle"}),
    ]
    first_turn = core.turn("c1")
    assert core.notes[2][0] == "turn/start"
    assert core.notes[3:] == [("agent/status", {"agent_id": "c1", "status": "running"})]
    core.notes.clear()
    m1 = core.send("root", "c1", "m1").message_id
    core.interrupt("root", "c1")
    assert [n for n in core.notes if n[0] == "agent/status"] == []  # still running
    core.end("c1", "aborted")  # m1 is parked: nothing starts
    assert core.take("agent/status") == [{"agent_id": "c1", "status": "idle"}]
    m2 = core.send("root", "c1", "m2").message_id  # waking: m1 runs first, then m2
    second_turn = core.turn("c1")
    core.end("c1", "completed", "out")
    third_turn = core.turn("c1")
    core.end("c1", "completed", "out2")
    assert core.take("agent/status", "c1") == [
        {"agent_id": "c1", "status": "running"},
        {"agent_id": "c1", "status": "idle"},
        {"agent_id": "c1", "status": "running"},
        {"agent_id": "c1", "status": "idle"},
        {"agent_id": "c1", "status": "ready"},  # it left
    ]
    assert core.take("agent/settled") == [{"agent_id": "c1", "reason": "completed"}]
    assert core.take("agent/status", "root") == [{"agent_id": "root", "status": "running"}]

    got = events(core, "c1")
    activation = spawned.activation_id
    relay = {"kind": "coordinator", "form": "relay", "sender_session_id": "root"}
    assert [(t, turn) for t, turn, _ in got] == [
        ("descriptor", None),
        ("activated", None),
        ("message", first_turn),
        ("turn_start", first_turn),
        ("interrupt", first_turn),
        ("turn_end", first_turn),
        ("message", second_turn),
        ("turn_start", second_turn),
        ("turn_end", second_turn),
        ("message", third_turn),
        ("turn_start", third_turn),
        ("turn_end", third_turn),
        ("settled", None),
    ]
    data = [d for _, _, d in got]
    assert data[1] == {"activation_id": activation, "resume": False}
    assert data[2] == {
        "message_id": spawned.message_id,
        "content": [{"type": "text", "text": "go"}],
        "source": {"kind": "coordinator", "form": "spawn", "sender_session_id": "root"},
    }
    assert data[3] == {"turn_id": first_turn, "message_ids": [spawned.message_id]}
    assert data[4] == {"cause": "parent", "by": "root"}
    assert data[5] == {"turn_id": first_turn, "reason": "aborted"}
    assert data[6] == {
        "message_id": m1,
        "content": [{"type": "text", "text": "m1"}],
        "source": relay,
    }
    assert data[7] == {"turn_id": second_turn, "message_ids": [m1]}
    assert data[8] == {"turn_id": second_turn, "reason": "completed", "output": "out"}
    assert data[9] == {
        "message_id": m2,
        "content": [{"type": "text", "text": "m2"}],
        "source": relay,
    }
    assert data[11] == {"turn_id": third_turn, "reason": "completed", "output": "out2"}
    assert data[12] == {"reason": "completed"}
    # the parent was woken by the notice: a message of its turn, then the turn's start
    root = events(core, "root")
    assert [(t, turn) for t, turn, _ in root] == [
        ("activated", None),
        ("message", core.turn("root")),
        ("turn_start", core.turn("root")),
    ]
    finished = (
        "Background subagent c1 finished and will do no further work unless you send it more."
    )
    assert without_id(root[1][2]) == notice("c1", finished, "out2")


def test_a_drain_records_interrupts_notices_settlements_and_the_roots_closed_event():
    core = CoreHost(status_events=True)
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    c1_turn, g1_turn = core.turn("c1"), core.turn("g1")
    core.notes.clear()
    done: list[int] = []
    core.svc.host.close_root("root", lambda: done.append(1))
    assert core.notes == [
        ("turn/interrupt", {"agent_id": "g1", "turn_id": g1_turn, "cause": {"kind": "shutdown"}}),
        ("turn/interrupt", {"agent_id": "c1", "turn_id": c1_turn, "cause": {"kind": "shutdown"}}),
    ]
    core.notes.clear()
    core.end("g1", "aborted")
    assert core.notes == [
        ("agent/status", {"agent_id": "g1", "status": "idle"}),
        ("agent/status", {"agent_id": "g1", "status": "ready"}),
        ("agent/settled", {"agent_id": "g1", "reason": "closed"}),
    ]
    core.notes.clear()
    core.end("c1", "completed", "bye")
    assert core.notes == [
        ("agent/status", {"agent_id": "c1", "status": "idle"}),
        ("agent/status", {"agent_id": "c1", "status": "ready"}),
        ("agent/settled", {"agent_id": "c1", "reason": "closed"}),
        ("agent/status", {"agent_id": "root", "status": "ready"}),
    ]
    assert done == [1] and len(core.svc.agents.registry) == 0
    assert events(core, "g1")[-3:] == [
        ("interrupt", g1_turn, {"cause": "shutdown", "by": None}),
        ("turn_end", g1_turn, {"turn_id": g1_turn, "reason": "aborted"}),
        ("settled", None, {"reason": "closed"}),
    ]
    c1 = events(core, "c1")
    assert [(t, turn) for t, turn, _ in c1[-4:]] == [
        ("interrupt", c1_turn),
        ("notice", None),
        ("turn_end", c1_turn),
        ("settled", None),
    ]
    stopped = "Background subagent g1 was stopped before it finished."
    assert without_id(c1[-3][2]) == notice("g1", stopped, None)
    assert c1[-1][2] == {"reason": "closed"}
    root = events(core, "root")
    assert [(t, turn) for t, turn, _ in root] == [
        ("activated", None),
        ("notice", None),
        ("closed", None),
    ]
    finished = (
        "Background subagent c1 finished and will do no further work unless you send it more."
    )
    assert without_id(root[1][2]) == notice("c1", finished, "bye")
    assert (
        len(root[1][2]["message_id"]) == 36 and root[1][2]["message_id"] != c1[-3][2]["message_id"]
    )
    assert root[2][2] == {}


def test_shutdown_is_done_once_every_topmost_agent_has_left():
    core = CoreHost()
    done: list[int] = []
    core.svc.settlement.shutdown(lambda: done.append(1))
    assert done == [1]  # nothing live: done at once

    core = CoreHost()
    core.open("a")
    core.open("b")
    core.open("c")
    core.spawn("a", "a1")
    core.spawn("b", "b1", mode="one-shot")
    core.notes.clear()
    done = []
    core.svc.settlement.shutdown(lambda: done.append(1))
    assert done == [] and core.svc.agents.registry.get("c") is None  # c had nothing to wait for
    assert [n["agent_id"] for n in core.take("turn/interrupt")] == ["a1", "b1"]
    core.end("a1", "aborted")
    assert done == [] and core.svc.agents.registry.get("a") is None
    core.end("b1", "aborted", "x")
    assert done == [1] and len(core.svc.agents.registry) == 0
    assert core.take("agent/settled") == [
        {"agent_id": "a1", "reason": "closed"},
        {"agent_id": "b1", "reason": "closed"},
    ]
    assert [t for t, _, _ in events(core, "c")] == ["activated", "closed"]


def test_when_the_host_is_gone_every_open_turn_ends_aborted_with_the_cause():
    core = CoreHost()
    core.open("a")
    core.spawn("a", "c")
    core.spawn("a", "d", mode="one-shot")
    core.open("idle")
    core.notes.clear()
    turns = {agent: core.turn(agent) for agent in ("c", "d")}
    core.svc.settlement.shutdown(lambda: None)
    core.notes.clear()
    core.svc.settlement.force_end_all("shutdown")
    for agent in ("c", "d"):
        assert events(core, agent)[-2:] == [
            (
                "turn_end",
                turns[agent],
                {"turn_id": turns[agent], "reason": "aborted", "cause": "shutdown"},
            ),
            ("settled", None, {"reason": "closed"}),
        ]
    assert core.take("agent/settled") == [
        {"agent_id": "c", "reason": "closed"},
        {"agent_id": "d", "reason": "closed"},
    ]
    assert len(core.svc.agents.registry) == 0
    assert [t for t, _, _ in events(core, "idle")] == ["activated", "closed"]
    assert [t for t, _, _ in events(core, "a")][-1] == "closed"
