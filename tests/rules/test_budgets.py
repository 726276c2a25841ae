"""Budgets and usage (PROTOCOL.md section 12) as rules on core/: what is charged to whom, what is
refused before anything runs (with nothing written), what is held and released, deadlines.

Longer than ~300 lines on purpose: one rule per test over every entry point a budget guards
(spawn, send_message, report, agents/followup, turns/begin, a queued turn), kept in one module so
the matrix reads as a whole.
"""

from __future__ import annotations

import pytest

from subagentd.core import texts
from subagentd.core.settings import Settings
from subagentd.errors import BudgetExceededError
from subagentd.schema.budgets import Budget, BudgetInfo, BudgetParams, Held, StopParams, Usage
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import TurnEndParams, TurnReason
from tests.core_host import CoreHost, FakeClock, events_of, process, step

TABLES = ("sessions", "descriptors", "inbox", "events", "idempotency", "leases", "spending")


def counts(core: CoreHost) -> tuple[int, ...]:
    """Rows of every table a request may write (a refusal leaves them all as they were), and
    every spending row's counters."""
    conn = core.store.conn
    rows = tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES)
    spent = conn.execute(
        "SELECT session_id, own_turns, own_spawns, tree_turns, tree_spawns FROM spending"
        " ORDER BY session_id"
    ).fetchall()
    return rows + tuple(tuple(r) for r in spent)


def refused(core: CoreHost, action, *args, **kwargs) -> BudgetExceededError:
    before = counts(core)
    error = core.refusal(action, *args, **kwargs)
    assert isinstance(error, BudgetExceededError), error
    assert error.code == Code.OVERLOADED
    assert counts(core) == before
    return error


def end(core: CoreHost, agent_id: str, reason: TurnReason = "completed", **usage) -> None:
    turn_id = core.turn(agent_id)
    assert turn_id is not None, f"{agent_id} has no open turn"
    core.svc.host.finish_turn(
        TurnEndParams(
            agent_id=agent_id,
            turn_id=turn_id,
            reason=reason,
            usage=Usage(**usage) if usage else None,
        )
    )


def spent_text(agent: str, budget: str, spent, limit, left, unit: str) -> str:
    return (
        f'agent "{agent}" spent its {budget} budget: {spent} of {limit} {unit} used, {left} left'
        " (what its subagents spend counts against it); nothing more starts under it"
        " until the user raises the budget"
    )


def test_defaults_are_the_documented_ones():
    s = Settings()
    assert (s.tree_max_turns, s.tree_max_spawns, s.tree_max_tokens) == (10_000, 1_000, 0)
    assert (s.tree_max_cost, s.tree_max_seconds, s.cost_currency) == (0.0, 0.0, "")


def test_usage_is_stored_per_turn_and_summed_per_agent_and_per_tree():
    core = CoreHost(cost_currency="USD")
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    end(core, "g1", input_tokens=100, output_tokens=20, cost=0.5)
    end(core, "c1", input_tokens=7, output_tokens=3, cost=0.25)
    [turn_end] = [e for e in events_of(core, "g1") if e.type == "turn_end"]
    assert turn_end.data["usage"] == {"input_tokens": 100, "output_tokens": 20, "cost": 0.5}
    g1, c1, root = (core.svc.records.get(a) for a in ("g1", "c1", "root"))
    assert (g1.usage.input_tokens, g1.usage.cost, g1.usage.currency) == (100, 0.5, "USD")
    # c1's second turn is g1's settlement notice
    assert (c1.usage.turns, c1.usage.spawns, c1.usage.input_tokens) == (2, 1, 7)
    assert (c1.tree_usage.turns, c1.tree_usage.input_tokens, c1.tree_usage.cost) == (3, 107, 0.75)
    assert (root.usage.spawns, root.tree_usage.spawns, root.tree_usage.output_tokens) == (1, 2, 23)
    assert root.tree_usage.cost == 0.75
    usage = core.svc.stats().usage
    assert (usage.turns, usage.spawns, usage.input_tokens, usage.output_tokens) == (3, 2, 107, 23)
    assert (usage.cost, usage.currency) == (0.75, "USD")
    rows = core.svc.records.list_host(
        msgspec_list_params("root", scope="descendants", usage=True)
    ).agents
    assert [(r.id, r.usage.turns) for r in rows] == [("c1", 2), ("g1", 1)]


