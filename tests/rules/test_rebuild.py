"""After a lost commit group, memory agrees with storage again (Recovery.rebuild), in-process.

The wire tests of storage faults (tests/storage/test_storage_faults.py) are slow; these pin the same rule
fast: the registry rebuilt from the lease rows equals the registry of the last commit in every
field (what is derived too: held root, tool filter, owner after adoption), closing waiters are
those of the last commit, and force-end timers run exactly for interrupted open turns.
"""

from __future__ import annotations

from typing import Any

from subagentd.schema.host_methods import OpenParams
from subagentd.schema.messages import ToolFilter
from tests.core_host import CoreHost


def view(core: CoreHost) -> list[tuple[Any, ...]]:
    """Every field of every live agent, as values (a Turn is mutated in place, so copied)."""
    return sorted(
        (
            a.agent_id,
            a.parent_id,
            a.kind,
            a.depth,
            a.activation_id,
            a.ancestry,
            (a.turn.turn_id, a.turn.interrupted) if a.turn is not None else None,
            a.parked,
            a.pending,
            a.disposing,
            a.resume,
            a.last_reason,
            a.last_output,
            a.held,
            a.tools,
            a.owner_id,
            a.lineage,
            a.held_by,
        )
        for a in core.svc.agents.registry
    )


def turn_ends(core: CoreHost, agent_id: str) -> list[dict[str, Any]]:
    return [
        e.data
        for e in core.svc.records.read_transcript(agent_id, None, None).events
        if e.type == "turn_end"
    ]


def test_a_rebuild_of_a_committed_state_gives_back_every_field_of_every_live_agent():
    core = CoreHost(report_rate=1)
    svc = core.svc
    svc.host.open(OpenParams(agent_id="caller"), hold=True)  # the --caller root: held
    core.open("root")
    core.spawn("root", "c1")
    core.send("root", "c1", "m1")
    core.send("root", "c1", "m2")
    core.interrupt("root", "c1")  # interrupted open turn; its two messages parked
    core.report("c1", "first")  # wakes root: c1's one wakeup this minute
    core.spawn("root", "c2", tool_filter=ToolFilter(allow=["report"]))
    core.spawn("c2", "g2")
    core.end("c2", "completed", "c2 out")  # idle, kept live by g2, with its last output
    core.spawn("root", "once", mode="one-shot")
    core.spawn("once", "late")
    core.end("once", "completed", "done")  # once leaves: late is adopted by root
    core.open("gone")
    svc.host.close_root("gone", lambda: None)
    core.open("orphan", parent_id="gone")  # its parent is not live: owned by its parent id
    core.open("solo")
    core.spawn("solo", "s1")
    closed: list[str] = []
    svc.host.close_root("solo", lambda: closed.append("solo"))  # waits for s1's turn
    svc.commit()
    before = view(core)
    # the state is as rich as intended: each field differs from its default somewhere
    by_id = {row[0]: row for row in before}
    assert by_id["caller"][13] is True
    assert by_id["c1"][6][1] is True and by_id["c1"][7] is True and by_id["c1"][8] == 2
    assert by_id["c2"][11:13] == ("completed", "c2 out")
    assert by_id["c2"][14] == frozenset({"report"})
    assert len(by_id["g2"][5]) == 3 and by_id["g2"][15] == "c2"
    assert by_id["orphan"][15] == "gone" and by_id["s1"][9] is True
    assert len(by_id["late"][5]) == 3 and by_id["late"][15] == "root"
    assert set(svc.scheduler._grace) == {by_id["c1"][6][0], by_id["s1"][6][0]}

    svc.recovery.rebuild()

    assert view(core) == before
    assert (
        svc.agents.closing == {"solo": svc.agents.closing["solo"]}
        and len(svc.agents.closing["solo"]) == 1
    )
    assert set(svc.scheduler._grace) == {by_id["c1"][6][0], by_id["s1"][6][0]}
    # the report rate window survived: c1's second report this minute is delivered quietly
    core.notes.clear()
    core.report("c1", "second")
    assert [n["agent_id"] for n in core.take("agent/inject")] == ["root"]
    assert core.take("turn/start") == []
    # the waiting close of the last commit completes when s1's turn ends
    core.end("s1", "aborted")
    assert closed == ["solo"]
    assert svc.agents.registry.get("solo") is None
    # the held root still holds its input; c1's grace timer (armed once) still force-ends it
    svc.host.followup("caller", "for the client")
    assert core.take("turn/start", "caller") == []
    assert core.timers.fire_all() == 1
    assert turn_ends(core, "c1")[-1] == {
        "turn_id": by_id["c1"][6][0],
        "reason": "aborted",
        "cause": "interrupt-timeout",
    }


def test_a_rebuild_after_a_lost_group_undoes_its_interrupts_ends_departures_and_closes():
    core = CoreHost()
    svc = core.svc
    core.open("root")
    core.spawn("root", "keep")
    core.spawn("root", "ended")
    core.interrupt("root", "ended")  # committed: its force-end timer is armed
    core.spawn("root", "f", tool_filter=ToolFilter(allow=["report"]))
    core.open("solo")
    core.open("solo2")
    core.spawn("solo2", "s2")
    svc.commit()
    before = view(core)
    turns = {row[0]: row[6][0] for row in before if row[6] is not None}

    # the group that is lost
    core.interrupt("root", "keep")  # arms a timer for a turn the rollback leaves uninterrupted
    core.end("ended", "aborted")  # cancels ended's timer
    core.end("f", "completed", "done")  # f settles: it leaves
    left: list[str] = []
    svc.host.close_root("solo", lambda: left.append("solo"))  # leaves at once
    svc.host.close_root("solo2", lambda: left.append("solo2"))  # waits for s2
    assert left == ["solo"]
    assert svc.agents.registry.get("f") is None and svc.agents.registry.get("solo") is None

    svc.recovery.rebuild()

    assert view(core) == before  # f and solo are back, derived fields read from storage
    f = next(row for row in view(core) if row[0] == "f")
    assert (f[13], f[14]) == (False, frozenset({"report"}))
    assert svc.agents.closing == {}
    assert set(svc.scheduler._grace) == {turns["ended"]}
    # exactly the interrupted turn is force-ended, after a full grace period armed again
    assert core.timers.fire_all() == 1
    assert turn_ends(core, "ended") == [
        {"turn_id": turns["ended"], "reason": "aborted", "cause": "interrupt-timeout"}
    ]
    assert core.turn("keep") == turns["keep"] and turn_ends(core, "keep") == []
    assert core.turn("s2") == turns["s2"]
    # the lost close is forgotten: s2's end does not drain solo2, whose waiter never runs
    core.end("s2")
    assert svc.agents.registry.get("solo2") is not None and left == ["solo"]
    # solo, back from a departure lost with the group, is not held: its input starts a turn
    core.notes.clear()
    svc.host.followup("solo", "hello")
    assert core.texts_of_turns("solo") == [["hello"]]


def test_a_rebuild_with_nothing_live_leaves_the_registry_empty_and_the_engine_working():
    core = CoreHost()
    core.svc.commit()
    core.open("root")  # lost
    core.svc.recovery.rebuild()
    assert (
        len(core.svc.agents.registry) == 0
        and core.svc.agents.closing == {}
        and core.svc.scheduler._grace == {}
    )
    core.open("root")
    core.spawn("root", "c1")
    assert core.status("c1") == "running"
