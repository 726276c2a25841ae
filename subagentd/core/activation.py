"""Activation: a stored session becomes live in this process (open, spawn, cold resume)."""

from __future__ import annotations

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.leases import Leases
from subagentd.core.recovery import Recovery
from subagentd.core.registry import LiveAgent
from subagentd.core.stamps import mint
from subagentd.errors import StateInvalidError
from subagentd.schema.messages import Descriptor
from subagentd.schema.records import SessionRecord


class Activator:
    """Makes a session live: its lease taken, a turn its dead process left open ended first."""

    def __init__(self, agents: Agents, leases: Leases, recovery: Recovery) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.leases = leases
        self.recovery = recovery

    def activate(
        self,
        agent_id: str,
        parent_id: str | None,
        kind: str,
        depth: int,
        parked: bool,
        resume: bool = False,
        tools: frozenset[str] | None = None,
        stored: SessionRecord | None = None,
        descriptor: Descriptor | None = None,
    ) -> LiveAgent:
        """`stored`: the session's row as the caller read it in this transaction, having found
        its lease not live in another process (a cold resume): neither is read again; nor is
        `descriptor`, the resumed session's, which its next turn/start carries."""
        if stored is None:
            if self.leases.live_elsewhere(agent_id):
                raise StateInvalidError(texts.LIVE_ELSEWHERE.format(id=agent_id))
            stored = self.store.get_session(agent_id)
        # the last turn's end as storage has it (what a rebuilt registry would read, too)
        last_reason, last_output = (
            (stored.last_reason, stored.last_output) if stored else (None, None)
        )
        if stored is not None and stored.open_turn_id is not None:
            self.recovery.recover_turn(agent_id, stored.open_turn_id)  # its process died mid-turn
            last_reason, last_output = "error", None
        activation_id = mint()
        ancestry = self.registry.live_ancestry(activation_id, parent_id)
        self.store.put_lease(
            agent_id,
            self.agents.owner,
            "idle",
            self.agents.settings.clock.wall() + self.agents.settings.lease_ttl,
            activation_id=activation_id,
            ancestry=" ".join(ancestry),
            kind=kind,
            resume=resume,
        )
        queued, parked_count = self.store.inbox_counts(agent_id)
        agent = LiveAgent(
            agent_id=agent_id,
            parent_id=parent_id,
            kind=kind,
            depth=depth,
            activation_id=activation_id,
            ancestry=ancestry,
            parked=parked,
            pending=queued + parked_count,
            resume=resume,
            last_reason=last_reason,
            last_output=last_output,
            tools=tools,
            owner_id=parent_id,
            lineage=self.agents.budgets.lineage(agent_id, parent_id),
            descriptor=descriptor if resume else None,
        )
        self.registry.add(agent)
        self.agents.record(
            agent_id, None, "activated", {"activation_id": activation_id, "resume": resume}
        )
        self.agents.status_changed(agent, save=False)  # put_lease wrote it as it is now
        return agent