def msgspec_list_params(root: str, **params):
    from subagentd.schema.host_methods import ListParams

    return ListParams(root_id=root, **params)


def test_a_spawn_and_finish_loop_stops_at_the_trees_total_spawn_cap():
    core = CoreHost(tree_max_spawns=3)
    core.open("root")
    for n in range(3):
        core.spawn("root", f"c{n}")
        end(core, f"c{n}")  # settles: the live-children quota alone would free its slot
    error = refused(core, core.spawn, "root", "c3")
    assert error.message == spent_text("root", "spawns", 3, 3, 0, "spawns")
    assert error.data == {
        "reason": "budget",
        "budget": "spawns",
        "agent_id": "root",
        "limit": 3,
        "spent": 3,
        "left": 0,
    }


def test_a_childs_budget_is_cut_to_what_its_parent_has_left_and_counts_against_every_ancestor():
    core = CoreHost()
    core.open("root", budget=Budget(max_turns=10, max_spawns=5))
    core.spawn("root", "c1", budget=Budget(max_turns=100, max_spawns=100, max_tokens=50))
    # when c1's budget was set, root had 10 turns and 4 spawns left (c1's spawn counted)
    assert core.svc.records.get("c1").budget == BudgetInfo(
        max_turns=10, max_spawns=4, max_tokens=50
    )
    for n in range(4):
        core.spawn("c1", f"g{n}")
    error = refused(core, core.spawn, "c1", "g4")  # c1's own cap, nearest first
    assert (error.data["agent_id"], error.data["budget"]) == ("c1", "spawns")
    error = refused(core, core.spawn, "root", "c2")  # root's: 5 of 5, c1's four count too
    assert error.message == spent_text("root", "spawns", 5, 5, 0, "spawns")
    assert core.svc.records.get("root").tree_usage.turns == 5  # c1 and its four children


def test_every_entry_that_would_start_a_turn_is_refused_once_the_turns_are_spent():
    core = CoreHost()
    core.open("root", budget=Budget(max_turns=2))
    core.spawn("root", "c1")
    core.spawn("root", "c2")  # c1's and c2's first turns: 2 of 2
    text = spent_text("root", "turns", 2, 2, 0, "turns")
    error = refused(core, core.send, "root", "c1", "more")
    assert error.message == texts.NOT_DELIVERED.format(reason=text)
    error = refused(core, core.report, "c1", "found it")
    assert error.message == texts.REPORT_NOT_DELIVERED.format(reason=text)
    assert refused(core, core.svc.host.followup, "c1", "more").message == text
    assert refused(core, core.spawn, "root", "c3").message == text
    assert refused(core, core.svc.host.begin_turn, "root", ["hi"]).message == text


def test_a_queued_message_that_cannot_start_is_held_and_runs_when_the_host_raises_the_budget():
    core = CoreHost()
    core.open("root", budget=Budget(max_turns=2))
    core.spawn("root", "c1")
    core.send("root", "c1", "second")  # queued behind c1's first turn
    core.spawn("root", "c2")  # 2 of 2
    end(core, "c1")
    assert core.turn("c1") is None
    info = core.svc.records.get("c1")
    assert (info.queued, info.held) == (1, Held(budget="turns", agent_id="root"))
    assert core.svc.agents.registry.get("c1") is not None  # live, its message waits
    core.notes.clear()
    result = core.svc.budgets.set_budget(BudgetParams(agent_id="root", budget=Budget(max_turns=5)))
    assert result.resumed == ["c1"]
    assert core.texts_of_turns("c1") == [["second"]]
    assert core.svc.records.get("c1").held is None


