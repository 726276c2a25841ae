"""The engine: activations, durable inboxes, turn scheduling, interrupts, settlement, draining."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from subagentd.core import texts
from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.core.registry import CONTINUABLE, ONE_SHOT, LiveAgent, Registry, Turn
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

_encode = msgspec.json.encode
_blocks_decoder = msgspec.json.Decoder(list[TextBlock])
_source_decoder = msgspec.json.Decoder(Source)


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
        self.shutting_down = False
        self.closing: dict[str, list[Callable[[], None]]] = {}  # closing root -> waiters
        self._grace: dict[str, Callable[[], None]] = {}  # turn id -> cancel its force-end timer
        self.owner = self.settings.owner or f"local:{mint()}"
        self._wakeups: dict[str, list[float]] = {}  # child id -> recent report wakeup times

    # --- transactions (the server brackets each request; writes share one group commit) ---

    def transaction(self):
        """One request's writes, all or nothing."""
        return self.store.atomic()

    def commit(self) -> None:
        self.store.commit()

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

    def require_session(self, agent_id: str):
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

    def status_of(self, agent_id: str) -> str:
        return self.status_lookup()(agent_id)

    def status_lookup(self) -> Callable[[str], str]:
        """Status by id: this process's registry, else another live process's lease, else ready."""
        elsewhere = {
            session_id: status
            for session_id, owner, status in self.store.foreign_leases(self.owner, time.time())
            if self.settings.owner_alive(owner)
        }
        live = self.registry.lookup

        def status(agent_id: str) -> str:
            agent = live(agent_id)
            return agent.status if agent is not None else elsewhere.get(agent_id, "ready")

        return status

    def live_elsewhere(self, agent_id: str) -> bool:
        """Whether another subagentd process sharing the database holds this session live."""
        lease = self.store.get_lease(agent_id)
        return (
            lease is not None
            and lease[0] != self.owner
            and lease[2] > time.time()
            and self.settings.owner_alive(lease[0])
        )

    def heartbeat(self) -> None:
        """Renew this process's leases, and reap turns left open by processes that died."""
        if not self.store.check_file():  # deleted or replaced: every write is refused now
            return
        if len(self.registry):
            self.store.renew_leases(self.owner, time.time() + self.settings.lease_ttl)
        self.recover()

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
    ) -> LiveAgent:
        if self.live_elsewhere(agent_id):
            raise StateInvalidError(f'agent "{agent_id}" is live in another subagentd process')
        left_open = self.store.get_session(agent_id)
        if left_open is not None and left_open.open_turn_id is not None:
            self.recover_turn(agent_id, left_open.open_turn_id)  # its process died mid-turn
        self.store.put_lease(agent_id, self.owner, "idle", time.time() + self.settings.lease_ttl)
        activation_id = mint()
        queued, parked_count = self.store.inbox_counts(agent_id)
        agent = LiveAgent(
            agent_id=agent_id,
            parent_id=parent_id,
            kind=kind,
            depth=depth,
            activation_id=activation_id,
            ancestry=self.registry.live_ancestry(activation_id, parent_id),
            parked=parked,
            pending=queued + parked_count,
            resume=resume,
        )
        self.registry.add(agent)
        self.record(agent_id, None, "activated", {"activation_id": activation_id, "resume": resume})
        self.status_changed(agent)
        return agent

    def status_changed(self, agent: LiveAgent) -> None:
        self.store.set_lease_status(agent.agent_id, self.owner, agent.status)
        if self.settings.status_events:
            self.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status=agent.status))

    def leave(self, agent: LiveAgent) -> None:
        """The agent is no longer live here: out of the registry, its lease released."""
        self.registry.remove(agent)
        self._wakeups.pop(agent.agent_id, None)
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
        parked: bool,
    ) -> str:
        """Durably queue a message as its own later turn; start it now if the agent is free."""
        message_id = mint()
        self.store.insert_message(
            message_id,
            agent_id,
            _encode(blocks).decode(),
            _encode(source).decode(),
            "parked" if parked else "queued",
            now(),
        )
        if agent is not None:
            agent.pending += 1
            self.pump(agent)
        return message_id

    def set_parked(self, agent: LiveAgent, parked: bool) -> None:
        if agent.parked != parked:
            self.store.set_parked(agent.agent_id, parked)
            agent.parked = parked

    def pump(self, agent: LiveAgent) -> None:
        """Start the agent's next FIFO turn if it is free, else settle it if nothing keeps it."""
        if (
            agent.disposing
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

    def interrupt(self, agent: LiveAgent, kind: str, by: str | None) -> str:
        """Stop the open turn once, park the inbox, settle if nothing remains; returns prior status."""
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
            self._grace[turn.turn_id] = self.timers.call_later(
                self.settings.interrupt_grace, lambda: self._force_end(agent.agent_id, turn.turn_id)
            )
        if kind != "shutdown":
            self.set_parked(agent, True)
            if agent.turn is None:
                agent.last_reason, agent.last_output = "aborted", None
                self.maybe_settle(agent)
        return previous

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
            self.dispose(agent, agent.last_reason or "completed")

    def dispose(self, agent: LiveAgent, reason: str) -> None:
        """The activation ends: the host drops it, a continuable child's parent gets its notice."""
        self.leave(agent)
        if agent.parked and agent.pending == 0:
            self.store.set_parked(agent.agent_id, False)
        self.record(agent.agent_id, None, "settled", {"reason": reason})
        self.emit("agent/settled", AgentSettled(agent_id=agent.agent_id, reason=reason))
        parent = self.registry.get(agent.parent_id)
        if agent.kind == CONTINUABLE and agent.parent_id is not None:
            self.notify_settled(
                agent.agent_id, agent.parent_id, parent, agent.last_reason, agent.last_output
            )
        if parent is not None:
            if parent.disposing:
                self.drain_step(parent)
            else:
                self.pump(parent)

    def notify_settled(
        self,
        child_id: str,
        parent_id: str,
        parent: LiveAgent | None,
        reason: str | None,
        output: str | None,
    ) -> None:
        """The settlement notice (SEMANTICS.md section 8): a wakeup, or recorded when closing."""
        first = texts.SETTLED_FIRST_LINE.get(
            reason or "completed", texts.SETTLED_FIRST_LINE["error"]
        )
        first = first.format(id=child_id)
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
        if parent is not None and parent.disposing:
            self.record(
                parent_id, None, "notice", Message(message_id=mint(), content=blocks, source=source)
            )
            return
        parked = parent.parked if parent is not None else self._stored_parked(parent_id)
        self.accept(parent_id, blocks, source, parent, parked)

    def _stored_parked(self, agent_id: str) -> bool:
        record = self.store.get_session(agent_id)
        return bool(record and record.parked)

    # --- closing and shutdown ------------------------------------------------------------

    def close(self, root: LiveAgent, done: Callable[[], None]) -> None:
        """Drain a root: refuse admissions below it, stop its descendants, then let it leave."""
        self.closing.setdefault(root.agent_id, []).append(done)
        draining = [a for a in [*self.registry.subtree(root), root] if not a.disposing]
        for agent in draining:
            agent.disposing = True
            if agent.turn is not None:
                self.interrupt(agent, "shutdown", None)
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
        """Turns left open by a process that died (this one before a restart, or another one
        sharing the database) end with reason error (cause crash); parents are told.
        Runs at start-up and with every heartbeat; only open turns are read (a partial index)."""
        recovered = [
            (session_id, turn_id)
            for session_id, turn_id in self.store.open_turns()
            if self.registry.get(session_id) is None and not self.live_elsewhere(session_id)
        ]
        for session_id, turn_id in recovered:
            self.recover_turn(session_id, turn_id)
        self.store.prune_idempotent(
            stamp(time.time() - self.settings.idempotency_retention * 86400)
        )
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
