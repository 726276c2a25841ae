"""The service: core's composition root, and what wraps each request (transaction, idempotency)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import msgspec

from subagentd.core import texts
from subagentd.core.activation import Activator
from subagentd.core.agents import Agents
from subagentd.core.asking import Asking
from subagentd.core.asking_user import AskingUser
from subagentd.core.budget_api import BudgetApi
from subagentd.core.commits import COMMITS
from subagentd.core.delegation import Delegation
from subagentd.core.host_api import HostApi
from subagentd.core.host_records import HostRecords
from subagentd.core.leases import Leases
from subagentd.core.questions import Questions
from subagentd.core.recovery import Recovery
from subagentd.core.report_rate import ReportRate
from subagentd.core.resource_reads import in_subtree, last_report
from subagentd.core.settings import Settings, TimerService
from subagentd.core.settlement import Settlement
from subagentd.core.stamps import now
from subagentd.core.store import Store
from subagentd.core.tasks import TaskRules
from subagentd.core.tools import ToolRules
from subagentd.core.tracing import Tracing
from subagentd.core.waits import Waits
from subagentd.errors import IdempotencyConflictError
from subagentd.schema.records import IdempotencyRecord
from subagentd.schema.stats import CommitLatency, StatsResult

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

R = TypeVar("R", bound=msgspec.Struct)
Emit = Callable[[str, msgspec.Struct], None]  # a notification for the host: method, params


class Unattached:
    """The timers before the server attaches its own: nothing may be timed yet (start-up)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Callable[[], None]:
        raise RuntimeError("nothing can be timed before the server attaches its timers")


class Outlets(NamedTuple):
    """Where core's effects leave it: the host's notifications and the timed work. The server
    provides them (server/connection.py); until it does, notifications go nowhere."""

    emit: Emit
    timers: TimerService


UNATTACHED = Outlets(lambda method, params: None, Unattached())


