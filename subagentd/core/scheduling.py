"""Turn scheduling: durable inboxes, one turn per waking input in FIFO order, interrupts.

Longer than ~300 lines on purpose: the timers that stop a turn (the interrupt grace, deadlines)
live beside the turns they end, so a turn's whole life reads in one place."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.descriptors import parse_descriptor
from subagentd.core.registry import CONTINUABLE, ONE_SHOT, LiveAgent, OpenTurn
from subagentd.core.stamps import mint, now
from subagentd.schema.budgets import Usage
from subagentd.schema.messages import Message, Source, TextBlock
from subagentd.schema.notifications import AgentInject, InterruptCause, TurnInterrupt, TurnStart
from subagentd.schema.runner import RunnerFailure

if TYPE_CHECKING:
    from subagentd.schema.listing import Status
    from subagentd.schema.notifications import InterruptKind
    from subagentd.schema.records import InboxRecord

_encode = msgspec.json.encode


class Unread(enum.Enum):
    """A value the caller has not read (the callee reads it)."""

    UNREAD = 0


_blocks_decoder: msgspec.json.Decoder[list[TextBlock]] = msgspec.json.Decoder(list[TextBlock])
_source_decoder: msgspec.json.Decoder[Source] = msgspec.json.Decoder(Source)


class Scheduler:
    """Queues inputs, starts and ends turns, interrupts them (with the grace timer).

    When an agent is left with nothing to run, what follows is settlement's decision: `settle`
    (maybe_settle), `dispose` and `drain` (drain_step) are core/settlement.py's, handed in by
    the Settlement that builds this scheduler."""

    def __init__(
        self,
        agents: Agents,
        settle: Callable[[LiveAgent], None],
        dispose: Callable[[LiveAgent, str], None],
        drain: Callable[[LiveAgent], None],
        signal_elsewhere: Callable[[str, str], bool],
    ) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.settings = agents.settings
        self.settle = settle
        self.dispose = dispose
        self.drain = drain
        self._grace: dict[str, Callable[[], None]] = {}  # turn id -> cancel its force-end timer
        self._deadlines: dict[str, Callable[[], None]] = {}  # turn id -> cancel its deadline timer
        self.budgets = agents.budgets
        # input for an agent live in another process: Leases.signal_elsewhere (core/leases.py)
        self.signal_elsewhere = signal_elsewhere

    # --- the inbox -----------------------------------------------------------------------

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
        self.agents.tracing.message_sent(message_id, agent_id, source.sender_session_id)
        if agent is not None:
            agent.pending += 1
            self.pump(agent)
        else:  # live in another process sharing the database: that one starts the turn
            self.signal_elsewhere(agent_id, "inbox")
        return message_id

    def take_signals(self, sessions: Collection[str] | None = None) -> None:
        """Inputs other processes sharing the database sent to agents live here (their rows were
        committed with the inputs; storage/signals.py), to `sessions` only when given (a ring
        named them: the caller holds their tree's lock), else to any: each acts as if it had
        arrived here. An
        inbox message is a waking input (SEMANTICS.md section 1); an interrupt stops the turn;
        `budget` (limits changed: agents/budget, agents/resume) starts held input and re-arms
        the running turn's deadline; `stop` (agents/stop) interrupts it with cause `stop` and
        parks the queue. One whose agent left meanwhile is dropped: its message stays queued
        for the next activation, and an interrupt of an agent no longer live is a no-op anyway."""
        for session_id, kind, by, waiting, first in self.store.take_signals(
            self.agents.owner, sessions
        ):
            agent = self.registry.get(session_id)
            if agent is None:
                continue
            if kind in ("inbox", "budget"):
                if waiting is None:
                    waiting = self.store.inbox_counts(session_id)
                agent.pending = sum(waiting)
                if waiting.parked:  # unparked next: the first queued may be one of them
                    first = None
            if kind == "inbox":
                self.set_parked(agent, False)
                self.pump(agent, first)
            elif kind == "budget":
                agent.held_by = None
                self.pump(agent, first)
                if agent.turn is not None and not agent.turn.interrupted:
                    self.arm_deadline(agent, agent.turn.turn_id)
            elif kind == "stop":
                if agent.turn is not None and not agent.turn.interrupted and not agent.disposing:
                    self.interrupt(agent, "stop", by)
                elif agent.pending:
                    self.set_parked(agent, True)
            elif not agent.disposing:
                self.interrupt(agent, "parent" if kind == "parent" else "user", by)

    def set_parked(self, agent: LiveAgent, parked: bool) -> None:
        if agent.parked != parked:
            self.store.set_parked(agent.agent_id, parked)
            agent.parked = parked

    def pump(self, agent: LiveAgent, first: InboxRecord | None = None) -> None:
        """Start the agent's next FIFO turn if it is free, else settle it if nothing keeps it;
        `first`: its next queued message, when the caller has just read it."""
        if (
            agent.disposing
            or agent.held
            or agent.turn is not None
            or self.registry.get(agent.agent_id) is not agent
        ):
            return
        if agent.pending and not agent.parked:
            record = first if first is not None else self.store.next_queued(agent.agent_id)
            if record is not None:
                refusal, deadline = self.budgets.turn_check(agent.lineage)
                if refusal is not None:  # held: it stays queued until the budget is raised
                    agent.held_by = refusal.held()
                    return
                agent.held_by = None
                message = Message(
                    message_id=record.message_id,
                    content=_blocks_decoder.decode(record.content),
                    source=_source_decoder.decode(record.source),
                )
                agent.pending -= 1
                self.start_turn(agent, [message], claimed=[record.message_id], deadline=deadline)
                return
            agent.pending = sum(self.store.inbox_counts(agent.agent_id))
        self.settle(agent)

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
        self.agents.tracing.message_sent(
            message.message_id, parent.agent_id, source.sender_session_id
        )
        self.agents.record(parent.agent_id, None, "message", message)
        self.agents.emit("agent/inject", AgentInject(agent_id=parent.agent_id, messages=[message]))
        return message.message_id

    # --- turns ---------------------------------------------------------------------------

    def start_turn(
        self,
        agent: LiveAgent,
        messages: list[Message],
        claimed: list[str],
        traceparent: str | None = None,
        deadline: float | None | Literal[Unread.UNREAD] = Unread.UNREAD,
    ) -> str:
        """Begin the agent's turn on these messages and tell the host (turn/start); `traceparent`:
        the host's span to trace the turn under (turns/begin); `deadline`: its lineage's, when
        the caller has just read it (Budgets.turn_check)."""
        turn_id = mint()
        for message_id in claimed:
            self.store.claim_message(message_id, turn_id)
        self.store.set_open_turn(agent.agent_id, turn_id)
        record = self.agents.record
        for message in messages:
            record(agent.agent_id, turn_id, "message", message)
        record(
            agent.agent_id,
            turn_id,
            "turn_start",
            {"turn_id": turn_id, "message_ids": [m.message_id for m in messages]},
        )
        agent.turn = OpenTurn(turn_id)
        self.budgets.turn_started(agent)
        self.arm_deadline(agent, turn_id, deadline)
        # cold resume: the descriptor (checked when the agent was resumed), kept only until
        # this turn (read again when the registry was rebuilt meanwhile)
        resume = None
        if agent.resume:
            resume = agent.descriptor or parse_descriptor(self.store.get_descriptor(agent.agent_id))
        agent.resume = False
        agent.descriptor = None
        traced = self.agents.tracing.turn_started(agent.agent_id, turn_id, messages, traceparent)
        self.agents.emit(
            "turn/start",
            TurnStart(
                agent_id=agent.agent_id,
                activation_id=agent.activation_id,
                turn_id=turn_id,
                messages=messages,
                resume=resume,
                instructions=texts.REPORT_INSTRUCTIONS if agent.kind == CONTINUABLE else None,
                traceparent=traced,
            ),
        )
        self.agents.status_changed(agent)
        return turn_id

    def end_turn(
        self,
        agent: LiveAgent,
        reason: str,
        output: str | None,
        cause: str | None = None,
        usage: Usage | None = None,
        failure: RunnerFailure | None = None,
    ) -> None:
        """Close the agent's open turn (charging what it used), then schedule what follows."""
        turn = agent.turn
        assert turn is not None
        cancel = self._grace.pop(turn.turn_id, None)
        if cancel is not None:
            cancel()
        cancel = self._deadlines.pop(turn.turn_id, None)
        if cancel is not None:
            cancel()
        if usage is not None:
            self.budgets.used(agent.lineage, usage)
        # a turn its deadline stopped is told as such to its parent (SEMANTICS.md section 8)
        last = "deadline" if turn.deadline and reason == "aborted" else reason
        self.store.end_turn(agent.agent_id, last, output)
        data: dict[str, Any] = {"turn_id": turn.turn_id, "reason": reason}
        if output is not None:
            data["output"] = output
        if cause is not None:
            data["cause"] = cause
        elif turn.deadline:
            data["cause"] = "deadline"
        if usage is not None:
            data["usage"] = usage
        if failure is not None:
            data["runner"] = failure
        self.agents.record(agent.agent_id, turn.turn_id, "turn_end", data)
        self.agents.questions_over(agent.agent_id, turn.turn_id, "ended")
        agent.asking = False
        used = None
        if usage is not None:  # the token counts the host or the runner reported, for the span
            used = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
        self.agents.tracing.turn_ended(agent.agent_id, turn.turn_id, reason, cause, used)
        agent.turn = None
        agent.last_reason, agent.last_output = last, output
        agent.last_failure = failure
        # its lease row is written once what follows is known: the next turn's start writes it,
        # and an agent that leaves has it dropped
        self.agents.status_changed(agent, save=False)
        if agent.disposing:
            self.drain(agent)
        elif agent.kind == ONE_SHOT:
            self.dispose(agent, last)
        else:
            self.pump(agent)
        if agent.turn is None and self.registry.get(agent.agent_id) is agent:
            self.agents.save_live(agent)

    # --- interrupts (SEMANTICS.md section 5) and the grace timer -------------------------

    def interrupt(self, agent: LiveAgent, kind: InterruptKind, by: str | None) -> Status:
        """Stop the open turn once, park what is queued, settle if nothing remains; returns prior status."""
        previous = agent.status
        turn = agent.turn
        if turn is not None and not turn.interrupted:
            turn.interrupted = True
            self.agents.record(agent.agent_id, turn.turn_id, "interrupt", {"cause": kind, "by": by})
            self.agents.emit(
                "turn/interrupt",
                TurnInterrupt(
                    agent_id=agent.agent_id,
                    turn_id=turn.turn_id,
                    cause=InterruptCause(kind=kind, by=by),
                ),
            )
            self.agents.questions_over(
                agent.agent_id, turn.turn_id, "shutdown" if kind == "shutdown" else "interrupted"
            )
            self.agents.save_live(agent)
            self.arm_grace(agent.agent_id, turn.turn_id)
        elif kind != "shutdown":  # not running: the questions put to it end all the same
            self.agents.questions_over(agent.agent_id, "", "interrupted")
        if kind != "shutdown":
            if agent.pending:
                self.set_parked(agent, True)
            if agent.turn is None:
                agent.last_reason, agent.last_output = "aborted", None
                agent.last_failure = None
                self.store.end_turn(agent.agent_id, "aborted", None)  # the last turn counts so
                self.settle(agent)
        return previous

    # --- budgets: deadlines of running turns, held input released ------------------------

    def arm_deadline(
        self,
        agent: LiveAgent,
        turn_id: str,
        deadline: float | None | Literal[Unread.UNREAD] = Unread.UNREAD,
    ) -> None:
        """A running turn is interrupted (cause `deadline`) once its lineage's deadline passes."""
        if deadline is Unread.UNREAD:
            deadline = self.budgets.deadline(agent.lineage)
        if deadline is None:
            return
        cancel = self._deadlines.pop(turn_id, None)
        if cancel is not None:
            cancel()
        delay = max(0.0, deadline - self._now())
        agent_id = agent.agent_id
        self._deadlines[turn_id] = self.agents.timers.call_later(
            delay, lambda: self._deadline_passed(agent_id, turn_id)
        )

    def _deadline_passed(self, agent_id: str, turn_id: str) -> None:
        """The timer fired: interrupt the turn if its deadline (as stored now) has passed, else
        wait for the deadline as it stands (the host may have moved it)."""
        self._deadlines.pop(turn_id, None)
        agent = self.registry.get(agent_id)
        turn = agent.turn if agent is not None else None
        if agent is None or turn is None or turn.turn_id != turn_id or turn.interrupted:
            return
        deadline = self.budgets.deadline(agent.lineage)
        if deadline is None:
            return
        if self._now() < deadline:
            self.arm_deadline(agent, turn_id)
            return
        turn.deadline = True
        self.interrupt(agent, "deadline", None)

    def _now(self) -> float:
        """The time a deadline is judged by: the store's (when its write transaction began), or
        under a manual clock the clock's own, which `clock/advance` moves inside one request."""
        clock = self.settings.clock
        return clock.wall() if clock.manual else self.store.clock()

    def rearm_deadlines(self) -> None:
        """Deadline timers for exactly the running turns (after a lost group or a new deadline)."""
        running = {a.turn.turn_id: a for a in self.registry if a.turn is not None}
        for turn_id in [t for t in self._deadlines if t not in running]:
            self._deadlines.pop(turn_id)()
        for turn_id, agent in running.items():
            assert agent.turn is not None
            if not agent.turn.interrupted:
                self.arm_deadline(agent, turn_id)

    def release(self, below: str) -> list[str]:
        """Budgets changed at `below`: held agents under it start their queued turns."""
        started = []
        for agent in self.registry:
            if agent.held_by is not None and below in agent.lineage:
                agent.held_by = None
                self.pump(agent)
                if agent.turn is not None:
                    started.append(agent.agent_id)
        return started

    def arm_grace(self, agent_id: str, turn_id: str) -> None:
        """The interrupted turn is force-ended if the host has not ended it within the grace."""
        self._grace[turn_id] = self.agents.timers.call_later(
            self.settings.interrupt_grace, lambda: self._force_end(agent_id, turn_id)
        )

    def _force_end(self, agent_id: str, turn_id: str) -> None:
        """The host did not end an interrupted turn within the grace period."""
        self._grace.pop(turn_id, None)
        agent = self.registry.get(agent_id)
        if agent is not None and agent.turn is not None and agent.turn.turn_id == turn_id:
            self.end_turn(agent, "aborted", None, cause="interrupt-timeout")

    def rearm_grace(self, interrupted: dict[str, str]) -> None:
        """Grace timers run exactly for `interrupted` (turn id -> agent id): the others are
        cancelled, a missing one is armed again for a full grace period (see rebuild)."""
        for turn_id in [t for t in self._grace if t not in interrupted]:
            self._grace.pop(turn_id)()
        for turn_id, agent_id in interrupted.items():
            if turn_id not in self._grace:
                self.arm_grace(agent_id, turn_id)