def test_a_budget_removed_by_the_host_binds_no_more():
    core = CoreHost(tree_max_spawns=1)
    core.open("root")
    core.spawn("root", "c1")
    refused(core, core.spawn, "root", "c2")
    core.svc.budgets.set_budget(BudgetParams(agent_id="root", remove=["spawns"]))
    core.spawn("root", "c2")
    assert core.svc.records.get("root").budget == BudgetInfo(max_turns=10_000)


def test_tokens_overshoot_by_at_most_the_turns_running_when_the_limit_was_reached():
    core = CoreHost()
    core.open("root", budget=Budget(max_tokens=100))
    core.spawn("root", "c1")
    core.spawn("root", "c2")
    core.spawn("root", "c3")  # three turns run at once, none has reported yet
    for child in ("c1", "c2", "c3"):
        end(core, child, input_tokens=50, output_tokens=10)
    info = core.svc.records.get("root")
    assert info.tree_usage.input_tokens + info.tree_usage.output_tokens == 180  # 3 turns' worth
    assert core.turn("root") is not None  # c1's notice woke it at 60 tokens
    error = refused(core, core.spawn, "root", "c4")
    assert error.data == {
        "reason": "budget",
        "budget": "tokens",
        "agent_id": "root",
        "limit": 100,
        "spent": 180,
        "left": 0,
    }
    # the three notices are queued for root and held once its own turn ends
    end(core, "root")
    assert core.turn("root") is None
    assert core.svc.records.get("root").held == Held(budget="tokens", agent_id="root")


def test_cost_is_counted_in_the_deployments_currency_exactly():
    core = CoreHost(cost_currency="EUR")
    core.open("root", budget=Budget(max_cost=0.3))
    core.spawn("root", "c1")
    end(core, "c1", cost=0.1)
    core.spawn("root", "c2")
    end(core, "c2", cost=0.2)  # 0.1 + 0.2: exactly the limit (millionths, no float drift)
    error = refused(core, core.spawn, "root", "c3")
    assert error.message == spent_text("root", "cost", "0.3", "0.3", "0", "EUR")
    assert error.data["limit"] == "0.3" and error.data["spent"] == "0.3"


def deadline_host(tmp_path):
    clock = FakeClock()
    return process(str(tmp_path / "d.db"), clock, "p1"), clock


def test_a_running_turn_past_its_deadline_is_interrupted_and_its_parent_told_so(tmp_path):
    core, clock = deadline_host(tmp_path)
    step(core, core.open, "root")
    step(core, core.spawn, "root", "c1", budget=Budget(max_seconds=60))
    core.notes.clear()
    clock.advance(30)
    step(core, core.timers.fire_all)  # early (a timer may be): the deadline stands, re-armed
    assert core.take("turn/interrupt") == []
    clock.advance(31)
    step(core, core.timers.fire_all)
    [interrupt] = core.take("turn/interrupt", "c1")
    assert interrupt["cause"] == {"kind": "deadline"}
    step(core, end, core, "c1", reason="aborted")
    [settled] = core.take("agent/settled", "c1")
    assert settled["reason"] == "deadline"
    [start] = core.take("turn/start", "root")
    first = start["messages"][0]["content"][0]["text"]
    assert (
        first == "Background subagent c1 ran out of time: its deadline passed before it finished."
    )
    assert first == texts.SETTLED_FIRST_LINE["deadline"].format(id="c1")
    [turn_end] = [e for e in events_of(core, "c1") if e.type == "turn_end"]
    assert turn_end.data == {
        "turn_id": interrupt["turn_id"],
        "reason": "aborted",
        "cause": "deadline",
    }


def test_nothing_starts_under_a_passed_deadline_and_the_text_says_when(tmp_path):
    core, clock = deadline_host(tmp_path)
    step(core, core.open, "root", budget=Budget(max_seconds=10))
    clock.advance(12.5)
    error = refused(core, core.spawn, "root", "c1")
    deadline = core.svc.records.get("root").budget.deadline
    assert error.message == (
        f'the deadline of agent "root" passed at {deadline} (2.5 seconds ago, 0 left; it binds'
        " its subagents too); nothing more starts under it until the user extends it"
    )
    assert error.data["budget"] == "deadline" and error.data["limit"] == deadline


