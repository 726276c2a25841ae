"""The engine: activations, durable inboxes, turn scheduling, interrupts, settlement, draining."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from subagentd.core import texts
from subagentd.core.commits import COMMITS
from subagentd.core.descriptors import DescriptorProblem, filtered_tools, parse_descriptor
from subagentd.core.quotas import Quotas
from subagentd.core.registry import CONTINUABLE, ONE_SHOT, ORDINARY, LiveAgent, Registry, Turn
from subagentd.core.settings import Settings, Timers
from subagentd.core.stamps import mint, now, stamp
from subagentd.core.store import Store
from subagentd.errors import AgentUnknownError, StateInvalidError
from subagentd.schema.messages import (
    Message,
    Source,
    TextBlock,
)
from subagentd.schema.notifications import (
    AgentInject,
    AgentSettled,
    AgentStatus,
    InterruptCause,
    TurnInterrupt,
    TurnStart,
)
from subagentd.schema.records import SessionRecord

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from subagentd.schema.listing import Status
    from subagentd.schema.notifications import InterruptKind
    from subagentd.schema.records import LiveRecord

_encode = msgspec.json.encode
_blocks_decoder: msgspec.json.Decoder[list[TextBlock]] = msgspec.json.Decoder(list[TextBlock])
_source_decoder: msgspec.json.Decoder[Source] = msgspec.json.Decoder(Source)
_OWNERS_KEPT = 86400.0  # seconds a fenced owner row is kept (a process stopped longer finds none)


class Engine:
    """Owns the live registry and drives every agent's inbox; every write goes through `store`."""

    def __init__(
        self,
        store: Store,
        emit: Callable[[str, msgspec.Struct], None],
        timers: Timers,
        settings: Settings | None = None,
    ) -> None:
        self.store = store
        self.emit = emit
        self.timers = timers
        self.settings = settings or Settings()
        self.registry = Registry()
        self.quotas = Quotas(self.settings, self.registry, self.store)
        self.shutting_down = False
        self.closing: dict[str, list[Callable[[], None]]] = {}  # closing root -> waiters
        self._grace: dict[str, Callable[[], None]] = {}  # turn id -> cancel its force-end timer
        self._owner_base = self.settings.owner or f"local:{mint()}"
        self._owner_generation = 1
        self.owner = self._owner_base
        self.store.hold(self.owner, self.settings.lease_ttl, self.lease_lost)
        self._wakeups: dict[str, list[float]] = {}  # child id -> recent report wakeup times
        self._closing_committed: dict[str, list[Callable[[], None]]] = {}  # `closing` at commit

    # --- transactions (the server brackets each request; writes share one group commit) ---

    def transaction(self) -> AbstractContextManager[None]:
        """One request's writes, all or nothing. A process that another one fenced finds out as
        its next write transaction begins: the store calls lease_lost, then raises LeaseLostError
        before anything of the request ran."""
        return self.store.atomic()

    def commit(self) -> None:
        """The group commit; raises StorageFailedError when it fails (then call `rebuild`)."""
        COMMITS.commit(self.store)  # the group commit, counted and timed (server/stats)
        if self.closing or self._closing_committed:  # nearly always both empty: nothing to copy
            self._closing_committed = {root: list(w) for root, w in self.closing.items()}

    def rebuild(self) -> None:
        """After a lost commit group: roll it back and make memory agree with storage again.

        The registry is rebuilt from the rows this process holds (storage.live_agents), closing
        waiters are those of the last commit, force-end timers run exactly for interrupted open
        turns (one lost with the group is armed again, for a full grace period).
        """
        self.store.rollback()
        before = {agent.activation_id: agent for agent in self.registry}
        rows = self.store.live_agents(self.owner)
        live = {row.activation_id: row.agent_id for row in rows}
        self.registry.clear()
        for row in rows:
            ancestry = tuple(row.ancestry.split(" "))
            same = before.get(row.activation_id)
            self.registry.add(
                LiveAgent(
                    agent_id=row.agent_id,
                    parent_id=row.parent_id,
                    kind=row.kind,
                    depth=row.depth,
                    activation_id=row.activation_id,
                    ancestry=ancestry,
                    turn=Turn(row.open_turn_id, row.interrupted) if row.open_turn_id else None,
                    parked=row.parked,
                    pending=row.pending,
                    disposing=row.disposing,
                    resume=row.resume,
                    last_reason=row.last_reason,
                    last_output=row.last_output,
                    # set once at activation: the same activation had them before the lost group
                    held=same.held if same is not None else False,
                    tools=same.tools if same is not None else self._stored_tools(row),
                    # its owner: the nearest ancestor live at its activation and live still (a
                    # one-shot parent that left handed it on, registry.remove), else its parent
                    owner_id=next((live[a] for a in ancestry[1:] if a in live), row.parent_id),
                )
            )
        self.closing = {root: list(w) for root, w in self._closing_committed.items()}
        interrupted = {
            agent.turn.turn_id: agent.agent_id
            for agent in self.registry
            if agent.turn is not None and agent.turn.interrupted
        }
        for turn_id in [t for t in self._grace if t not in interrupted]:
            self._grace.pop(turn_id)()
        for turn_id, agent_id in interrupted.items():
            if turn_id not in self._grace:
                self._arm_grace(agent_id, turn_id)
        self._wakeups = {k: v for k, v in self._wakeups.items() if self.registry.get(k)}

    def _stored_tools(self, row: LiveRecord) -> frozenset[str] | None:
        """A rebuilt child's tool_filter, read from its descriptor (None: all tools)."""
        if row.kind == ORDINARY:
            return None
        try:
            return filtered_tools(
                parse_descriptor(self.store.get_descriptor(row.agent_id)).tool_filter
            )
        except DescriptorProblem:
            return None

    # --- lookups -------------------------------------------------------------------------

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

    def draining_elsewhere(self, agent_id: str) -> str | None:
        """For an agent live in another process: the topmost draining agent of its tree there
        (as that process recorded it), or None when that process admits input for it."""
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
        alive: dict[str, bool] = {}
        elsewhere = {}
        for session_id, owner, leased in self.store.foreign_leases(self.owner, self.store.clock()):
            if owner not in alive:
                alive[owner] = self.settings.owner_alive(owner)
            if alive[owner]:
                elsewhere[session_id] = leased
        live = self.registry.lookup

        def status(agent_id: str) -> Status:
            agent = live(agent_id)
            return agent.status if agent is not None else elsewhere.get(agent_id, "ready")

        return status

    def live_elsewhere(self, agent_id: str) -> bool:
        """Whether another subagentd process sharing the database holds this session live."""
        return self.owner_elsewhere(agent_id) is not None

    def owner_elsewhere(self, agent_id: str) -> str | None:
        """The owner id of the other process holding this session live, if one does."""
        lease = self.store.get_lease(agent_id)
        if lease is None or lease[0] == self.owner or not self.holds(lease[0]):
            return None
        return lease[0]

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

    def heartbeat(self) -> None:
        """Reap what processes that died or stalled past the TTL left (leases are renewed by
        the store: at commit time and by its renewal thread)."""
        if not self.store.check_file():  # deleted or replaced: every write is refused now
            return
        self.recover()
        self.take_signals()  # in case a doorbell's ring was lost

    def take_signals(self) -> None:
        """Inputs other processes sharing the database sent to agents live here (their rows were
        committed with the inputs; storage/signals.py): each acts as if it had arrived here. An
        inbox message is a waking input (SEMANTICS.md section 1); an interrupt stops the turn.
        One whose agent left meanwhile is dropped: its message stays queued for the next
        activation, and an interrupt of an agent no longer live is a no-op anyway."""
        for session_id, kind, by in self.store.take_signals(self.owner):
            agent = self.registry.get(session_id)
            if agent is None:
                continue
            if kind == "inbox":
                agent.pending = sum(self.store.inbox_counts(session_id))
                self.set_parked(agent, False)
                self.pump(agent)
            elif not agent.disposing:
                self.interrupt(agent, "parent" if kind == "parent" else "user", by)

    def signal_elsewhere(self, agent_id: str, kind: str, by: str | None = None) -> bool:
        """Queue a signal for the process holding `agent_id` live, if another one does; whether
        one did (the input itself is already written, in the same transaction)."""
        owner = self.owner_elsewhere(agent_id)
        if owner is None:
            return False
        self.store.put_signal(owner, agent_id, kind, by)
        return True

    def lease_lost(self) -> None:
        """Another process fenced this one (it was stalled past the lease TTL) and may run its
        sessions now: every live agent is let go without another write to its session, the host
        is told (`agent/settled`, reason `lease-lost`), and the process carries on under a new
        owner id that holds nothing."""
        lost = list(self.registry)
        for cancel in self._grace.values():
            cancel()
        self._grace.clear()
        self._wakeups.clear()
        self.registry = Registry()
        self._owner_generation += 1
        self.owner = f"{self._owner_base}#{self._owner_generation}"
        self.store.hold(self.owner, self.settings.lease_ttl, self.lease_lost)
        for agent in lost:
            self.emit("agent/settled", AgentSettled(agent_id=agent.agent_id, reason="lease-lost"))
            if self.settings.status_events:
                self.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status="ready"))
        closing, self.closing = self.closing, {}
        for waiters in closing.values():
            for done in waiters:
                done()

    # --- transcript ----------------------------------------------------------------------

    def record(self, agent_id: str, turn_id: str | None, event_type: str, data: Any) -> int:
        return self.store.append_events(
            agent_id, turn_id, [(event_type, _encode(data).decode())], now()
        )

    # --- activation ----------------------------------------------------------------------

    def activate(
        self,
        agent_id: str,
        parent_id: str | None,
        kind: str,
        depth: int,
        parked: bool,
        resume: bool = False,
        tools: frozenset[str] | None = None,
    ) -> LiveAgent:
        if self.live_elsewhere(agent_id):
            raise StateInvalidError(f'agent "{agent_id}" is live in another subagentd process')
        stored = self.store.get_session(agent_id)
        # the last turn's end as storage has it (what a rebuilt registry would read, too)
        last_reason, last_output = (
            (stored.last_reason, stored.last_output) if stored else (None, None)
        )
        if stored is not None and stored.open_turn_id is not None:
            self.recover_turn(agent_id, stored.open_turn_id)  # its process died mid-turn
            last_reason, last_output = "error", None
        activation_id = mint()
        ancestry = self.registry.live_ancestry(activation_id, parent_id)
        self.store.put_lease(
            agent_id,
            self.owner,
            "idle",
            time.time() + self.settings.lease_ttl,
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
        )
        self.registry.add(agent)
        self.record(agent_id, None, "activated", {"activation_id": activation_id, "resume": resume})
        self.status_changed(agent)
        return agent

    def status_changed(self, agent: LiveAgent) -> None:
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

    def leave(self, agent: LiveAgent) -> None:
        """The agent is no longer live here: out of the registry, its lease released."""
        self.registry.remove(agent)
        self._wakeups.pop(agent.agent_id, None)
        self.quotas.forget(agent.agent_id)
        self.store.drop_lease(agent.agent_id, self.owner)
        if self.settings.status_events:
            self.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status="ready"))

    # --- inbox ---------------------------------------------------------------------------

    def accept(
        self,
        agent_id: str,
        blocks: list[TextBlock],
        source: Source,
        agent: LiveAgent | None,
        stored_parked: bool = False,
    ) -> str:
        """Durably queue a waking input as its own later turn; start it now if the agent is free.

        Every accepted message is a waking input (SEMANTICS.md section 1): it unparks the inbox,
        so the parked messages run first, then this one. `stored_parked`: a non-live agent's flag."""
        if agent is not None:
            self.set_parked(agent, False)
        elif stored_parked:
            self.store.set_parked(agent_id, False)
        message_id = mint()
        self.store.insert_message(
            message_id,
            agent_id,
            _encode(blocks).decode(),
            _encode(source).decode(),
            "queued",
            now(),
        )
        if agent is not None:
            agent.pending += 1
            self.pump(agent)
        else:  # live in another process sharing the database: it starts the turn
            self.signal_elsewhere(agent_id, "inbox")
        return message_id

    def set_parked(self, agent: LiveAgent, parked: bool) -> None:
        if agent.parked != parked:
            self.store.set_parked(agent.agent_id, parked)
            agent.parked = parked

    def pump(self, agent: LiveAgent) -> None:
        """Start the agent's next FIFO turn if it is free, else settle it if nothing keeps it."""
        if (
            agent.disposing
            or agent.held
            or agent.turn is not None
            or self.registry.get(agent.agent_id) is not agent
        ):
            return
        if agent.pending and not agent.parked:
            record = self.store.next_queued(agent.agent_id)
            if record is not None:
                message = Message(
                    message_id=record.message_id,
                    content=_blocks_decoder.decode(record.content),
                    source=_source_decoder.decode(record.source),
                )
                agent.pending -= 1
                self.start_turn(agent, [message], claimed=[record.message_id])
                return
            agent.pending = sum(self.store.inbox_counts(agent.agent_id))
        self.maybe_settle(agent)

    # --- turns ---------------------------------------------------------------------------

    def start_turn(self, agent: LiveAgent, messages: list[Message], claimed: list[str]) -> str:
        turn_id = mint()
        for message_id in claimed:
            self.store.claim_message(message_id, turn_id)
        self.store.set_open_turn(agent.agent_id, turn_id)
        for message in messages:
            self.record(agent.agent_id, turn_id, "message", message)
        self.record(
            agent.agent_id,
            turn_id,
            "turn_start",
            {"turn_id": turn_id, "message_ids": [m.message_id for m in messages]},
        )
        agent.turn = Turn(turn_id)
        # cold resume: the descriptor (checked when the agent was resumed) is read, not kept live
        resume = (
            parse_descriptor(self.store.get_descriptor(agent.agent_id)) if agent.resume else None
        )
        agent.resume = False
        self.emit(
            "turn/start",
            TurnStart(
                agent_id=agent.agent_id,
                activation_id=agent.activation_id,
                turn_id=turn_id,
                messages=messages,
                resume=resume,
                instructions=texts.REPORT_INSTRUCTIONS if agent.kind == CONTINUABLE else None,
            ),
        )
        self.status_changed(agent)
        return turn_id

    def end_turn(
        self, agent: LiveAgent, reason: str, output: str | None, cause: str | None = None
    ) -> None:
        """Close the agent's open turn, then schedule what follows."""
        turn = agent.turn
        assert turn is not None
        cancel = self._grace.pop(turn.turn_id, None)
        if cancel is not None:
            cancel()
        self.store.end_turn(agent.agent_id, reason, output)
        data: dict[str, Any] = {"turn_id": turn.turn_id, "reason": reason}
        if output is not None:
            data["output"] = output
        if cause is not None:
            data["cause"] = cause
        self.record(agent.agent_id, turn.turn_id, "turn_end", data)
        agent.turn = None
        agent.last_reason, agent.last_output = reason, output
        self.status_changed(agent)
        if agent.disposing:
            self.drain_step(agent)
        elif agent.kind == ONE_SHOT:
            self.dispose(agent, reason)
        else:
            self.pump(agent)

    def interrupt(self, agent: LiveAgent, kind: InterruptKind, by: str | None) -> Status:
        """Stop the open turn once, park what is queued, settle if nothing remains; returns prior status."""
        previous = agent.status
        turn = agent.turn
        if turn is not None and not turn.interrupted:
            turn.interrupted = True
            self.record(agent.agent_id, turn.turn_id, "interrupt", {"cause": kind, "by": by})
            self.emit(
                "turn/interrupt",
                TurnInterrupt(
                    agent_id=agent.agent_id,
                    turn_id=turn.turn_id,
                    cause=InterruptCause(kind=kind, by=by),
                ),
            )
            self.save_live(agent)
            self._arm_grace(agent.agent_id, turn.turn_id)
        if kind != "shutdown":
            if agent.pending:
                self.set_parked(agent, True)
            if agent.turn is None:
                agent.last_reason, agent.last_output = "aborted", None
                self.store.end_turn(agent.agent_id, "aborted", None)  # the last turn counts so
                self.maybe_settle(agent)
        return previous

    def _arm_grace(self, agent_id: str, turn_id: str) -> None:
        self._grace[turn_id] = self.timers.call_later(
            self.settings.interrupt_grace, lambda: self._force_end(agent_id, turn_id)
        )

    def _force_end(self, agent_id: str, turn_id: str) -> None:
        """The host did not end an interrupted turn within the grace period."""
        self._grace.pop(turn_id, None)
        agent = self.registry.get(agent_id)
        if agent is not None and agent.turn is not None and agent.turn.turn_id == turn_id:
            self.end_turn(agent, "aborted", None, cause="interrupt-timeout")

    # --- settlement and disposal ---------------------------------------------------------

    def maybe_settle(self, agent: LiveAgent) -> None:
        if (
            agent.kind == CONTINUABLE
            and not agent.disposing
            and agent.turn is None
            and agent.pending == 0
            and not self.registry.has_live_children(agent)
        ):
            # the inbox as committed decides: another process may have queued a message here
            # (its signal may not be taken yet); under this group's write lock nothing else can
            queued, _ = self.store.inbox_counts(agent.agent_id)
            if queued:  # a waking input (the sender put parked ones back in the queue too)
                agent.pending = sum(self.store.inbox_counts(agent.agent_id))
                self.set_parked(agent, False)
                self.pump(agent)
                return
            self.dispose(agent, agent.last_reason or "completed")

    def dispose(self, agent: LiveAgent, reason: str) -> None:
        """The activation ends: the host drops it, a continuable child's parent gets its notice."""
        self.leave(agent)
        if agent.parked and agent.pending == 0:
            self.store.set_parked(agent.agent_id, False)
        self.record(agent.agent_id, None, "settled", {"reason": reason})
        self.emit("agent/settled", AgentSettled(agent_id=agent.agent_id, reason=reason))
        if agent.kind == CONTINUABLE and agent.parent_id is not None:
            self.notify_settled(
                agent.agent_id,
                agent.parent_id,
                self.registry.get(agent.parent_id),
                agent.last_reason,
                agent.last_output,
            )
        owner = self.registry.get(agent.owner_id)  # the durable parent, or who adopted it
        if owner is not None:
            if owner.disposing:
                self.drain_step(owner)
            else:
                self.pump(owner)

    def notify_settled(
        self,
        child_id: str,
        parent_id: str,
        parent: LiveAgent | None,
        reason: str | None,
        output: str | None,
    ) -> None:
        """The settlement notice (SEMANTICS.md section 8): a waking input, or only recorded in the
        parent's transcript when the parent is closing or is a one-shot child."""
        first = texts.SETTLED_FIRST_LINE.get(
            reason or "completed", texts.SETTLED_FIRST_LINE["error"]
        )
        first = first.format(id=texts.shown(child_id))
        blocks = [TextBlock(text=first)]
        if output:
            blocks += [TextBlock(text=texts.CLOSING_MESSAGE), TextBlock(text=output)]
        else:
            blocks.append(TextBlock(text=texts.NO_CLOSING_MESSAGE))
        source = Source(
            kind="subagent-settled",
            form="notice",
            summary=texts.summary_of(first),
            sender_session_id=child_id,
        )
        stored = self.store.get_session(parent_id) if parent is None else None
        if (parent is not None and parent.disposing) or self._one_shot(parent, stored):
            # a closing parent, or a one-shot one (it never runs another turn): recorded, not woken
            self.record(
                parent_id, None, "notice", Message(message_id=mint(), content=blocks, source=source)
            )
            return
        self.accept(parent_id, blocks, source, parent, bool(stored and stored.parked))

    def _one_shot(self, live: LiveAgent | None, stored: SessionRecord | None) -> bool:
        """Whether a session is a one-shot child (live, or as stored)."""
        if live is not None:
            return live.kind == ONE_SHOT
        if stored is None or stored.kind != "subagent":
            return False
        try:
            return parse_descriptor(self.store.get_descriptor(stored.id)).mode == ONE_SHOT
        except DescriptorProblem:
            return False

    # --- closing and shutdown ------------------------------------------------------------

    def close(self, root: LiveAgent, done: Callable[[], None]) -> None:
        """Drain a root: refuse admissions below it, stop its descendants, then let it leave."""
        self.closing.setdefault(root.agent_id, []).append(done)
        draining = [a for a in [*self.registry.subtree(root), root] if not a.disposing]
        for agent in draining:
            agent.disposing = True
            if agent.turn is not None:
                self.interrupt(agent, "shutdown", None)
            self.save_live(agent)
        for agent in draining:
            if self.registry.get(agent.agent_id) is agent:
                self.drain_step(agent)

    def drain_step(self, agent: LiveAgent) -> None:
        """A draining agent leaves once its turn has ended and its live children are gone."""
        if agent.turn is not None or self.registry.has_live_children(agent):
            return
        if agent.agent_id in self.closing:
            self._check_closed(agent)
        else:
            self.dispose(agent, "closed")

    def _check_closed(self, agent: LiveAgent) -> None:
        waiters = self.closing.get(agent.agent_id)
        if waiters is None or agent.turn is not None or self.registry.has_live_children(agent):
            return
        del self.closing[agent.agent_id]
        if self.registry.get(agent.agent_id) is agent:
            self.leave(agent)
            self.record(agent.agent_id, None, "closed", {})
        for done in waiters:
            done()

    def shutdown(self, done: Callable[[], None]) -> None:
        """Drain everything: close every topmost live agent; `done` runs when all have left."""
        self.shutting_down = True
        tops = [a for a in self.registry if self.registry.root_of(a) is a]
        remaining = len(tops)
        if not remaining:
            done()
            return

        def one_closed() -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                done()

        for top in tops:
            self.close(top, one_closed)

    def force_end_all(self, cause: str) -> None:
        """End every open turn now (the host is gone); their agents are then disposed."""
        for agent in self.registry:
            if agent.turn is not None and self.registry.get(agent.agent_id) is agent:
                self.end_turn(agent, "aborted", None, cause=cause)

    # --- crash recovery ------------------------------------------------------------------

    def recover(self) -> int:
        """Turns left open by a process that died or stalled past the TTL (this one before a
        restart, or another one sharing the database) end with reason error (cause crash);
        parents are told. Runs at start-up and with every heartbeat: owners that lapsed are
        fenced first, then the open turns no valid owner holds are read (one query)."""
        clock = self.store.clock()
        for owner, _, fenced in self.store.owners():
            if owner != self.owner and not fenced:
                self.holds(owner)  # fences it if it lapsed
        recovered = [
            (session_id, turn_id)
            for session_id, turn_id in self.store.orphaned_turns(self.owner, clock)
            if self.registry.get(session_id) is None
        ]
        for session_id, turn_id in recovered:
            self.recover_turn(session_id, turn_id)
        self.store.prune_idempotent(
            stamp(time.time() - self.settings.idempotency_retention * 86400)
        )
        self.store.prune_owners(clock - _OWNERS_KEPT)
        return len(recovered)

    def recover_turn(self, session_id: str, turn_id: str) -> None:
        """End a turn its process left open when it died; a continuable child's parent is told."""
        self.store.end_turn(session_id, "error", None)
        self.record(
            session_id,
            turn_id,
            "turn_end",
            {"turn_id": turn_id, "reason": "error", "cause": "crash"},
        )
        record = self.store.get_session(session_id)
        if record is None or record.kind != "subagent" or record.parent_id is None:
            return
        try:
            descriptor = parse_descriptor(self.store.get_descriptor(session_id))
        except DescriptorProblem:
            return
        if descriptor.mode == CONTINUABLE and self.store.get_session(record.parent_id):
            parent = self.registry.get(record.parent_id)
            self.notify_settled(session_id, record.parent_id, parent, "error", None)

    def wakeup_allowed(self, child: LiveAgent) -> bool:
        """--report-rate: at most N report wakeups per child per minute (sliding window)."""
        limit = self.settings.report_rate
        if limit <= 0:
            return True
        now_s = time.monotonic()
        recent = [t for t in self._wakeups.get(child.agent_id, ()) if now_s - t < 60.0]
        if len(recent) >= limit:
            self._wakeups[child.agent_id] = recent
            return False
        self._wakeups[child.agent_id] = [*recent, now_s]
        return True

    # --- delivery of reports -------------------------------------------------------------

    def inject(self, parent: LiveAgent, blocks: list[TextBlock], source: Source) -> str:
        """Quiet delivery: into the parent's transcript and context, without starting a turn."""
        message = Message(message_id=mint(), content=blocks, source=source)
        self.store.insert_message(
            message.message_id,
            parent.agent_id,
            _encode(blocks).decode(),
            _encode(source).decode(),
            "claimed",
            now(),
        )
        self.record(parent.agent_id, None, "message", message)
        self.emit("agent/inject", AgentInject(agent_id=parent.agent_id, messages=[message]))
        return message.message_id
