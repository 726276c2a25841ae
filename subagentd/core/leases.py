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
        return self.owner_elsewhere(agent_id) is not None

    def owner_elsewhere(self, agent_id: str) -> str | None:
        """The owner id of the other process holding this session live, if one does."""
        lease = self.store.get_lease(agent_id)
        if lease is None or lease.owner == self.agents.owner or not self.holds(lease.owner):
            return None
        return lease.owner

    def signal_elsewhere(self, agent_id: str, kind: str, by: str | None = None) -> bool:
        """Queue a signal for the process holding `agent_id` live, if another one does; whether
        one did. The input itself (an inbox row) is written by the caller, in the same
        transaction; the owner takes the signal when its doorbell rings (storage/signals.py)
        and acts on it (Scheduler.take_signals). `kind`: inbox, or an interrupt's kind."""
        owner = self.owner_elsewhere(agent_id)
        if owner is None:
            return False
        self.store.put_signal(owner, agent_id, kind, by)
        return True

    def draining_elsewhere(self, agent_id: str) -> str | None:
        """For an agent live in another process: the topmost draining agent of its tree there
        (as that process recorded it in its leases), or None when that process admits input."""
        record = self.store.live_record(agent_id)
        if record is None or not record.disposing:
            return None
        top, parent_id = agent_id, record.parent_id
        while parent_id is not None:
            parent = self.store.live_record(parent_id)
            if parent is None or not parent.disposing:
                break
            top, parent_id = parent_id, parent.parent_id
        return top

    def holds(self, owner: str) -> bool:
        """Whether another process's owner still holds its leases: its row is there, not fenced,
        not expired by the write transaction's clock, and its process not gone from this host.
        One that lapsed is fenced on the spot, so it can never act on its sessions again."""
        state = self.store.owner_state(owner)
        if state is None or state.fenced:
            return False
        expires_at = state.expires_at
        if not self.settings.owner_alive(owner):
            return not self.store.fence(owner, None)
        clock = self.store.clock()
        if expires_at > clock or not self.store.lapse_seen(expires_at, clock):
            return True  # unexpired, or expired while the database was not answering
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