def test_stop_interrupts_every_turn_below_parks_the_queues_and_resume_runs_them(tmp_path):
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    core.send("c1", "g1", "later")  # queued behind g1's turn
    core.notes.clear()
    result = core.svc.budgets.stop(StopParams(agent_id="c1"))
    assert sorted(result.interrupted) == ["c1", "g1"]
    causes = {n["agent_id"]: n["cause"] for n in core.take("turn/interrupt")}
    assert causes == {"c1": {"kind": "stop"}, "g1": {"kind": "stop"}}
    error = refused(core, core.spawn, "c1", "g2")
    assert error.message == (
        'agent "c1" and everything below it were stopped by the user;'
        " nothing starts under it until the user resumes it"
    )
    end(core, "g1", reason="aborted")
    assert core.turn("g1") is None and core.svc.records.get("g1").parked == 1
    assert core.svc.records.get("root").budget.stopped is None  # the root is not stopped
    core.notes.clear()
    resumed = core.svc.budgets.resume("c1")
    assert "g1" in (resumed.resumed or [])
    assert core.texts_of_turns("g1") == [["later"]]


def test_stop_can_clear_the_queues_instead():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.send("root", "c1", "one")
    core.send("root", "c1", "two")
    result = core.svc.budgets.stop(StopParams(agent_id="c1", queues="clear"))
    assert (result.interrupted, result.cleared) == (["c1"], 2)
    assert core.svc.records.get("c1").queued == 0


@pytest.mark.parametrize(
    "budget, violation",
    [
        ("lots", '"budget" must be an object'),
        ({"max_turns": -1}, '"budget.max_turns" must be an integer from 0 to 9007199254740992'),
        ({"max_cost": "1"}, '"budget.max_cost" must be a number from 0 to 1000000000000'),
        ({"max_seconds": True}, '"budget.max_seconds" must be a number from 0 to 1000000000'),
    ],
)
def test_spawn_agents_budget_argument_is_validated_with_exact_texts(budget, violation):
    from subagentd.core.arguments import check_arguments
    from subagentd.errors import InvalidParamsError
    from subagentd.schema.tools import SpawnAgentArgs

    with pytest.raises(InvalidParamsError) as caught:
        check_arguments(SpawnAgentArgs, {"label": "x", "prompt": "y", "budget": budget})
    assert caught.value.message == f"invalid arguments: {violation}"


@pytest.mark.parametrize(
    "agent, violation",
    [
        ({"a2a": None}, 'missing required property "agent.a2a"'),
        ({}, 'missing required property "agent.a2a"'),
        ({"a2a": 5}, '"agent.a2a" must be a string'),
        ("far", '"agent" must be an object'),
    ],
)
def test_spawn_agents_agent_argument_is_validated_with_exact_texts(agent, violation):
    from subagentd.core.arguments import check_arguments
    from subagentd.errors import InvalidParamsError
    from subagentd.schema.tools import SpawnAgentArgs

    with pytest.raises(InvalidParamsError) as caught:
        check_arguments(SpawnAgentArgs, {"label": "x", "prompt": "y", "agent": agent})
    assert caught.value.message == f"invalid arguments: {violation}"


def test_spawn_agents_agent_argument_names_an_a2a_agent():
    from subagentd.core.arguments import check_arguments
    from subagentd.schema.messages import AgentChoice
    from subagentd.schema.tools import SpawnAgentArgs

    args = check_arguments(SpawnAgentArgs, {"label": "x", "prompt": "y", "agent": {"a2a": "far"}})
    assert args.agent == AgentChoice(a2a="far")


