"""A model-based test of the scheduling rules, driving core/ directly.

Hypothesis runs random programs of host actions and tool calls against `CoreHost` (the real
Service on a SQLite file, timers fired by hand) and restarts it on the same file, while a model
of SEMANTICS.md predicts every outcome. After every step it checks: one open turn per agent and
turn/starts that never overlap; FIFO (each turn takes exactly the oldest waiting message, parked
ones included); an interrupt parks only what is queued, and every waking input (send_message,
host followup, wakeup report, settlement notice) unparks it, parked messages first; no live agent
is left idle with a waking input in its inbox (read from SQLite); only the
durable, live parent sends; interrupts follow the ancestry; settlement happens when, and only
when, nothing keeps a continuable child resident, with exactly one notice into its parent's
inbox; the inbox rows in SQLite are the ones the model expects, in order; and every status the
service reports matches the model. Small quotas are on, and the model predicts each refusal
(live children per parent, live agents per tree and in total, waiting messages per inbox, report
bytes per child) and that a refused request writes nothing. Small budgets are on too (a tree's
turns and spawns over its life, deadlines of some children on a clock the test moves): the model
predicts every budget refusal, which queued messages are held instead of run, and every turn a
passed deadline interrupts (and the deadline's notice), across restarts.

`HYPOTHESIS_PROFILE=long` runs many more and longer programs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from subagentd.core.settings import Settings
from subagentd.errors import BudgetExceededError, SubagentdError
from subagentd.schema.budgets import Budget
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import SpawnParams, TurnEndParams, TurnReason
from subagentd.schema.messages import Mode
from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost, FakeClock

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
PROFILE = (
    settings(
        max_examples=1500,
        stateful_step_count=80,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    if LONG
    else settings(
        max_examples=100,
        stateful_step_count=50,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
)
pytestmark = pytest.mark.timeout(3600 if LONG else 600)

REASONS: list[TurnReason] = ["completed", "aborted", "max-tokens", "refusal", "error"]
FIRST_LINE = {
    "completed": "Background subagent {id} finished and will do no further work unless you send it more.",
    "aborted": "Background subagent {id} was stopped before it finished.",
    "max-tokens": "Background subagent {id} ran out of room before it finished.",
    "refusal": "Background subagent {id} declined the task.",
    "error": "Background subagent {id} failed before it finished.",
    "deadline": "Background subagent {id} ran out of time: its deadline passed before it finished.",
}
MAX_DEPTH = 8
# Small quotas (SECURITY.md) so programs reach them; the model predicts every refusal.
QUOTAS = {
    "max_children": 3,
    "max_live_per_root": 5,
    "max_live": 8,
    "max_queued": 3,
    "report_budget": 25,  # bytes: two or three reports like "report-12" per activation
    "report_window": 1e9,  # one window for the whole program
}
# Small budgets of every tree (PROTOCOL.md 12), over its whole life and across restarts.
BUDGETS = {"tree_max_turns": 9, "tree_max_spawns": 4}
DEADLINES = [None, None, 20.0, 50.0, 200.0]  # a spawned child's own max_seconds
STATS: dict[str, int] | None = {} if os.environ.get("SUBAGENTD_SM_STATS") else None


def message_key(content: list[dict[str, Any]], source: dict[str, Any]) -> Any:
    """What identifies an inbox message in the model: its unique text, or a notice's sender."""
    if source["kind"] == "subagent-report":
        return ("report", content[1]["text"])
    if source["kind"] == "subagent-settled":
        return ("notice", source["sender_session_id"], content[0]["text"])
    return content[0]["text"]


@dataclass
class Agent:
    """The model of one session."""

    id: str
    parent: str | None
    kind: str  # "root" | "continuable" | "one-shot"
    depth: int
    live: bool = False
    activation: int = 0
    ancestry: frozenset[int] = frozenset()
    turn: str | None = None
    interrupted: bool = False  # the open turn was asked to stop
    parked: bool = False
    queue: list[Any] = field(default_factory=list)  # unclaimed messages, in acceptance order
    disposing: bool = False
    last_reason: str | None = None
    owner: str | None = None  # who keeps it resident and drains it: its parent, until adopted
    deadline: float | None = None  # its own budget's deadline (clock seconds)
    deadline_hit: bool = False  # its open turn was interrupted because a deadline passed


class SchedulingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="subagentd-sm-")
        self.path = os.path.join(self.dir, "model.db")
        self.restarts = 0
        self.clock = FakeClock()
        self.tree_turns: dict[str, int] = {}  # root id -> turns started in its tree
        self.tree_spawns: dict[str, int] = {}  # root id -> spawns in its tree
        self.core = self.new_core()
        self.agents: dict[str, Agent] = {}
        self.counter = 0
        self.activations = 0
        self.expected_rows: list[tuple[str, Any]] = []  # acceptances predicted in this step
        self.seen_position = 0
        self.force_order: list[str] = []  # interrupted turns, in the order their timers were set
        self.close_waiters: dict[str, int] = {}  # root -> agents/close calls not yet answered
        self.spent: dict[str, int] = {}  # live child -> report bytes in its budget window

    def teardown(self) -> None:
        try:
            self.core.store.conn.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def new_store(self) -> Any:
        return SqliteStore(self.path, clock=self.clock)

    def new_core(self) -> CoreHost:
        """A fresh service on the same file, as a new process: earlier owners count as dead."""
        if not hasattr(Settings(), "owner_alive"):  # before multi-process leases
            return CoreHost(self.new_store())
        owner = f"state-machine:{self.restarts}"
        return CoreHost(
            self.new_store(), owner=owner, owner_alive=lambda o: o == owner, **QUOTAS, **BUDGETS
        )

    # --- model helpers -------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def live(self) -> list[str]:
        return sorted(a.id for a in self.agents.values() if a.live)

    def running(self) -> list[str]:
        return sorted(a.id for a in self.agents.values() if a.turn is not None)

    def live_children(self, agent_id: str) -> list[Agent]:
        """The live agents `agent_id` owns: its live children, and those it adopted."""
        return [a for a in self.agents.values() if a.live and a.owner == agent_id]

    def leave(self, agent: Agent) -> None:
        """Not live any more; agents it still owns (below a disposed one-shot) go to its owner."""
        agent.live = False
        for child in self.live_children(agent.id):
            child.owner = agent.owner

    def lineage(self, agent: Agent) -> list[str]:
        """The durable ancestors of an agent, nearest first."""
        ancestors: list[str] = []
        while agent.parent is not None and agent.parent not in ancestors:
            ancestors.append(agent.parent)
            agent = self.agents[agent.parent]
        return ancestors

    def top(self, agent: Agent) -> str:
        """The durable root of its tree (whose budget binds it)."""
        lineage = self.lineage(agent)
        return lineage[-1] if lineage else agent.id

    def deadline_passed(self, agent: Agent) -> bool:
        """Whether a deadline of the agent's lineage (itself and its ancestors) has passed."""
        for member in [agent.id, *self.lineage(agent)]:
            deadline = self.agents[member].deadline
            if deadline is not None and self.clock.now >= deadline:
                return True
        return False

    def can_start(self, agent: Agent, spawn: bool = False) -> bool:
        """A turn (and with `spawn`, a spawn) may start in the agent's lineage (its budgets)."""
        root = self.top(agent)
        if self.tree_turns.get(root, 0) >= BUDGETS["tree_max_turns"]:
            return False
        if spawn and self.tree_spawns.get(root, 0) >= BUDGETS["tree_max_spawns"]:
            return False
        return not self.deadline_passed(agent)

    def root_of(self, agent: Agent) -> Agent:
        seen = {agent.id}
        while agent.owner is not None and self.agents[agent.owner].live:
            if agent.owner in seen:
                break
            agent = self.agents[agent.owner]
            seen.add(agent.id)
        return agent

    def draining(self, *agents: Agent | None) -> bool:
        return any(a is not None and a.live and self.root_of(a).disposing for a in agents)

    def activate(self, agent: Agent) -> None:
        self.activations += 1
        ancestry = {self.activations}
        parent = self.agents.get(agent.parent) if agent.parent else None
        seen: set[str] = set()
        while parent is not None and parent.live and parent.id not in seen:
            seen.add(parent.id)
            ancestry.add(parent.activation)
            parent = self.agents.get(parent.owner) if parent.owner else None
        agent.live, agent.activation, agent.ancestry = True, self.activations, frozenset(ancestry)
        agent.owner = agent.parent
        agent.disposing, agent.last_reason, agent.interrupted = False, None, False

    def room_for(self, parent: Agent | None) -> bool:
        """The activation quotas: in total, below the (live) parent, in the parent's tree."""
        live = [a for a in self.agents.values() if a.live]
        if len(live) >= QUOTAS["max_live"]:
            return False
        if parent is None or not parent.live:
            return True
        if len(self.live_children(parent.id)) >= QUOTAS["max_children"]:
            return False
        root = self.root_of(parent)
        return sum(self.root_of(a) is root for a in live) < QUOTAS["max_live_per_root"]

    def inbox_has_room(self, agent: Agent) -> bool:
        return len(agent.queue) < QUOTAS["max_queued"]

    def accept(self, agent_id: str, key: Any) -> None:
        """Every accepted message is a waking input: it unparks the inbox (SEMANTICS.md 1)."""
        self.agents[agent_id].parked = False
        self.agents[agent_id].queue.append(key)
        self.expected_rows.append((agent_id, key))

    def end_model_turn(self, agent: Agent, reason: str) -> None:
        if agent.deadline_hit and reason == "aborted":  # its notice is the deadline's
            reason = "deadline"
        agent.turn, agent.interrupted, agent.last_reason = None, False, reason
        agent.deadline_hit = False

    # --- running an action and reading what it caused --------------------------------------

    def attempt(self, action, *args: Any) -> tuple[Any, SubagentdError | None]:
        try:
            return action(*args), None
        except SubagentdError as exc:
            return None, exc

    def expect(self, outcome: tuple[Any, SubagentdError | None], allowed: bool, what: str) -> Any:
        result, error = outcome
        if STATS is not None:
            key = what.split(" ")[0] + (" ok" if allowed else " refused")
            if isinstance(error, BudgetExceededError):
                key += f" by the {error.budget} budget"
            elif error is not None and error.code == Code.OVERLOADED:
                key += " by a quota"
            STATS[key] = STATS.get(key, 0) + 1
        if allowed:
            assert error is None, f"{what} was refused: {error.code} {error.message}"
        else:
            assert error is not None, f"{what} was allowed, the model refuses it: {result}"
        return result

    def process_notes(self) -> None:
        """Apply every notification in emission order, checking each against the model."""
        notes, self.core.notes = self.core.notes, []
        for method, params in notes:
            agent = self.agents.get(params.get("agent_id", ""))
            assert agent is not None, f"{method} for an unknown agent {params}"
            if method == "turn/start":
                self.on_turn_start(agent, params)
            elif method == "turn/interrupt":
                assert agent.live and agent.turn == params["turn_id"], (agent, params)
                assert not agent.interrupted, f"{agent.id}: turn/interrupt twice for one turn"
                agent.interrupted = True
                self.force_order.append(params["turn_id"])
            elif method == "agent/settled":
                self.on_settled(agent, params["reason"])
            elif method == "$closed":
                # Every agents/close of one root is answered when that root has left.
                assert self.close_waiters.get(agent.id, 0) > 0, f"{agent.id} closed twice"
                self.close_waiters[agent.id] -= 1
                if agent.live:
                    assert agent.disposing and agent.turn is None, agent
                    assert not self.live_children(agent.id), f"{agent.id} left with live children"
                    self.leave(agent)
            else:
                raise AssertionError(f"unexpected notification {method} {params}")

    def on_turn_start(self, agent: Agent, params: dict[str, Any]) -> None:
        assert agent.live, f"turn/start for {agent.id}, which is not live"
        assert agent.turn is None, f"turn/start for {agent.id} while turn {agent.turn} is open"
        assert not agent.disposing, f"turn/start for {agent.id} while it is being disposed"
        assert not agent.parked, f"turn/start for {agent.id} while its inbox is parked"
        keys = [message_key(m["content"], m["source"]) for m in params["messages"]]
        assert len(keys) == 1, f"{agent.id}: one message per turn, got {keys}"
        assert agent.queue and keys[0] == agent.queue[0], (
            f"{agent.id} started {keys[0]!r}; FIFO says {agent.queue[:1]!r} (queue {agent.queue})"
        )
        assert self.can_start(agent), f"{agent.id} started a turn past its budget"
        agent.queue.pop(0)
        agent.turn = params["turn_id"]
        root = self.top(agent)
        self.tree_turns[root] = self.tree_turns.get(root, 0) + 1
        live = self.core.svc.agents.registry.get(agent.id)
        assert live is not None, f"{agent.id} started a turn but is not live"
        assert params["activation_id"] == live.activation_id

    def on_settled(self, agent: Agent, reason: str) -> None:
        assert agent.live, f"agent/settled for {agent.id}, which is not live"
        assert agent.kind != "root", f"root {agent.id} settled"
        assert agent.turn is None, f"{agent.id} settled with turn {agent.turn} open"
        if agent.kind == "continuable" or agent.disposing:  # a one-shot goes after its one turn
            assert not self.live_children(agent.id), f"{agent.id} settled owning live children"
        if agent.disposing:
            expected: str | None = "closed"
        elif agent.kind == "one-shot":
            expected = agent.last_reason
        else:
            assert not agent.queue, f"{agent.id} settled with waiting messages {agent.queue}"
            expected = agent.last_reason or "completed"
        assert reason == expected, f"{agent.id} settled with {reason!r}, expected {expected!r}"
        self.leave(agent)
        self.spent.pop(agent.id, None)  # the report budget goes with the activation
        if not agent.queue:
            agent.parked = False
        parent = self.agents.get(agent.parent) if agent.parent else None
        if agent.kind == "continuable" and parent is not None:
            # closing and one-shot parents only record it (a one-shot never runs another turn)
            if not (parent.live and parent.disposing) and parent.kind != "one-shot":
                first = FIRST_LINE[agent.last_reason or "completed"].format(id=agent.id)
                self.accept(parent.id, ("notice", agent.id, first))

    def check_rows(self, as_set: bool = False) -> None:
        """The inbox rows written in this step are exactly the acceptances the model predicted."""
        rows = self.core.store.conn.execute(
            "SELECT position, session_id, content, source FROM inbox WHERE position > ?"
            " ORDER BY position",
            (self.seen_position,),
        ).fetchall()
        got = [(r[1], message_key(json.loads(r[2]), json.loads(r[3]))) for r in rows]
        expected, self.expected_rows = self.expected_rows, []
        if as_set:
            assert sorted(map(repr, got)) == sorted(map(repr, expected)), (got, expected)
        else:
            assert got == expected, f"inbox rows {got}, expected {expected}"
        if rows:
            self.seen_position = rows[-1][0]

    def step(self, action, *args: Any) -> tuple[Any, SubagentdError | None]:
        outcome = self.attempt(action, *args)
        self.core.svc.commit()  # as the server does: the clock budgets read is the commit's
        self.process_notes()
        return outcome

    # --- rules ---------------------------------------------------------------------------

    @initialize(children=st.integers(0, 3))
    def first_root(self, children: int) -> None:
        self.open_new_root()
        for _ in range(children):
            self.spawn_by(self.agents["r1"], one_shot=False)

    @precondition(lambda self: sum(a.kind == "root" for a in self.agents.values()) < 3)
    @rule()
    def open_new_root(self) -> None:
        root = Agent(self.fresh("r"), None, "root", 0)
        allowed = self.room_for(None)
        if allowed:  # refused by a quota, the session is never created: the model has none
            self.agents[root.id] = root
            self.activate(root)
        self.expect(self.step(self.core.open, root.id), allowed, f"open {root.id}")

    @precondition(lambda self: any(a.kind == "root" for a in self.agents.values()))
    @rule(data=st.data())
    def reopen_root(self, data) -> None:
        roots = sorted(a.id for a in self.agents.values() if a.kind == "root")
        closed = [r for r in roots if not self.agents[r].live]
        root = self.agents[data.draw(st.sampled_from(closed if closed else roots))]
        allowed = not root.live and self.room_for(None)
        if allowed:
            self.activate(root)
        self.expect(self.step(self.core.open, root.id), allowed, f"open {root.id}")

    @precondition(lambda self: self.live())
    @rule(
        data=st.data(),
        one_shot=st.integers(0, 3).map(lambda n: n == 0),
        seconds=st.sampled_from(DEADLINES),
    )
    def spawn(self, data, one_shot: bool, seconds: float | None) -> None:
        self.spawn_by(self.agents[data.draw(st.sampled_from(self.live()))], one_shot, seconds)

    def live_one_shots(self) -> list[str]:
        return sorted(a.id for a in self.agents.values() if a.live and a.kind == "one-shot")

    @precondition(lambda self: self.live_one_shots())
    @rule(data=st.data(), end_it=st.booleans())
    def spawn_below_a_one_shot(self, data, end_it: bool) -> None:
        """A continuable child of a one-shot outlives it: its owner adopts it (PROTOCOL.md 8)."""
        one_shot = self.agents[data.draw(st.sampled_from(self.live_one_shots()))]
        self.spawn_by(one_shot, False)
        if end_it and one_shot.turn is not None:
            params = TurnEndParams(agent_id=one_shot.id, turn_id=one_shot.turn, reason="completed")
            self.end_model_turn(one_shot, "completed")
            self.expect(
                self.step(self.core.svc.host.finish_turn, params), True, f"turns/end {params}"
            )

    def spawn_by(self, caller: Agent, one_shot: bool, seconds: float | None = None) -> None:
        child_id = self.fresh("c")
        prompt = self.fresh("prompt-")
        mode: Mode = "one-shot" if one_shot else "continuable"
        allowed = (
            not self.draining(caller)
            and not caller.disposing
            and caller.depth < MAX_DEPTH
            and self.room_for(caller)
            and self.can_start(caller, spawn=True)  # the budgets come after every quota
        )
        if allowed:
            child = Agent(child_id, caller.id, mode, caller.depth + 1)
            if seconds is not None:
                child.deadline = self.clock.now + seconds
            self.agents[child_id] = child
            self.activate(child)
            self.accept(child_id, prompt)
            root = self.top(child)
            self.tree_spawns[root] = self.tree_spawns.get(root, 0) + 1
        params = SpawnParams(
            caller=caller.id,
            child_id=child_id,
            label="task",
            prompt=prompt,
            mode=mode,
            budget=None if seconds is None else Budget(max_seconds=seconds),
        )
        self.expect(self.step(self.core.svc.host.spawn, params), allowed, f"spawn {params}")

    def senders(self) -> list[str]:
        return sorted(
            {a.parent for a in self.agents.values() if a.parent and a.kind == "continuable"}
            & set(self.live())
        )

    @precondition(lambda self: self.senders())
    @rule(data=st.data(), stale=st.integers(0, 5).map(lambda n: n == 0))
    def send_message_from_a_parent(self, data, stale: bool) -> None:
        caller_id = data.draw(st.sampled_from(self.senders()))
        children = sorted(a.id for a in self.agents.values() if a.parent == caller_id)
        self.send_message(caller_id, data.draw(st.sampled_from(children)), stale)

    @precondition(lambda self: self.agents)
    @rule(data=st.data(), stale=st.integers(0, 5).map(lambda n: n == 0))
    def send_message_from_anyone(self, data, stale: bool) -> None:
        ids = sorted(self.agents)
        caller_id = data.draw(st.sampled_from(ids))
        self.send_message(caller_id, data.draw(st.sampled_from([*ids, "nobody"])), stale)

    def send_message(self, caller_id: str, target_id: str, stale: bool) -> None:
        caller, target = self.agents[caller_id], self.agents.get(target_id)
        activation = "not-current" if stale else None
        text = self.fresh("send-")
        caller_ok = caller.live and not stale
        if self.draining(caller, target):
            allowed = False
        else:
            allowed = (
                target is not None
                and caller_ok
                and target.parent == caller_id
                and target.kind == "continuable"
            )
        if allowed:  # the quotas come after every rule
            assert target is not None
            allowed = (
                self.inbox_has_room(target)
                and (target.live or self.room_for(caller))
                and self.can_start(target)
            )
        if allowed:
            assert target is not None
            if not target.live:
                self.activate(target)
            self.accept(target_id, text)
        outcome = self.step(self.core.send, caller_id, target_id, text, activation)
        self.expect(outcome, allowed, f"send_message {caller_id} -> {target_id} (stale={stale})")
        if allowed:  # only the durable, live parent ever sends
            assert target is not None
            assert target.parent == caller_id and caller.live

    @precondition(lambda self: self.agents)
    @rule(data=st.data(), stale=st.integers(0, 5).map(lambda n: n == 0))
    def interrupt_agent(self, data, stale: bool) -> None:
        ids = sorted(self.agents)
        callers = self.live() if data.draw(st.integers(0, 3)) > 0 else ids
        caller = self.agents[data.draw(st.sampled_from(callers or ids))]
        below = sorted(a.id for a in self.agents.values() if caller.id in self.lineage(a))
        if below and data.draw(st.booleans()):  # often a descendant
            target = self.agents[data.draw(st.sampled_from(below))]
        else:
            target = self.agents[data.draw(st.sampled_from(ids))]
        self.interrupt_by(caller, target, stale)

    def busy_children(self) -> list[str]:
        """Live continuable agents whose live parent may interrupt them and that have something
        pending (queued messages or live agents below): the interrupts that park, then wake."""
        return sorted(
            a.id
            for a in self.agents.values()
            if a.live
            and a.kind == "continuable"
            and not a.disposing
            and a.parent is not None
            and self.agents[a.parent].live
            and self.agents[a.parent].activation in a.ancestry
            and (a.queue or self.live_children(a.id))
        )

    @precondition(lambda self: self.busy_children())
    @rule(data=st.data())
    def interrupt_a_busy_child(self, data) -> None:
        target = self.agents[data.draw(st.sampled_from(self.busy_children()))]
        assert target.parent is not None  # a busy child has a parent
        self.interrupt_by(self.agents[target.parent], target, stale=False)

    def interrupt_by(self, caller: Agent, target: Agent, stale: bool) -> None:
        caller_ok = caller.live and not stale
        noop = not target.live or target.kind != "continuable" or target.disposing
        allowed = caller_ok and caller.id != target.id
        effective = allowed and not noop and caller.activation in target.ancestry
        if allowed and not noop and not effective:
            allowed = False
        if effective:
            target.parked = bool(target.queue)  # an interrupt parks only what is queued
            if target.turn is None:
                target.last_reason = "aborted"
        outcome = self.step(
            self.core.interrupt, caller.id, target.id, "not-current" if stale else None
        )
        self.expect(outcome, allowed, f"interrupt_agent {caller.id} -> {target.id}")

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    def report(self, data) -> None:
        running = self.running()
        pool = running if running and data.draw(st.integers(0, 3)) > 0 else sorted(self.agents)
        caller = self.agents[data.draw(st.sampled_from(pool))]
        parent = self.agents.get(caller.parent) if caller.parent else None
        output = self.fresh("report-")
        allowed = (
            caller.live
            and caller.kind == "continuable"
            and not caller.disposing
            and parent is not None
            and parent.live
        )
        if allowed:  # the quotas come after every rule: the parent's inbox, the report budget
            assert parent is not None
            spent = self.spent.get(caller.id, 0) + len(output)
            allowed = (
                self.inbox_has_room(parent)
                and self.can_start(parent)  # a wakeup starts a turn of the parent
                and spent <= QUOTAS["report_budget"]
            )
            if allowed:
                self.spent[caller.id] = spent
        if allowed:
            assert parent is not None
            self.accept(parent.id, ("report", output))
        self.expect(self.step(self.core.report, caller.id, output), allowed, f"report {caller.id}")

    @precondition(lambda self: self.running())
    @rule(data=st.data(), reason=st.sampled_from(REASONS), with_output=st.booleans())
    def end_turn(self, data, reason: TurnReason, with_output: bool) -> None:
        agent = self.agents[data.draw(st.sampled_from(self.running()))]
        assert agent.turn is not None  # it is running
        params = TurnEndParams(
            agent_id=agent.id,
            turn_id=agent.turn,
            reason=reason,
            output=self.fresh("out-") if with_output else None,
        )
        self.end_model_turn(agent, reason)
        self.expect(self.step(self.core.svc.host.finish_turn, params), True, f"turns/end {params}")

    @precondition(lambda self: self.agents)
    @rule(data=st.data())
    def host_followup(self, data) -> None:
        target = self.agents[data.draw(st.sampled_from(sorted(self.agents)))]
        text = self.fresh("followup-")
        allowed = (
            not self.draining(target) and self.inbox_has_room(target) and self.can_start(target)
        )
        if allowed:
            self.accept(target.id, text)
        outcome = self.step(self.core.svc.host.followup, target.id, text)
        self.expect(outcome, allowed, f"followup {target.id}")

    @rule()
    def fire_grace_timers(self) -> None:
        for turn_id in self.force_order:
            for agent in self.agents.values():
                if agent.turn == turn_id:
                    self.end_model_turn(agent, "aborted")
        self.force_order = []
        self.step(self.core.timers.fire_all)

    @rule(seconds=st.sampled_from([10.0, 60.0, 150.0]))
    def time_passes(self, seconds: float) -> None:
        """The clock moves on and the timers fire: every running turn whose lineage's deadline
        passed (and that no one interrupted yet) gets turn/interrupt, cause deadline, and parks
        what is queued; interrupted turns past their grace are force-ended as before."""
        for turn_id in self.force_order:
            for agent in self.agents.values():
                if agent.turn == turn_id:
                    self.end_model_turn(agent, "aborted")
        self.force_order = []
        self.clock.advance(seconds)
        expected = sorted(
            a.id
            for a in self.agents.values()
            if a.turn is not None and not a.interrupted and self.deadline_passed(a)
        )
        for agent_id in expected:
            agent = self.agents[agent_id]
            agent.parked = bool(agent.queue)
        notes_before = len(self.core.notes)
        assert notes_before == 0
        self.attempt(self.core.timers.fire_all)
        self.core.svc.commit()
        interrupts = sorted(
            p["agent_id"]
            for m, p in self.core.notes
            if m == "turn/interrupt" and p["cause"] == {"kind": "deadline"}
        )
        assert interrupts == expected, f"deadline interrupts {interrupts}, model {expected}"
        self.process_notes()
        for agent_id in expected:
            self.agents[agent_id].deadline_hit = True
        if STATS is not None:
            STATS["deadline interrupts"] = STATS.get("deadline interrupts", 0) + len(expected)

    @precondition(lambda self: any(a.kind == "root" and a.live for a in self.agents.values()))
    @rule(data=st.data(), really=st.integers(0, 3).map(lambda n: n == 0))
    def close_root(self, data, really: bool) -> None:
        if not really:  # closing ends a whole tree: keep it rarer than the other rules
            return
        live_roots = sorted(a.id for a in self.agents.values() if a.kind == "root" and a.live)
        root = self.agents[data.draw(st.sampled_from(live_roots))]
        # The root and every live agent below it through live parents start draining.
        for agent in self.agents.values():
            if agent.live and self.root_of(agent) is root:
                agent.disposing = True

        self.close_waiters[root.id] = self.close_waiters.get(root.id, 0) + 1

        def done(root_id: str = root.id) -> None:
            self.core.notes.append(("$closed", {"agent_id": root_id}))

        self.expect(
            self.step(self.core.svc.host.close_root, root.id, done), True, f"close {root.id}"
        )

    @rule()
    def restart(self) -> None:
        self.core.store.commit()
        self.core.store.conn.close()
        for agent in sorted(self.agents.values(), key=lambda a: a.id):
            if (
                agent.turn is not None
                and agent.kind == "continuable"
                and agent.parent
                and self.agents[agent.parent].kind != "one-shot"
            ):
                first = FIRST_LINE["error"].format(id=agent.id)
                self.accept(agent.parent, ("notice", agent.id, first))
            agent.live, agent.turn, agent.interrupted, agent.disposing = False, None, False, False
            agent.deadline_hit = False
        self.force_order = []
        self.close_waiters = {}
        self.spent = {}
        self.restarts += 1
        self.core = self.new_core()
        assert not self.core.notes, self.core.notes
        self.check_rows(as_set=True)
        # Recovery notices are accepted in no particular order: take the stored order.
        rows = self.core.store.conn.execute(
            "SELECT session_id, content, source FROM inbox WHERE state IN ('queued', 'parked')"
            " ORDER BY position"
        ).fetchall()
        stored: dict[str, list[Any]] = {}
        for session_id, content, source in rows:
            stored.setdefault(session_id, []).append(
                message_key(json.loads(content), json.loads(source))
            )
        for agent in self.agents.values():
            assert sorted(map(repr, agent.queue)) == sorted(map(repr, stored.get(agent.id, [])))
            agent.queue = stored.get(agent.id, [])

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def inbox_rows_match_the_model(self) -> None:
        self.check_rows()

    @invariant()
    def statuses_and_counts_match_the_model(self) -> None:
        for agent in self.agents.values():
            info = self.core.svc.records.get(agent.id)
            status = "running" if agent.turn else "idle" if agent.live else "ready"
            assert info.status == status, f"{agent.id}: service {info.status}, model {status}"
            waiting = len(agent.queue)
            expected = (0, waiting) if agent.parked else (waiting, 0)
            assert (info.queued, info.parked) == expected, (
                f"{agent.id}: queued/parked {(info.queued, info.parked)}, model {expected}"
            )
            live = self.core.svc.agents.registry.get(agent.id)
            assert (live is not None) == agent.live, f"{agent.id}: registry vs model"
            if live is not None:
                assert (live.turn.turn_id if live.turn else None) == agent.turn

    @invariant()
    def closing_roots_are_answered_when_they_leave(self) -> None:
        for root_id, waiting in self.close_waiters.items():
            assert waiting == 0 or self.agents[root_id].live, f"{root_id} left unanswered"

    @invariant()
    def no_live_agent_holds_waking_input_without_a_turn(self) -> None:
        """Liveness (SEMANTICS.md section 1), read from the service itself: a live agent that is
        not draining and has no open turn has no queued (waking) message in its SQLite inbox;
        only messages parked by an interrupt may wait there."""
        waiting = dict(
            self.core.store.conn.execute(
                "SELECT session_id, count(*) FROM inbox WHERE state = 'queued' GROUP BY session_id"
            ).fetchall()
        )
        for live in self.core.svc.agents.registry:
            if live.held_by is not None:  # a spent budget holds it: the model must agree
                assert not self.can_start(self.agents[live.agent_id]), f"{live.agent_id} held"
                if STATS is not None:
                    STATS["held by a budget (agent-steps)"] = (
                        STATS.get("held by a budget (agent-steps)", 0) + 1
                    )
                continue
            if live.turn is None and not live.disposing:
                assert not waiting.get(live.agent_id), (
                    f"{live.agent_id} is live and idle with {waiting[live.agent_id]} waking"
                    " message(s) in its inbox"
                )
                if live.pending:
                    assert live.parked, f"{live.agent_id} idles with unparked messages"

    @invariant()
    def nothing_idles_that_should_run_or_settle(self) -> None:
        for agent in self.agents.values():
            if not agent.live or agent.disposing or agent.turn is not None:
                continue
            if agent.queue and not agent.parked and self.can_start(agent):
                raise AssertionError(f"{agent.id} is idle with runnable messages {agent.queue}")
            if agent.kind == "continuable":
                assert agent.queue or self.live_children(agent.id), (
                    f"{agent.id} is live and idle with nothing keeping it resident"
                )


TestScheduling = SchedulingMachine.TestCase
TestScheduling.settings = PROFILE


class PostgresSchedulingMachine(SchedulingMachine):
    """The same programs on PostgreSQL (tests/pg.py): a new database per program, a new store on
    it per restart (the old one's connections dropped as a killed process's would be)."""

    def __init__(self) -> None:
        from tests.pg import shared_server

        self.server = shared_server()
        self.database = self.server.new_database()
        super().__init__()

    def new_store(self) -> Any:
        from subagentd.storage.postgres.store import PostgresStore
        from tests.pg import release

        if hasattr(self, "core"):
            release(self.core.store)
        return PostgresStore(self.server.url(self.database), clock=self.clock)

    def teardown(self) -> None:
        from tests.pg import release

        try:
            super().teardown()
        finally:
            release(self.core.store)
            self.server.drop_database(self.database)


TestSchedulingOnPostgres = PostgresSchedulingMachine.TestCase
TestSchedulingOnPostgres.settings = PROFILE

if STATS is not None:
    import atexit

    outcomes = STATS
    atexit.register(lambda: print(f"\nstate machine outcomes: {dict(sorted(outcomes.items()))}"))
