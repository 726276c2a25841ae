"""The live registry: which agents are live now, their activations, ancestry and open turns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from subagentd.schema.budgets import Held
    from subagentd.schema.listing import Status
    from subagentd.schema.messages import Descriptor
    from subagentd.schema.runner import RunnerFailure

ORDINARY = "ordinary"
CONTINUABLE = "continuable"
ONE_SHOT = "one-shot"
KIND_OF_MODE = {"continuable": CONTINUABLE, "one-shot": ONE_SHOT}


@dataclass(slots=True)
class OpenTurn:
    turn_id: str
    interrupted: bool = False
    deadline: bool = False  # interrupted because a deadline passed (its notice says so)


@dataclass(slots=True, eq=False)
class LiveAgent:
    """One live agent and its current activation."""

    agent_id: str
    parent_id: str | None
    kind: str  # ORDINARY | CONTINUABLE | ONE_SHOT
    depth: int
    activation_id: str
    ancestry: tuple[str, ...]  # activation ids of itself and its live ancestors at activation (a
    # tuple: trees are shallow, so a scan is as fast as hashing and a third of a frozenset's size)
    turn: OpenTurn | None = None
    parked: bool = False
    pending: int = 0  # unclaimed inbox messages (queued or parked)
    disposing: bool = False
    resume: bool = False  # the next turn/start carries the descriptor (cold resume)
    last_reason: str | None = None
    last_output: str | None = None
    last_failure: RunnerFailure | None = None  # how its last turn's runner failed, if it did
    held: bool = False  # the --caller root: its input waits for the client, no turn starts
    tools: frozenset[str] | None = None  # its descriptor's tool_filter applied (None: all tools)
    owner_id: str | None = None  # who keeps it resident and drains it: its parent, until adopted
    lineage: tuple[str, ...] = ()  # itself and its durable ancestors, nearest first (budgets)
    held_by: Held | None = None  # the budget that keeps its queued input from starting a turn
    descriptor: Descriptor | None = None  # a cold resume's, as read then: its turn/start's resume
    asking: bool = False  # its turn waits for its parent's answer (core/questions.py)
    # the askers whose open questions to the person hold it, oldest first: itself, or agents
    # below it (core/asking_user.py)
    person: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        if self.turn is None:
            return "idle"
        return "waiting" if self.asking or self.person else "running"


class Registry:
    """Live agents by id, with the live-children index that keeps parents resident.

    Ownership follows the durable tree: when an agent leaves while agents below it are still live
    (a one-shot child is disposed after its turn), its nearest owner adopts them, so they keep
    that owner resident, are drained with its root, and stay reachable through its ancestry."""

    def __init__(self) -> None:
        self._agents: dict[str, LiveAgent] = {}
        self._children: dict[str, set[str]] = {}  # parent id -> ids of its live children
        self.lookup = self._agents.get  # by id, for loops over whole listings (no None check)
        # by id or None (None is never a key: no agent), the dict's own get, no wrapper call
        self.get: Callable[[str | None], LiveAgent | None] = self._agents.get  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self._agents)

    def __iter__(self) -> Iterator[LiveAgent]:
        return iter(list(self._agents.values()))

    def clear(self) -> None:
        self._agents.clear()
        self._children.clear()

    def has_live_children(self, agent: LiveAgent) -> bool:
        """Ownership: a live child keeps its parent resident."""
        return bool(self._children.get(agent.agent_id))

    def live_children(self, agent: LiveAgent) -> int:
        return len(self._children.get(agent.agent_id, ()))

    def live_ancestry(self, activation_id: str, parent_id: str | None) -> tuple[str, ...]:
        """Own activation plus every live ancestor's, walking owners until one is not live."""
        ids = [activation_id]
        seen = set()
        parent = self._agents.get(parent_id) if parent_id else None
        while parent is not None and parent.agent_id not in seen:
            seen.add(parent.agent_id)
            ids.append(parent.activation_id)
            parent = self._agents.get(parent.owner_id) if parent.owner_id else None
        return tuple(ids)

    def add(self, agent: LiveAgent) -> None:
        self._agents[agent.agent_id] = agent
        if agent.owner_id is not None:
            self._children.setdefault(agent.owner_id, set()).add(agent.agent_id)

    def remove(self, agent: LiveAgent) -> None:
        self._agents.pop(agent.agent_id, None)
        owner_id = agent.owner_id
        siblings = self._children.get(owner_id) if owner_id else None
        if siblings is not None:
            siblings.discard(agent.agent_id)
            if not siblings:
                del self._children[owner_id]  # type: ignore[arg-type]  # siblings found: owner_id is set
        orphans = self._children.pop(agent.agent_id, None) if owner_id is not None else None
        if orphans:  # adopted by the nearest owner (see the class doc)
            adopted = self._children.setdefault(owner_id, set())  # type: ignore[arg-type]  # orphans popped only when owner_id is set
            for child_id in orphans:
                child = self._agents.get(child_id)
                if child is not None:
                    child.owner_id = owner_id
                    adopted.add(child_id)

    def subtree(self, agent: LiveAgent) -> list[LiveAgent]:
        """Live agents below `agent` (through live children), deepest first."""
        order: list[LiveAgent] = []
        stack = [agent]
        seen = {agent.agent_id}
        while stack:
            current = stack.pop()
            for child_id in self._children.get(current.agent_id, ()):
                child = self._agents.get(child_id)
                if child is not None and child_id not in seen:
                    seen.add(child_id)
                    order.append(child)
                    stack.append(child)
        return list(reversed(order))

    def held_tree(self, agent_id: str) -> Held | None:
        """The budget that holds the live tree of `agent_id`: no agent of it runs a turn and one
        of them (itself first, then the deepest) has input a spent budget keeps from starting;
        None while any of it runs, or when nothing is held."""
        agent = self._agents.get(agent_id)
        if agent is None or agent.turn is not None:
            return None
        found = agent.held_by
        for below in self.subtree(agent):
            if below.turn is not None:
                return None
            if found is None:
                found = below.held_by
        return found

    def below(self, agent_id: str | None, ancestor_id: str) -> bool:
        """Whether `agent_id` is live and `ancestor_id` is above it through live owners."""
        agent = self._agents.get(agent_id) if agent_id is not None else None
        seen = set()
        while agent is not None and agent.owner_id is not None and agent.agent_id not in seen:
            if agent.owner_id == ancestor_id:
                return True
            seen.add(agent.agent_id)
            agent = self._agents.get(agent.owner_id)
        return False

    def root_of(self, agent: LiveAgent) -> LiveAgent:
        """The topmost live agent above `agent` through owners (itself when its owner is not live)."""
        seen = {agent.agent_id}
        while agent.owner_id and agent.owner_id in self._agents and agent.owner_id not in seen:
            agent = self._agents[agent.owner_id]
            seen.add(agent.agent_id)
        return agent
