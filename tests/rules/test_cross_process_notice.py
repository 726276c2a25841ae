"""A crash notice that another process queues for a parent live here (found while
checking mutants of the inbox quota): three services on one database file, as three processes.

p1 runs root -> c1 -> g1 and stalls past its lease. p2 resumes c1 (send_message from root): c1's
own open turn is recovered then, but g1's is not. p3's heartbeat recovers g1 and queues its crash
notice in c1's inbox in storage; c1 is live in p2, whose registry does not know of it yet. SEMANTICS.md
section 1: a continuable child settles only with no queued messages, and no agent is left with
waking input and no turn. p3 signals p2 (storage/signals.py); even before p2 takes the signal,
c1's settling reads its inbox as committed and runs the notice first."""

from __future__ import annotations

from tests.core_host import TTL, FakeClock, process, step


def test_a_notice_another_process_queues_for_a_live_parent_runs_before_it_settles(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    stalled = process(path, clock, "p1")
    step(stalled, stalled.open, "root")
    step(stalled, stalled.spawn, "root", "c1")
    step(stalled, stalled.spawn, "c1", "g1")
    here = process(path, clock, "p2")
    reaper = process(path, clock, "p3")
    clock.advance(TTL)  # p1 stalled past its lease
    step(here, here.open, "root")
    step(here, here.send, "root", "c1", "resume")
    assert here.texts_of_turns("c1") == [["resume"]]
    assert step(reaper, reaper.svc.recovery.recover) == 1  # g1's open turn, and its notice to c1
    assert here.store.inbox_counts("c1") == (1, 0)
    step(here, here.end, "c1")
    assert here.take("agent/settled", "c1") == []
    assert here.texts_of_turns("c1") == [
        ["Background subagent g1 failed before it finished.", "It left no closing message."]
    ]


def test_a_parent_settling_first_ends_its_lapsed_childs_turn_and_runs_the_notice(tmp_path):
    """The same, with c1 settling before any other process's heartbeat ran: c1's own settling
    ends g1's turn (its owner lapsed), so the notice is c1's input and runs before it settles,
    rather than landing in its inbox after it left, where nobody would see it."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    stalled = process(path, clock, "p1")
    step(stalled, stalled.open, "root")
    step(stalled, stalled.spawn, "root", "c1")
    step(stalled, stalled.spawn, "c1", "g1")
    here = process(path, clock, "p2")
    clock.advance(TTL)  # p1 stalled past its lease
    step(here, here.open, "root")
    step(here, here.send, "root", "c1", "resume")
    step(here, here.end, "c1")
    assert here.take("agent/settled", "c1") == []  # not yet: the notice runs first
    assert here.texts_of_turns("c1") == [
        ["resume"],
        ["Background subagent g1 failed before it finished.", "It left no closing message."],
    ]
    step(here, here.end, "c1")
    assert [n["reason"] for n in here.take("agent/settled", "c1")] == ["completed"]
    assert here.store.inbox_counts("c1") == (0, 0)