class Service:
    """Everything subagentd decides; the server only translates the wire to these calls.

    It builds core's objects, each given its collaborators, and exposes them: the server calls
    `host` and `records` (the host API), `tools` (the four tools), `delegation` (spawn_agent,
    wait_agents, agents/wait_idle) with `waits`, `questions` (the ACP runner's permission
    questions), `recovery` (start-up, the
    heartbeat, a lost group), `settlement` (shutdown), `scheduler` (signals from other processes)
    and `agents` (the live state), and
    brackets each request with `transaction` and `commit` here."""

    def __init__(
        self, store: Store, settings: Settings | None = None, outlets: Outlets = UNATTACHED
    ) -> None:
        self.store = store
        self.settings = settings or Settings()
        self.agents = agents = Agents(store, outlets.emit, outlets.timers, self.settings)
        rate = ReportRate(self.settings)
        # Leases is built on the scheduler, Recovery on settlement: they are reached through
        # this service when called
        self.settlement = Settlement(agents, rate, self._signal_elsewhere, self._recover_children)
        self.scheduler = self.settlement.scheduler
        self.leases = Leases(agents, self.scheduler, rate)
        self.recovery = Recovery(agents, self.leases, self.scheduler, self.settlement, rate)
        activator = Activator(agents, self.leases, self.recovery)
        self.records = HostRecords(agents)
        self.host = HostApi(
            agents, self.leases, activator, self.scheduler, self.settlement, self.records
        )
        self.budgets = BudgetApi(agents, self.leases, self.scheduler, self.settlement)
        self.questions = Questions(agents, self.scheduler)
        self.tools = ToolRules(agents, self.leases, activator, self.scheduler, rate, self.questions)
        self.waits = Waits(agents)
        self.asking = Asking(agents, self.questions, self.waits)
        self.asking_user = AskingUser(agents, self.questions, self.waits)
        agents.questions_over = self._questions_over
        self.delegation = Delegation(agents, self.host, self.scheduler, self.waits)
        self.tasks = TaskRules(agents, self.delegation, self.tools, self.questions)  # MCP tasks
        self.recovery.after_rebuild = self.tasks.reload
        self.asking_user.task_answer = self.tasks.answer_input
        # The port's reads and effects of the live state, bound to what answers them (no call of
        # its own on a request's path): nothing outside core reaches the registry, the store or
        # the scheduler (tests/project/test_one_port.py).
        registry = agents.registry
        self.below = registry.below  # the ancestry rule: live `agent_id` below `ancestor_id`
        self.record = agents.record  # an event into an agent's transcript
        self.check_database_quota = agents.quotas.database  # QuotaExceededError past the bound
        self.take_signals = self.scheduler.take_signals  # what other processes signalled
        self.owner_elsewhere = self.leases.owner_elsewhere  # who holds a root live elsewhere
        self.begin_snapshot = agents.begin_snapshot  # requests read together share readings
        self.end_snapshot = agents.end_snapshot
        self.stored_session = store.get_session  # an agent's stored record (None: unknown)
        self.stored_descriptor = store.get_descriptor  # a child's descriptor (None: none)
        self.per_tree = store.per_tree  # the store takes one write lock per tree
        self.set_scope = store.set_scope  # the one tree the next request writes (None: any)
        self.timers = outlets.timers
        self.tracing = agents.tracing

    def _questions_over(self, agent_id: str, turn_id: str | None, why: str) -> None:
        """A turn interrupted or ended, or an agent gone: its questions end (both kinds)."""
        self.questions.agent_over(agent_id, turn_id, why)
        self.asking_user.agent_over(agent_id, turn_id, why)

    def attach(self, outlets: Outlets) -> None:
        """The server's outlets, once it runs (the service is loaded before the connection)."""
        self.agents.attach(outlets.emit, outlets.timers)
        self.timers = outlets.timers

    def reach_person_with(self, reaches: Callable[[str], bool]) -> None:
        """Whether a person can be asked for a root (ask_user): the server's connection says."""
        self.agents.person = reaches

    def trace_with(self, tracing: Tracing) -> None:
        """Spans from now on go to `tracing` (cli/tracing.py, before recovery)."""
        self.agents.tracing = self.tracing = tracing

    def close(self) -> None:
        """The last spans (a bounded wait), then the store's last commit and close."""
        self.agents.tracing.close()
        self.store.close()

    def emit(self, method: str, params: msgspec.Struct) -> None:
        """A notification for the host, through the server's outlet."""
        self.agents.emit(method, params)

    def watch(self, subscriptions: dict[str, list[str]]) -> None:
        """The resource URIs subscribed to, by agent id (told updated when the agent changes)."""
        self.agents.watched = subscriptions

    # --- the live state, as the server asks about it --------------------------------------

    def tree_of(self, agent_id: str | None) -> str | None:
        """The root id of a live agent's tree (None: not live here, or no lineage known)."""
        agent = self.agents.registry.get(agent_id)
        return agent.lineage[-1] if agent is not None and agent.lineage else None

    def open_turn(self, agent_id: str) -> str | None:
        """The id of a live agent's open turn (None: not live here, or between turns)."""
        agent = self.agents.registry.get(agent_id)
        return agent.turn.turn_id if agent is not None and agent.turn is not None else None

    def activation_of(self, agent_id: str) -> str | None:
        """A live agent's activation id (None: not live here)."""
        agent = self.agents.registry.get(agent_id)
        return agent.activation_id if agent is not None else None

    def in_subtree(self, agent_id: str, root: str) -> bool:
        """Whether a stored agent is `root` or below it through durable parents (the resources'
        authorization: live or not)."""
        return in_subtree(self.store, agent_id, root)

    def last_report(self, agent_id: str) -> str | None:
        """The output of the agent's last report among its newest transcript events."""
        return last_report(self.store, agent_id)

    def _signal_elsewhere(self, agent_id: str, kind: str) -> bool:
        return self.leases.signal_elsewhere(agent_id, kind)

    def _recover_children(self, parent_id: str) -> int:
        return self.recovery.recover_children(parent_id)

    # --- transactions (the server brackets each request; writes share one group commit) ---

    def transaction(self) -> AbstractContextManager[None]:
        """One request's writes, all or nothing. A process that another one fenced finds out as
        its next write transaction begins: the store calls lease_lost, then raises LeaseLostError
        before anything of the request ran. While a wait is pending (wait_agents,
        agents/wait_idle) the transaction ends by answering the waits it ended."""
        if self.waits.pending or self.tasks.pending:
            return self._checked_transaction()
        return self.store.atomic()

    @contextmanager
    def _checked_transaction(self) -> Iterator[None]:
        with self.store.atomic():
            yield
            self.tasks.check()  # tasks whose child settled end first: a tasks/result waits for them
            self.waits.check()

    def commit(self) -> None:
        """The group commit; raises StorageFailedError when it fails (then `recovery.rebuild`)."""
        COMMITS.commit(self.store)  # the group commit, counted and timed (server/stats)
        agents = self.agents
        if agents.closing or agents.closing_committed:  # nearly always both empty: nothing to copy
            agents.closing_committed = {root: list(w) for root, w in agents.closing.items()}

    def idempotent(
        self,
        caller: str,
        key: str | None,
        method: str,
        arguments: object,
        result_type: type[R],
        run: Callable[[], R],
    ) -> R:
        """Run once per (caller, key): a retry with the same arguments gets the original result."""
        if key is None:
            return run()
        fingerprint = msgspec.json.encode([method, arguments], order="sorted").decode()
        stored = self.store.get_idempotent(caller, key)
        if stored is not None:
            if stored.method == method and stored.fingerprint == fingerprint:
                return msgspec.json.decode(stored.result, type=result_type)
            raise IdempotencyConflictError(
                texts.IDEMPOTENCY_CONFLICT.format(key=key, caller=caller)
            )
        result = run()
        self.store.put_idempotent(
            caller,
            key,
            IdempotencyRecord(
                method=method, fingerprint=fingerprint, result=msgspec.json.encode(result).decode()
            ),
            now(),
        )
        return result

    def stats(self) -> StatsResult:
        """server/stats: the database's figures, plus this process's live agents and commits."""
        figures = self.store.stats()
        figures.live_here = len(self.agents.registry)
        if figures.usage is not None and self.settings.cost_currency:
            figures.usage.currency = self.settings.cost_currency
        figures.commits = COMMITS.count
        p50, p99 = COMMITS.percentile(0.5), COMMITS.percentile(0.99)
        if p50 is not None and p99 is not None:
            figures.commit_latency = CommitLatency(
                p50_ms=round(p50 * 1000, 3), p99_ms=round(p99 * 1000, 3)
            )
        return figures
