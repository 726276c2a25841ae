"""Leases across processes sharing a database: who holds a session live, fencing, a lost lease."""

from __future__ import annotations

from subagentd.core.agents import Agents
from subagentd.core.report_rate import ReportRate
from subagentd.core.scheduling import Scheduler
from subagentd.schema.notifications import AgentSettled, AgentStatus


class Leases:
    """This process's owner id and its generations, and the validity of other processes' leases.

    Storage renews the owner row (at commit time and by its renewal thread); when another process
    fenced this one, storage calls `lease_lost` before the next write transaction runs."""

    def __init__(self, agents: Agents, scheduler: Scheduler, rate: ReportRate) -> None:
        self.agents = agents
        self.store = agents.store
        self.settings = agents.settings
        self.scheduler = scheduler
        self.rate = rate
        self._owner_base = agents.owner
        self._owner_generation = 1
        self.store.hold(agents.owner, self.settings.lease_ttl, self.lease_lost)

    def live_elsewhere(self, agent_id: str) -> bool:
        """Whether another subagentd process sharing the database holds this session live."""
        lease = self.store.get_lease(agent_id)
        return lease is not None and lease[0] != self.agents.owner and self.holds(lease[0])

    def holds(self, owner: str) -> bool:
        """Whether another process's owner still holds its leases: its row is there, not fenced,
        not expired by the write transaction's clock, and its process not gone from this host.
        One that lapsed is fenced on the spot, so it can never act on its sessions again."""
        state = self.store.owner_state(owner)
        if state is None or state[1]:
            return False
        expires_at = state[0]
        if not self.settings.owner_alive(owner):
            return not self.store.fence(owner, None)
        if expires_at > self.store.clock():
            return True
        return not self.store.fence(owner, expires_at)

    def lease_lost(self) -> None:
        """Another process fenced this one (it was stalled past the lease TTL) and may run its
        sessions now: every live agent is let go without another write to its session, the host
        is told (`agent/settled`, reason `lease-lost`), and the process carries on under a new
        owner id that holds nothing."""
        agents = self.agents
        lost = list(agents.registry)
        self.scheduler.rearm_grace({})  # no turn is interrupted here any more: all cancelled
        self.rate.clear()
        agents.registry.clear()
        self._owner_generation += 1
        agents.owner = f"{self._owner_base}#{self._owner_generation}"
        self.store.hold(agents.owner, self.settings.lease_ttl, self.lease_lost)
        for agent in lost:
            agents.emit("agent/settled", AgentSettled(agent_id=agent.agent_id, reason="lease-lost"))
            if self.settings.status_events:
                agents.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status="ready"))
        closing, agents.closing = agents.closing, {}
        for waiters in closing.values():
            for done in waiters:
                done()
