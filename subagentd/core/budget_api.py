"""The host's budget methods (PROTOCOL.md section 12): agents/budget, agents/stop, agents/resume."""

from __future__ import annotations

from subagentd.core.agents import Agents
from subagentd.core.leases import Leases
from subagentd.core.registry import LiveAgent
from subagentd.core.scheduling import Scheduler
from subagentd.core.settlement import Settlement
from subagentd.schema.budgets import (
    Budget,
    BudgetInfo,
    BudgetParams,
    BudgetResult,
    StopParams,
    StopResult,
)


class BudgetApi:
    """Trusted: the host sets limits (never cut to the ancestors', which still bind), stops and
    resumes subtrees. Each acts on the agents live here and signals those live elsewhere."""

    def __init__(
        self, agents: Agents, leases: Leases, scheduler: Scheduler, settlement: Settlement
    ) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.budgets = agents.budgets
        self.leases = leases
        self.scheduler = scheduler
        self.settlement = settlement

    def set_budget(self, params: BudgetParams) -> BudgetResult:
        """Set (or drop) limits of an agent's own budget; agents it held start their queued
        turns, running turns follow the new deadline."""
        record = self.agents.require_session(params.agent_id)
        agent_id = record.id
        row = self.store.spending_rows([agent_id]).get(agent_id)
        self.budgets.set(
            agent_id, params.budget or Budget(), keep=row, remove=tuple(params.remove or ())
        )
        return self._result(agent_id, self._release(agent_id))

    def stop(self, params: StopParams) -> StopResult:
        """Hold the whole subtree: the flag is stored first (no turn starts under it, here or in
        another process), then every open turn is interrupted (cause `stop`) and every waiting
        queue parked, or cancelled with `queues: "clear"`."""
        record = self.agents.require_session(params.agent_id)
        agent_id = record.id
        self.store.set_stopped(agent_id, True)
        interrupted: list[str] = []
        cleared = 0
        for agent in self._below(agent_id):
            if params.queues == "clear":
                cleared += self._clear(agent)
            elif agent.pending:
                self.scheduler.set_parked(agent, True)
            if agent.turn is not None and not agent.turn.interrupted and not agent.disposing:
                self.scheduler.interrupt(agent, "stop", None)
                interrupted.append(agent.agent_id)
        for session_id in self._elsewhere(agent_id):
            # the process holding it interrupts its open turn (cause `stop`) and parks its queue
            live = self.store.live_record(session_id)
            if (
                live is not None
                and live.open_turn_id is not None
                and not live.interrupted
                and not live.disposing
            ):
                interrupted.append(session_id)
            self.leases.signal_elsewhere(session_id, "stop")
        return StopResult(
            agent_id=agent_id,
            interrupted=interrupted,
            cleared=cleared if params.queues == "clear" else None,
        )

    def resume(self, agent_id: str) -> BudgetResult:
        """Lift a stop: what waits below it (parked by the stop) runs again, in order."""
        record = self.agents.require_session(agent_id)
        self.store.set_stopped(record.id, False)
        resumed = []
        for agent in self._below(record.id):
            self.scheduler.set_parked(agent, False)
            agent.held_by = None
            self.scheduler.pump(agent)
            if agent.turn is not None:
                resumed.append(agent.agent_id)
        # elsewhere: an inbox signal unparks and starts what waits there
        return self._result(record.id, resumed + self._release(record.id, "inbox"))

    # --- helpers --------------------------------------------------------------------------

    def _below(self, agent_id: str) -> list[LiveAgent]:
        """Agents live here whose lineage holds `agent_id` (itself included)."""
        return [agent for agent in self.registry if agent_id in agent.lineage]

    def _clear(self, agent: LiveAgent) -> int:
        """Cancel what waits in the agent's inbox; returns how many."""
        waiting = self.store.waiting_messages(agent.agent_id)
        for message in waiting:
            self.store.cancel_message(message.message_id)
            self.agents.record(
                agent.agent_id, None, "message_cancelled", {"message_id": message.message_id}
            )
        agent.pending = 0
        self.scheduler.set_parked(agent, False)
        if agent.turn is None:
            self.settlement.maybe_settle(agent)  # nothing left: it may settle now
        return len(waiting)

    def _release(self, agent_id: str, signal: str = "budget") -> list[str]:
        """Held agents below start; running turns follow the deadline as it is now, here and in
        the processes holding the rest of the subtree (Scheduler.take_signals)."""
        resumed = self.scheduler.release(agent_id)
        self.scheduler.rearm_deadlines()
        for session_id in self._elsewhere(agent_id):
            self.leases.signal_elsewhere(session_id, signal)
        return resumed

    def _elsewhere(self, agent_id: str) -> list[str]:
        """Sessions below `agent_id` (itself included) live in another process."""
        found = []
        for session_id in self.agents.elsewhere():
            record = self.store.get_session(session_id)
            if record is not None and agent_id in self.budgets.lineage(
                session_id, record.parent_id
            ):
                found.append(session_id)
        return found

    def _result(self, agent_id: str, resumed: list[str]) -> BudgetResult:
        row = self.store.spending_rows([agent_id]).get(agent_id)
        return BudgetResult(
            agent_id=agent_id,
            budget=self.budgets.info(row) or BudgetInfo(),
            tree_usage=self.budgets.tree(row),
            resumed=resumed or None,
        )
