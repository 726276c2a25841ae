"""A hostile scripted model against the budgets (PROTOCOL.md section 12), property-based.

Every turn of every agent is played by a model that tries to run away: it spawns (continuable and
one-shot children, children asking for huge budgets of their own), re-awakens finished children
with send_message, reports to wake its parent, and ends its turn claiming usage. Whatever it
does, a tree never starts more spawns or turns than its budget, its tokens pass the limit by at
most what the turns running when the limit was reached report, and the sums the host reads are
exactly what happened.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subagentd.errors import BudgetExceededError, SubagentdError
from subagentd.schema.budgets import Budget, Usage
from subagentd.schema.host_methods import TurnEndParams
from subagentd.schema.messages import Mode
from subagentd.schema.tools import SpawnAgentArgs
from tests.core_host import CoreHost

EXAMPLES = 400 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 40
ACTIONS = ["spawn", "spawn", "one-shot", "greedy", "send", "report", "end"]
TOKENS_PER_TURN = 50


def play(data, core: CoreHost, root: str, steps: int, limit: int) -> dict[str, int]:
    """Run the tree's turns as the hostile model; the counts of what subagentd admitted, and how
    many turns were still running when its tokens first reached `limit`."""
    admitted = {"spawns": 0, "turns": 0, "tokens": 0, "refusals": 0, "running_at_limit": -1}
    registry = core.svc.agents.registry
    seen_turns: set[str] = set()
    minted = 0  # child ids are the test's own: the draws must not depend on random ids
    for _ in range(steps):
        running = sorted(a.agent_id for a in registry if a.turn is not None)
        for agent_id in running:
            turn = registry.get(agent_id).turn.turn_id  # type: ignore[union-attr]
            if turn not in seen_turns:
                seen_turns.add(turn)
                admitted["turns"] += 1
        if not running:
            break
        agent_id = data.draw(st.sampled_from(running))
        agent = registry.get(agent_id)
        assert agent is not None
        for action in data.draw(st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=4)):
            try:
                if action in ("spawn", "one-shot", "greedy"):
                    budget = (
                        Budget(max_turns=10**9, max_spawns=10**9) if action == "greedy" else None
                    )
                    mode: Mode = "one-shot" if action == "one-shot" else "continuable"
                    minted += 1
                    args = SpawnAgentArgs(
                        label="again",
                        prompt="spawn more",
                        mode=mode,
                        child_id=f"a{minted:05d}",
                        budget=budget,
                    )
                    core.svc.delegation.spawn_agent(agent_id, None, args)
                    admitted["spawns"] += 1
                elif action == "send":
                    children = [
                        r[0]
                        for r in core.store.conn.execute(
                            "SELECT id FROM sessions WHERE parent_id = ?", (agent_id,)
                        ).fetchall()
                    ]
                    if children:
                        core.send(agent_id, data.draw(st.sampled_from(sorted(children))), "wake up")
                elif action == "report" and agent.kind == "continuable":
                    core.report(agent_id, "come back and spawn more")
                elif action == "end":
                    break
            except BudgetExceededError:
                admitted["refusals"] += 1
            except SubagentdError:
                pass  # a rule or a quota (not what this test is about)
        if registry.get(agent_id) is agent and agent.turn is not None:
            tokens = data.draw(st.integers(0, TOKENS_PER_TURN))
            core.svc.host.finish_turn(
                TurnEndParams(
                    agent_id=agent_id,
                    turn_id=agent.turn.turn_id,
                    reason="completed",
                    usage=Usage(input_tokens=tokens),
                )
            )
            admitted["tokens"] += tokens
            if admitted["running_at_limit"] < 0 and admitted["tokens"] >= limit:
                admitted["running_at_limit"] = sum(a.turn is not None for a in registry)
    return admitted


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    spawns=st.integers(1, 12),
    turns=st.integers(1, 30),
    tokens=st.integers(1, 400),
)
def test_a_hostile_model_never_passes_its_trees_budget(data, spawns, turns, tokens):
    core = CoreHost(tree_max_spawns=spawns, tree_max_turns=turns, tree_max_tokens=tokens)
    core.open("root")
    core.svc.host.begin_turn("root", ["run away"])
    admitted = play(data, core, "root", steps=300, limit=tokens)
    info = core.svc.records.get("root")
    assert admitted["spawns"] <= spawns
    assert info.tree_usage.spawns == admitted["spawns"]
    assert info.tree_usage.turns <= turns
    assert info.tree_usage.input_tokens == admitted["tokens"]
    # tokens pass the limit by at most what the turns running when it was reached report: the
    # turn that reached it brought less than one turn's worth above the limit
    if admitted["running_at_limit"] >= 0:
        bound = tokens - 1 + TOKENS_PER_TURN * (1 + admitted["running_at_limit"])
        assert info.tree_usage.input_tokens <= bound


def test_the_default_spawn_cap_stops_a_spawn_and_finish_loop_at_a_thousand():
    """Without budgets the loop below never ends (each child finishes, freeing its slot); with the
    default budget it stops at --tree-max-spawns."""
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["loop"])
    started = 0
    refused = None
    for n in range(5_000):
        try:
            core.svc.delegation.spawn_agent(
                "root", None, SpawnAgentArgs(label="l", prompt="p", child_id=f"c{n}")
            )
        except BudgetExceededError as exc:
            refused = exc
            break
        started += 1
        child = core.svc.agents.registry.get(f"c{n}")
        core.svc.host.finish_turn(
            TurnEndParams(agent_id=f"c{n}", turn_id=child.turn.turn_id, reason="completed")
        )
    assert started == 1_000
    assert refused is not None and refused.data["budget"] == "spawns"
