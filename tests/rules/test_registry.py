"""The live registry on its own: ownership, adoption, subtree order and the walks over owners,
which stop at an agent already seen (so even a corrupt owner cycle cannot hang a request)."""

from __future__ import annotations

import pytest

from subagentd.core.registry import CONTINUABLE, ORDINARY, LiveAgent, Registry


def agent(agent_id: str, owner_id: str | None, kind: str = CONTINUABLE) -> LiveAgent:
    return LiveAgent(
        agent_id=agent_id,
        parent_id=owner_id,
        kind=kind,
        depth=0,
        activation_id=f"act-{agent_id}",
        ancestry=(f"act-{agent_id}",),
        owner_id=owner_id,
    )


def tree() -> tuple[Registry, dict[str, LiveAgent]]:
    """root -> a -> a1, a -> a2, root -> b."""
    registry = Registry()
    made = {}
    for agent_id, owner in (("root", None), ("a", "root"), ("a1", "a"), ("a2", "a"), ("b", "root")):
        made[agent_id] = agent(agent_id, owner, ORDINARY if owner is None else CONTINUABLE)
        registry.add(made[agent_id])
    return registry, made


def test_children_ancestry_subtree_below_and_root_follow_the_owners():
    registry, made = tree()
    assert len(registry) == 5 and [a.agent_id for a in registry] == ["root", "a", "a1", "a2", "b"]
    assert (
        registry.get("a") is made["a"] and registry.get(None) is None and registry.get("x") is None
    )
    assert registry.lookup("b") is made["b"]
    assert [registry.live_children(made[i]) for i in ("root", "a", "a1")] == [2, 2, 0]
    assert registry.has_live_children(made["a"]) and not registry.has_live_children(made["b"])
    assert registry.live_ancestry("new", "a1") == ("new", "act-a1", "act-a", "act-root")
    assert registry.live_ancestry("new", None) == ("new",)
    assert registry.live_ancestry("new", "gone") == ("new",)
    below_root = [a.agent_id for a in registry.subtree(made["root"])]
    assert sorted(below_root) == ["a", "a1", "a2", "b"]
    assert below_root.index("a1") < below_root.index("a") and below_root.index(
        "a2"
    ) < below_root.index("a")  # deepest first
    assert registry.subtree(made["b"]) == []
    assert (
        registry.below("a1", "root") and registry.below("a1", "a") and not registry.below("a1", "b")
    )
    assert not registry.below("root", "root") and not registry.below(None, "root")
    assert not registry.below("gone", "root")
    assert (
        registry.root_of(made["a2"]) is made["root"]
        and registry.root_of(made["root"]) is made["root"]
    )


def test_an_agent_that_leaves_hands_its_live_children_to_its_own_owner():
    registry, made = tree()
    registry.remove(made["a"])
    assert registry.get("a") is None and len(registry) == 4
    assert (made["a1"].owner_id, made["a2"].owner_id) == ("root", "root")
    assert registry.live_children(made["root"]) == 3
    assert registry.root_of(made["a1"]) is made["root"] and registry.below("a2", "root")
    registry.remove(made["b"])
    assert registry.live_children(made["root"]) == 2
    registry.remove(made["a1"])
    registry.remove(made["a2"])
    assert not registry.has_live_children(made["root"])
    assert registry.live_children(made["root"]) == 0
    registry.remove(made["root"])
    assert len(registry) == 0
    registry.remove(made["root"])  # twice: nothing to do
    # a root (no owner) that leaves first leaves its children where they are
    registry, made = tree()
    registry.remove(made["root"])
    assert made["a"].owner_id == "root" and registry.root_of(made["a1"]) is made["a"]
    registry.clear()
    assert len(registry) == 0 and registry.get("a") is None
    # an only child that leaves hands its children to its owner, which had no other child
    registry = Registry()
    chain = [agent("r", None), agent("m", "r"), agent("k", "m")]
    for one in chain:
        registry.add(one)
    registry.remove(chain[1])
    assert chain[2].owner_id == "r" and registry.live_children(chain[0]) == 1
    assert registry.subtree(chain[0]) == [chain[2]]


@pytest.mark.timeout(5)
def test_every_walk_over_owners_stops_at_an_agent_already_seen():
    registry = Registry()
    x, y = agent("x", "y"), agent("y", "x")
    registry.add(x)
    registry.add(y)
    assert registry.live_ancestry("new", "x") == ("new", "act-x", "act-y")
    assert registry.below("x", "z") is False
    assert registry.root_of(x) is y and registry.root_of(y) is x
    assert registry.subtree(x) == [y]
    # a walk that enters a cycle further up: w -> x -> y -> x
    w = agent("w", "x")
    registry.add(w)
    assert registry.root_of(w) is y
    assert registry.below("w", "y") and not registry.below("w", "z")
    # an agent listed under two owners (never made by the engine) is visited once
    registry = Registry()
    top, left, right, shared = (
        agent("top", None),
        agent("l", "top"),
        agent("r", "top"),
        agent("s", "l"),
    )
    for one in (top, left, right, shared):
        registry.add(one)
    shared.owner_id = "r"
    registry.add(shared)
    assert [a.agent_id for a in registry.subtree(top)].count("s") == 1
