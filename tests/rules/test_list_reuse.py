"""list_agents answered again from what an earlier listing read, and only while nothing it was read
from can have moved, so every answer is exactly the one a fresh reading gives: among requests read
together (a snapshot, core/agents.py `kept`), and a caller's children listing across requests
(core/kept_listings.py `Listings`)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from subagentd.core.kept_listings import Listings
from tests.core_host import TTL, CoreHost, FakeClock, process, step


def counted(core: CoreHost) -> list[str]:
    """The listings' storage reads (children: one statement; descendants: the walk; `outside`:
    a look at other connections' commits)."""
    reads: list[str] = []
    store = core.store
    children_listing, tree_rows, outside = store.children_listing, store.tree_rows, None
    if hasattr(store, "outside_commits"):
        outside = store.outside_commits

        def looked() -> Any:
            reads.append("outside")
            return outside()

        store.outside_commits = looked

    def children(*args: Any) -> Any:
        reads.append("children")
        return children_listing(*args)

    def tree(*args: Any, **kwargs: Any) -> Any:
        reads.append("tree")
        return tree_rows(*args, **kwargs)

    store.children_listing, store.tree_rows = children, tree
    return reads


def listings(reads: list[str]) -> list[str]:
    """The reads of listing rows (not the looks at other connections' commits)."""
    return [read for read in reads if read != "outside"]


def listed(core: CoreHost, caller: str = "root", scope: Any = "children") -> Any:
    return msgspec.to_builtins(core.list(caller, scope))


def fresh(core: CoreHost, caller: str = "root", scope: Any = "children") -> Any:
    """The same listing read anew (outside the snapshot: nothing kept is used)."""
    agents = core.svc.agents
    agents.in_snapshot, kept = False, agents._kept
    agents._kept = {}
    try:
        return listed(core, caller, scope)
    finally:
        agents.in_snapshot, agents._kept = True, kept


def tree() -> CoreHost:
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="first")
    core.spawn("root", "c2", label="second")
    core.spawn("c1", "g1", label="nested")
    core.end("c2")
    core.svc.commit()
    return core


@pytest.mark.parametrize("scope", ["children", "descendants"])
def test_listings_read_together_read_storage_once_while_nothing_moves(scope):
    core = tree()
    reads = counted(core)
    core.svc.agents.in_snapshot = True
    first = listed(core, scope=scope)
    assert [listed(core, scope=scope) for _ in range(3)] == [first] * 3
    assert len(listings(reads)) == 1
    assert first == fresh(core, scope=scope) and len(listings(reads)) == 2
    assert listed(core, "c1", scope) == fresh(core, "c1", scope)  # another caller: its own
    core.svc.agents.end_snapshot()
    assert core.svc.agents._kept == {}


def test_outside_a_snapshot_a_descendants_listing_reads_every_time():
    core = tree()
    reads = counted(core)
    assert len({core.list("root", "descendants").text for _ in range(3)}) == 1
    assert reads == ["tree"] * 3


def test_a_write_of_this_process_is_seen_by_the_next_listing_of_the_snapshot():
    core = tree()
    reads = counted(core)
    core.svc.agents.in_snapshot = True
    before = core.list("root").text
    with core.svc.transaction():  # a request of the chunk that writes (its group still open)
        core.spawn("root", "c3", label="third")
    during = core.list("root").text
    assert during == "\n".join([before, "c3 [running] — third"])
    core.list("root")
    assert len(listings(reads)) == 3  # not kept while the group's writes are not committed
    core.svc.commit()
    assert core.list("root").text == during and core.list("root").text == during
    assert len(listings(reads)) == 4  # kept again once committed


def test_a_listing_of_an_open_group_that_rolls_back_is_not_reused():
    core = tree()
    reads = counted(core)
    core.svc.agents.in_snapshot = True
    before = core.list("root").text
    core.svc.transaction().__enter__()
    core.spawn("root", "c3", label="third")
    assert "c3 [running]" in core.list("root").text
    core.store.rollback()
    core.svc.recovery.rebuild()
    assert core.list("root").text == before
    assert len(listings(reads)) == 3


def test_a_live_status_that_moved_in_memory_is_read_again():
    """The kept listing is reused only while each listed agent is as live here as it was:
    a status that changed without a write of storage is not answered from it."""
    core = tree()
    reads = counted(core)
    core.svc.agents.in_snapshot = True
    assert core.list("root").text.startswith("c1 [running]")
    agent = core.svc.agents.registry.get("c1")
    assert agent is not None
    turn, agent.turn = agent.turn, None
    assert core.list("root").text.startswith("c1 [idle]") and len(listings(reads)) == 2
    assert core.list("root", "descendants").text.startswith("c1 [idle]")
    agent.turn = turn
    assert (
        core.list("root", "descendants").text.startswith("c1 [running]")
        and len(listings(reads)) == 4
    )