def test_spawn_agent_passes_its_budget_and_is_refused_like_agents_spawn():
    from subagentd.schema.tools import SpawnAgentArgs

    core = CoreHost(tree_max_spawns=1)
    core.open("root")
    args = SpawnAgentArgs(label="w", prompt="go", child_id="c1", budget=Budget(max_turns=2))
    core.svc.delegation.spawn_agent("root", None, args)
    assert core.svc.records.get("c1").budget == BudgetInfo(max_turns=2)
    error = refused(
        core, core.svc.delegation.spawn_agent, "root", None, SpawnAgentArgs(label="w", prompt="go")
    )
    assert error.message == spent_text("root", "spawns", 1, 1, 0, "spawns")


def test_every_budget_text_is_the_one_docs_semantics_fixes():
    from pathlib import Path

    doc = " ".join((Path(__file__).parents[2] / "docs" / "semantics.md").read_text().split())

    def documented(text: str) -> bool:
        return f"`{' '.join(text.split())}`" in doc

    def shown(template: str) -> str:  # `{x}` placeholders as the document writes them, `<x>`
        return template.replace("{", "<").replace("}", ">")

    assert documented(shown(texts.BUDGET_SPENT))
    assert documented(shown(texts.BUDGET_DEADLINE))
    assert documented(shown(texts.BUDGET_STOPPED))
    assert documented(shown(texts.SETTLED_FIRST_LINE["deadline"]))
    assert documented(texts.MUST_BE_OBJECT.format(name="budget"))
    assert documented(texts.MUST_BE_INTEGER.format(name="budget.<field>", low=0, high=2**53))
    assert documented(texts.MUST_BE_NUMBER.format(name="budget.<field>", low=0, high="<high>"))
    for unit in [*texts.BUDGET_UNITS.values(), texts.BUDGET_COST_UNIT]:
        assert documented(unit)


def test_a_child_spawned_to_finish_keeps_its_turn_through_a_close_of_its_root():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "steady", on_parent_close="finish")
    core.spawn("root", "plain")
    core.send("root", "steady", "after")  # queued: a draining agent starts no new turn
    assert core.svc.records.get("steady").on_parent_close == "finish"
    core.notes.clear()
    closed = []
    core.svc.host.close_root("root", lambda: closed.append(True))
    interrupted = {n["agent_id"] for n in core.take("turn/interrupt")}
    assert interrupted == {"plain"}  # the root has no open turn; steady's runs on
    end(core, "plain", reason="aborted")
    assert closed == [] and core.turn("steady") is not None
    core.end("steady", output="finished anyway")
    assert closed == [True]
    assert [n["reason"] for n in core.take("agent/settled", "steady")] == ["closed"]
    assert core.take("turn/start", "steady") == []
    assert core.svc.records.get("steady").queued == 1  # kept for its next activation


def test_shutdown_interrupts_a_finishing_child_too():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "steady", on_parent_close="finish")
    core.notes.clear()
    core.svc.settlement.shutdown(lambda: None)
    assert [n["agent_id"] for n in core.take("turn/interrupt")] == ["steady"]


def test_a_rebuild_after_a_lost_group_keeps_what_a_budget_held():
    core = CoreHost()
    core.open("root", budget=Budget(max_turns=2))
    core.spawn("root", "c1")
    core.send("root", "c1", "second")
    core.spawn("root", "c2")
    end(core, "c1")
    held = core.svc.agents.registry.get("c1").held_by
    assert held == Held(budget="turns", agent_id="root")
    core.svc.commit()
    core.svc.recovery.rebuild()
    assert core.svc.agents.registry.get("c1").held_by == held
    assert core.svc.agents.registry.get("c1").lineage == ("c1", "root")


