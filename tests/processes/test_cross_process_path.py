"""The owner's side of input across processes on PostgreSQL (PROTOCOL.md section 7, "Input across
processes"), between the sender's COMMIT and the owner's `turn/start`: two real subagentd
processes on a throwaway PostgreSQL database, counted through the owner's `server/stats`
`traffic` (round trips of its main connection, doorbell wake-ups and the notifications they
brought) and `commits`. The ring names the session signalled, so the owner takes that session's
signal under its tree's lock alone: a group of another tree that holds its own lock meanwhile
delays nothing."""

from __future__ import annotations

import psycopg
import pytest

from subagentd.core.stamps import now
from subagentd.storage.postgres.group import TREE_LOCKS, WRITER_LOCK, tree_key
from tests.spawned import ServerProcess

PATIENCE = 30.0
CONTENT = '[{"type":"text","text":"go"}]'  # as core writes a follow-up (core/scheduling.py)
SOURCE = '{"kind":"user","form":"followup"}'


@pytest.fixture
def pair(pg_stores):
    """(owner, sender, url): the owner holds root live and idle; the sender shares its database."""
    url = pg_stores.url("shared")
    procs = [ServerProcess("--lease-ttl", "300", db=url) for _ in range(2)]
    try:
        owner, sender = (proc.host for proc in procs)
        owner.initialize()
        sender.initialize()
        owner.open("root")
        yield owner, sender, url
    finally:
        for proc in procs:
            proc.stop()


def figures(host) -> tuple[int, int, int, int]:
    stats = host.call("server/stats", {})
    traffic = stats["traffic"]
    return traffic["round_trips"], traffic["wakeups"], traffic["rings"], stats["commits"]


def cross(owner, sender, message: str) -> str:
    """One follow-up sent through the sender, until the owner's turn/start for it; its turn id."""
    sender.call("agents/followup", {"agent_id": "root", "message": message})
    start = owner.notification("turn/start", PATIENCE, agent_id="root")
    assert [b["text"] for m in start["messages"] for b in m["content"]] == [message]
    return start["turn_id"]


def test_a_follow_up_from_another_process_costs_the_owner_one_wake_up_and_few_round_trips(pair):
    owner, sender, _ = pair
    owner.end_turn("root", cross(owner, sender, "warm"), "completed", "ok")  # statements prepared
    first, second = figures(owner), figures(owner)
    own = [b - a for a, b in zip(first, second, strict=True)]  # what one stats call costs itself
    assert own[1:] == [0, 0, 0]
    for i in range(3):
        before = figures(owner)
        turn = cross(owner, sender, f"m{i}")
        after = figures(owner)
        round_trips, wakeups, rings, commits = (
            b - a - c for a, b, c in zip(before, after, own, strict=True)
        )
        # BEGIN with root's tree's lock; root's signal deleted and returned with root's
        # inbox (its counts, its next queued message); its budget; the turn's writes held
        # (claim, open turn, its two events, spending, lease status), all sent together;
        # COMMIT
        assert (round_trips, wakeups, rings, commits) == (5, 1, 1, 1)
        owner.end_turn("root", turn, "completed", "ok")


def test_another_trees_group_holding_its_lock_does_not_delay_the_wake_up(pair, pg_stores):
    """A third connection holds another tree's lock (WRITER_LOCK shared, then that tree's) all
    along. A sender writing root's tree under that tree's lock alone (a store in this test
    process, as a process with an agent of root's tree live writes: the message and the
    signal) wakes the owner, whose take of root's signal needs root's tree's lock only: the
    turn starts meanwhile (every tree's lock would wait for that group to end)."""
    owner, _, url = pair
    with psycopg.connect(url) as other:
        (holder,) = other.execute("SELECT owner FROM leases WHERE session_id = 'root'").fetchone()
        other.execute(
            "SELECT pg_advisory_xact_lock_shared(%s), pg_advisory_xact_lock(%s, %s)",
            (WRITER_LOCK, TREE_LOCKS, tree_key("elsewhere")),
        )
        sender = pg_stores("shared")
        sender.set_scope("root")
        with sender.atomic():
            sender.insert_message("m-tree", "root", CONTENT, SOURCE, "queued", now())
            sender.put_signal(holder, "root", "inbox", None)
        sender.commit()
        start = owner.notification("turn/start", PATIENCE, agent_id="root")
        other.rollback()
    assert [m["message_id"] for m in start["messages"]] == ["m-tree"]
    assert owner.call("server/stats", {})["lock_waits"]["gave_up"] == 0