@pytest.mark.sqlite_only  # PostgresStore.changes() moves on every call: it keeps no reading
def test_another_process_commit_is_seen_once_the_snapshot_ends(tmp_path):
    """What another process commits while requests read together are answered is as if it
    committed after them (the same rule as the other processes' leases): seen by the next chunk."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    second.svc.agents.in_snapshot = True
    assert second.list("root").text == "c1 [running] — task"
    step(first, first.spawn, "root", "c2")
    assert second.list("root").text == "c1 [running] — task"
    second.svc.agents.end_snapshot()
    assert second.list("root").text == "c1 [running] — task\nc2 [running] — task"


def test_on_a_store_whose_changes_always_move_nothing_is_kept():
    """PostgreSQL's store counts no changes (`changes()` moves on every call): it reads each time."""
    core = tree()
    reads = counted(core)
    ticks = iter(range(10**6))
    core.store.changes = lambda: next(ticks)
    core.svc.agents.in_snapshot = True
    answers = {core.list("root").text for _ in range(3)}
    assert len(answers) == 1 and len(listings(reads)) == 3


# --- a caller's children listing across requests ------------------------------------------------


def test_a_children_listing_is_answered_again_while_nothing_moved():
    """The first listing is kept without a look at other connections' commits; the second, with
    this process's writes still put, looks (before reading again); from the third on the look
    alone answers."""
    core = tree()
    reads = counted(core)
    texts = {core.list("root").text for _ in range(4)}
    assert texts == {"c1 [running] — first\nc2 [ready, last turn completed] — second"}
    assert reads == ["children", "outside", "children", "outside", "outside"]
    assert core.list("c1").text == "g1 [running] — nested"  # each caller its own


def test_a_write_of_this_process_is_read_again_without_a_look_elsewhere():
    core = tree()
    for _ in range(3):
        core.list("root")
    reads = counted(core)
    step(core, core.spawn, "root", "c3", label="third")
    assert core.list("root").text.endswith("c3 [running] — third")
    assert reads == ["children"]  # this process wrote: no look at the others' commits
    core.end("c3")
    core.svc.commit()
    assert core.list("root").text.endswith("c3 [ready, last turn completed] — third")
    assert reads == ["children", "children"]


def test_a_status_that_moved_in_memory_is_read_again_across_requests():
    core = tree()
    for _ in range(3):
        core.list("root")
    agent = core.svc.agents.registry.get("c1")
    assert agent is not None
    agent.turn = None
    assert core.list("root").text.startswith("c1 [idle]")


@pytest.mark.sqlite_only  # two processes on one SQLite file
def test_another_process_commit_is_seen_by_the_next_listing(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(second, second.open, "mine")
    reads = counted(second)
    assert {second.list("root").text for _ in range(3)} == {"(no subagents)"}
    assert reads == ["children", "outside", "children", "outside"]
    step(first, first.spawn, "root", "c1")
    assert second.list("root").text == "c1 [running] — task"
    assert reads[4:] == ["outside", "children"]
    step(first, first.end, "c1")
    assert second.list("root").text == "c1 [ready, last turn completed] — task"


@pytest.mark.sqlite_only  # two processes on one SQLite file
def test_a_row_judged_by_another_process_lease_is_never_kept(tmp_path):
    """A lease lapses by the clock (its owner stops renewing) with nothing committed: a listing
    that showed another process's status is read again each time, and shows the lapse."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    reads = counted(second)
    assert {second.list("root").text for _ in range(3)} == {"c1 [running] — task"}
    assert reads.count("children") == 3
    clock.advance(TTL * 2)  # p1 renews no more (its renewals tick in real time)
    assert second.list("root").text == "c1 [ready, last turn failed] — task"


def test_where_other_connections_commits_cannot_be_told_nothing_is_kept():
    """PostgresStore.outside_commits() is None: each listing reads."""
    core = tree()
    core.store.outside_commits = lambda: None
    reads = counted(core)
    assert len({core.list("root").text for _ in range(4)}) == 1
    assert reads.count("children") == 4


def test_large_listings_are_not_kept():
    core = CoreHost(max_children=0, tree_max_spawns=0)
    core.open("root")
    for i in range(Listings.ROWS + 1):
        core.spawn("root", f"c{i:03}")
    core.svc.commit()
    reads = counted(core)
    for _ in range(3):
        core.list("root")
    assert reads.count("children") == 3
