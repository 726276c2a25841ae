"""list_agents among requests read together (a snapshot, core/agents.py `kept`): one reading of
storage is shared while nothing that listing was read from can have moved, and every answer is
exactly the one a fresh reading gives."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tests.core_host import CoreHost, FakeClock, process, step


def counted(core: CoreHost) -> list[str]:
    """The listings' storage reads (children: one statement; descendants: the walk)."""
    reads: list[str] = []
    store = core.store
    children_listing, tree_rows = store.children_listing, store.tree_rows

    def children(*args: Any) -> Any:
        reads.append("children")
        return children_listing(*args)

    def tree(*args: Any, **kwargs: Any) -> Any:
        reads.append("tree")
        return tree_rows(*args, **kwargs)

    store.children_listing, store.tree_rows = children, tree
    return reads


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
    assert len(reads) == 1
    assert first == fresh(core, scope=scope) and len(reads) == 2
    assert listed(core, "c1", scope) == fresh(core, "c1", scope)  # another caller: its own
    core.svc.agents.end_snapshot()
    listed(core, scope=scope)
    listed(core, scope=scope)
    assert len(reads) == 6  # outside a snapshot every listing reads
    assert core.svc.agents._kept == {}


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
    assert len(reads) == 3  # not kept while the group's writes are not committed
    core.svc.commit()
    assert core.list("root").text == during and core.list("root").text == during
    assert len(reads) == 4  # kept again once committed


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
    assert len(reads) == 3


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
    assert core.list("root").text.startswith("c1 [idle]") and len(reads) == 2
    assert core.list("root", "descendants").text.startswith("c1 [idle]")
    agent.turn = turn
    assert core.list("root", "descendants").text.startswith("c1 [running]") and len(reads) == 4


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
    assert len(answers) == 1 and len(reads) == 3
