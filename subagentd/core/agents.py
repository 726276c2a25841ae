"""The live state every rule shares (registry, store, outlets, owner id) and its lookups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from subagentd.core.budgets import Budgets
from subagentd.core.quotas import Quotas
from subagentd.core.registry import LiveAgent, Registry
from subagentd.core.settings import Settings, TimerService
from subagentd.core.stamps import mint, now
from subagentd.core.store import Store
from subagentd.core.tracing import OFF, Tracing
from subagentd.errors import AgentUnknownError, StateInvalidError
from subagentd.schema.notifications import AgentStatus
from subagentd.schema.resources import ResourceUpdated

if TYPE_CHECKING:
    from subagentd.schema.listing import Status
    from subagentd.schema.records import SessionRecord

_encode = msgspec.json.encode


class Agents:
    """This process's live agents and what every collaborator writes and emits through.

    `emit` and `timers` are the server's outlets (Service.attach, once the connection runs); the
    registry is one object for the process's lifetime (rebuild and lease_lost clear it)."""

    def __init__(
        self,
        store: Store,
        emit: Callable[[str, msgspec.Struct], None],
        timers: TimerService,
        settings: Settings,
    ) -> None:
        self.store = store
        self.emit = emit
        self.watched: dict[str, list[str]] | None = None  # subscribed resource URIs by agent id
        self.timers = timers
        self.tracing: Tracing = (
            OFF  # the OpenTelemetry tracer when configured (subagentd/otel/traces.py)
        )
        self.settings = settings
        self.registry = Registry()
        self.quotas = Quotas(settings, self.registry, store)
        self.budgets = Budgets(settings, self.registry, store)
        self.owner = settings.owner or f"local:{mint()}"  # the lease owner id (core/leases.py)
        self.shutting_down = False
        # a turn interrupted or ended, or an agent gone: its questions end (core/questions.py,
        # set by the Service): (agent id, turn id or None when it left, why)
        self.questions_over: Callable[[str, str | None, str], None] = lambda *_: None
        # whether a person can be asked for this root (ask_user; set by the server's connection)
        self.person: Callable[[str], bool] = lambda root: False
        self.closing: dict[str, list[Callable[[], None]]] = {}  # closing root -> waiters
        self.closing_committed: dict[str, list[Callable[[], None]]] = {}  # `closing` at commit
        self.in_snapshot = False  # answering requests read together (Service.snapshot)
        self._kept: dict[Any, Any] = {}  # readings the snapshot's requests share (`kept`)
        self._kept_at = -1  # store.changes() when they were read

    def attach(self, emit: Callable[[str, msgspec.Struct], None], timers: TimerService) -> None:
        """The server's outlets (Service.attach)."""
        self.emit = emit
        self.timers = timers

    # --- lookups (SEMANTICS.md section 2: the caller, the target, admissions) ---------------

    def live_caller(self, caller: str, activation: str | None) -> LiveAgent | None:
        """The caller's live agent, or None when it is stale (SEMANTICS.md section 2)."""
        agent = self.registry.get(caller)
        if agent is None or (activation is not None and activation != agent.activation_id):
            return None
        return agent

    def draining_root(self, *agents: LiveAgent | None) -> str | None:
        """The closing root above any of `agents` ("" at shutdown), or None when admissions are open."""
        if self.shutting_down:
            return ""
        if self.closing:
            for agent in agents:
                if agent is not None:
                    root = self.registry.root_of(agent)
                    if root.agent_id in self.closing:
                        return root.agent_id
        return None

    def require_session(self, agent_id: str) -> SessionRecord:
        record = self.store.get_session(agent_id)
        if record is None:
            raise AgentUnknownError(f'agent "{agent_id}" does not exist')
        return record

    def require_live(self, agent_id: str) -> LiveAgent:
        agent = self.registry.get(agent_id)
        if agent is None:
            self.require_session(agent_id)
            raise StateInvalidError(f'agent "{agent_id}" is not live')
        return agent

    def status_of(self, agent_id: str) -> Status:
        return self.status_lookup()(agent_id)

    def status_lookup(self) -> Callable[[str], Status]:
        """Status by id: this process's registry, else another live process's lease, else ready."""
        elsewhere = self.elsewhere()
        live = self.registry.lookup

        def status(agent_id: str) -> Status:
            agent = live(agent_id)
            return agent.status if agent is not None else elsewhere.get(agent_id, "ready")

        return status

    def elsewhere(self) -> dict[str, Status]:
        """Statuses of the sessions other live processes hold, by id (their valid leases); one
        reading per snapshot (`kept`)."""
        kept: dict[str, Status] | None = self.kept("elsewhere")
        if kept is not None:
            return kept
        alive: dict[str, bool] = {}
        elsewhere: dict[str, Status] = {}
        for session_id, owner, leased in self.store.foreign_leases(self.owner, self.store.clock()):
            if owner not in alive:
                alive[owner] = self.settings.owner_alive(owner)
            if alive[owner]:
                elsewhere[session_id] = leased
        self.keep("elsewhere", elsewhere)
        return elsewhere

    def kept(self, key: Any) -> Any:
        """What `keep` kept under `key` in this snapshot, or None.

        Requests read together may share one reading of the database (a snapshot: they all
        arrived before it was taken; what other processes commit meanwhile is as if committed
        after them), kept while this process writes nothing: a write of its own (a fence, a
        lease taken over, any request's rows) moves `store.changes()`, and a reading made inside
        an open write group is not kept, since that group may still roll back."""
        if self._kept and self._kept_at == self.store.changes():
            return self._kept.get(key)
        return None

    def keep(self, key: Any, reading: Any) -> None:
        """Share `reading` with the rest of the snapshot's requests (`kept`); outside a snapshot,
        or with writes of the open group not committed yet, it is not kept."""
        if not self.in_snapshot or self.store.dirty:
            return
        changes = self.store.changes()
        if changes != self._kept_at:
            self._kept.clear()
            self._kept_at = changes
        self._kept[key] = reading

    def begin_snapshot(self) -> None:
        self.in_snapshot = True

    def end_snapshot(self) -> None:
        self.in_snapshot = False
        self._kept.clear()

    # --- what every change writes --------------------------------------------------------

    def record(self, agent_id: str, turn_id: str | None, event_type: str, data: Any) -> None:
        """One event in the agent's transcript (held with the group's next statement)."""
        if self.watched and agent_id in self.watched:
            self.resource_changed(agent_id)
        self.store.add_event(agent_id, turn_id, event_type, _encode(data).decode(), now())

    def resource_changed(self, agent_id: str) -> None:
        """An MCP client subscribed to this agent's resources: tell it they changed."""
        for uri in self.watched.get(agent_id, ()) if self.watched else ():
            self.emit("notifications/resources/updated", ResourceUpdated(uri=uri))

    def status_changed(self, agent: LiveAgent, save: bool = True) -> None:
        """Its status told (`agent/status`, a watched resource); `save`: and written to its lease
        row, unless the caller wrote the row (or writes it before the transaction ends)."""
        if self.watched and agent.agent_id in self.watched:
            self.resource_changed(agent.agent_id)
        if save:
            self.save_live(agent)
        if self.settings.status_events:
            self.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status=agent.status))

    def save_live(self, agent: LiveAgent) -> None:
        """The lease row keeps what the registry needs beyond the session row (see rebuild)."""
        turn = agent.turn
        self.store.set_lease_status(
            agent.agent_id,
            self.owner,
            agent.status,
            interrupted=turn is not None and turn.interrupted,
            disposing=agent.disposing,
            resume=agent.resume,
        )