def test_usage_sums_saturate_at_the_documented_ceilings_alike_on_both_backends():
    from subagentd.schema.budgets import COUNT_MAX, MONEY_MAX

    core = CoreHost(cost_currency="USD")
    core.open("root")
    core.spawn("root", "c1")
    most = Usage(input_tokens=COUNT_MAX, output_tokens=COUNT_MAX, cost=MONEY_MAX)
    lineage = core.svc.agents.registry.get("c1").lineage
    # 1,100 of the largest valid reports: 2^63 and more if summed unchecked
    step(core, lambda: [core.svc.agents.budgets.used(lineage, most) for _ in range(1100)])
    end(core, "c1", input_tokens=COUNT_MAX, output_tokens=1, cost=1.0)  # its group commits
    for agent in ("c1", "root"):
        tree = core.svc.records.get(agent).tree_usage
        assert (tree.input_tokens, tree.output_tokens, tree.cost) == (COUNT_MAX, COUNT_MAX, 1e12)
        assert type(tree.input_tokens) is int
    own = core.svc.records.get("c1").usage
    assert (own.input_tokens, own.output_tokens, own.cost) == (COUNT_MAX, COUNT_MAX, 1e12)
    usage = core.svc.stats().usage
    assert (usage.input_tokens, usage.output_tokens, usage.cost) == (COUNT_MAX, COUNT_MAX, 1e12)
    stored = core.store.conn.execute(
        "SELECT tree_input, tree_cost FROM spending WHERE session_id = 'root'"
    ).fetchone()
    assert tuple(stored) == (COUNT_MAX, 10**18)


def held_tree() -> CoreHost:
    """root > top (a budget of 3 turns) > pong, pang: pong's report is queued for top while top
    runs, then pang's first turn spends the last turn: the report waits for a turn of top that
    cannot start (a ping-pong a budget stopped)."""
    core = CoreHost()
    core.open("root")
    core.spawn("root", "top", label="ping", budget=Budget(max_turns=3))
    core.spawn("top", "pong", label="pong")
    core.report("pong", "pong")
    core.spawn("top", "pang", label="pang")
    for agent in ("top", "pong", "pang"):
        end(core, agent)
    top = core.svc.agents.registry.get("top")
    assert top is not None and top.turn is None
    assert top.held_by == Held(budget="turns", agent_id="top")
    return core


HELD_LINE = (
    "held by a budget, nothing more starts under them until it is raised: top (turns budget"
    " spent); the host raises a budget with agents/budget (agents/resume for a stopped tree)"
)


def test_a_tree_a_budget_holds_ends_a_wait_and_the_answer_names_the_budget():
    from subagentd.schema.tools import WaitAgentsArgs

    core = held_tree()
    args = WaitAgentsArgs(agent_ids=["top"], timeout_ms=60_000)
    answer = core.svc.delegation.wait_agents("root", None, args)  # answered now: nothing runs
    assert answer.blocks == ["none of the subagents waited for is still working", HELD_LINE]
    assert answer.still_working == []
    (top,) = answer.agents
    assert (top.status, top.held) == ("idle", Held(budget="turns", agent_id="top"))


def test_list_agents_and_agents_list_name_the_budget_that_holds_a_tree():
    from subagentd.schema.host_methods import ListParams

    core = held_tree()
    assert core.list("root").text == "top [idle, held: turns budget spent] — ping"
    assert core.list("root", "descendants").text == (
        "top [idle, held: turns budget spent] parent=root depth=1 — ping\n"
        "pong [ready, last turn completed] parent=top depth=2 — pong\n"
        "pang [ready, last turn completed] parent=top depth=2 — pang"
    )
    (row,) = core.svc.records.list_host(ListParams(root_id="root")).agents
    assert row.held == Held(budget="turns", agent_id="top")
    # raised: the row is plain again and the held turn runs
    core.svc.budgets.set_budget(BudgetParams(agent_id="top", budget=Budget(max_turns=5)))
    assert core.list("root").text == "top [running] — ping"


def test_a_working_task_whose_childs_tree_a_budget_holds_says_so():
    core = held_tree()
    output = {"child_id": "top", "text": "started subagent top"}
    task = core.svc.tasks.create("root", "top", "spawn_agent", output, None, None)
    assert core.svc.tasks.find("root", task.taskId).status_message == (
        "subagent top is held by a budget (turns budget spent); nothing more starts under it"
        " until it is raised: the host raises a budget with agents/budget (agents/resume for a"
        " stopped tree)"
    )
    (listed,), _ = core.svc.tasks.page("root", None)
    assert listed.status == "working" and listed.statusMessage.startswith("subagent top is held")
