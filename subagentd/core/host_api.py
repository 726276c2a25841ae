"""The trusted host API (PROTOCOL.md section 4): sessions, spawning, turns, inputs, interrupts."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from subagentd.core import texts
from subagentd.core.activation import Activator
from subagentd.core.agents import Agents
from subagentd.core.descriptors import checked_agent, filtered_tools
from subagentd.core.host_records import HostRecords
from subagentd.core.identifiers import check_new_id
from subagentd.core.leases import Leases
from subagentd.core.registry import KIND_OF_MODE, ORDINARY
from subagentd.core.scheduling import Scheduler
from subagentd.core.settlement import Settlement
from subagentd.core.stamps import mint, now
from subagentd.core.tools import draining_text
from subagentd.errors import (
    ActivationClosingError,
    AdmissionDrainingError,
    CallerUnauthorizedError,
    ChildDuplicateError,
    DepthExceededError,
    InvalidParamsError,
    StateInvalidError,
)
from subagentd.schema.host_methods import (
    InterruptResult,
    MessageIdResult,
    MessageInfo,
    OpenParams,
    OpenResult,
    SpawnParams,
    SpawnResult,
    TurnBeginResult,
    TurnEndParams,
)
from subagentd.schema.messages import DESCRIPTOR_VERSION, Descriptor, Message, Source, TextBlock
from subagentd.schema.records import SessionRecord
from subagentd.schema.runner import RunnerFailure

_encode = msgspec.json.encode


class HostApi:
    """Methods only the host may call; they bypass lineage rules but keep every state rule."""

    def __init__(
        self,
        agents: Agents,
        leases: Leases,
        activator: Activator,
        scheduler: Scheduler,
        settlement: Settlement,
        records: HostRecords,
    ) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.settings = agents.settings
        self.quotas = agents.quotas
        self.budgets = agents.budgets
        self.leases = leases
        self.activator = activator
        self.settlement = settlement
        self.scheduler = scheduler
        self.records = records

    def open(self, params: OpenParams, hold: bool = False) -> OpenResult:
        """Make an ordinary session live; `hold` (the --caller root) keeps its input queued for the
        MCP client instead of starting turns that no host was told about (PROTOCOL.md section 5)."""
        agent_id = mint() if params.agent_id is None else params.agent_id
        if self.registry.get(agent_id) is not None:
            raise StateInvalidError(f'agent "{agent_id}" is already live')
        if self.agents.shutting_down:
            raise AdmissionDrainingError(texts.DRAINING_ALL)
        record = self.store.get_session(agent_id)
        if record is None:
            check_new_id("agent_id", agent_id)
            depth = 0
            if params.parent_id is not None:
                depth = self.agents.require_session(params.parent_id).depth + 1
            self.quotas.text(texts.THE_LABEL, params.label, label=True)
            self.quotas.activation(params.parent_id)
            record = SessionRecord(
                id=agent_id,
                parent_id=params.parent_id,
                kind="ordinary",
                label=params.label,
                created_at=now(),
                depth=depth,
            )
            self.store.insert_session(record)
        elif record.kind != "ordinary":
            raise StateInvalidError(
                f'agent "{agent_id}" is a subagent session; its parent resumes it with send_message'
            )
        else:
            self.quotas.activation(record.parent_id)
        self.budgets.opened(record.id, record.parent_id, params.budget)
        agent = self.activator.activate(
            record.id, record.parent_id, ORDINARY, record.depth, record.parked
        )
        agent.held = hold
        self.agents.tracing.agent_opened(agent_id, params.traceparent)
        self.scheduler.pump(agent)
        return OpenResult(agent_id=agent_id, activation_id=agent.activation_id)

    def close_root(self, agent_id: str, done: Callable[[], None]) -> None:
        agent = self.agents.require_live(agent_id)
        if agent.kind != ORDINARY:
            raise StateInvalidError(
                f'agent "{agent_id}" is a subagent; subagents settle, only ordinary sessions are closed'
            )
        self.settlement.close(agent, done)

    def spawn(self, params: SpawnParams) -> SpawnResult:
        if params.child_id is not None:
            check_new_id("child_id", params.child_id)
        caller = self.agents.live_caller(params.caller, params.activation)
        if caller is None:
            self.agents.require_session(params.caller)
            raise CallerUnauthorizedError(texts.SPAWN_CALLER_NOT_LIVE.format(caller=params.caller))
        root = self.agents.draining_root(caller)
        if root is not None:
            raise AdmissionDrainingError(draining_text(root))
        if caller.disposing:
            raise ActivationClosingError(texts.SPAWN_DISPOSING.format(caller=params.caller))
        child_id = mint() if params.child_id is None else params.child_id
        if self.store.get_session(child_id) is not None:
            raise ChildDuplicateError(texts.SPAWN_DUPLICATE.format(id=child_id))
        depth = caller.depth + 1
        if depth > self.settings.max_depth:
            raise DepthExceededError(
                texts.SPAWN_TOO_DEEP.format(depth=caller.depth, max_depth=self.settings.max_depth)
            )
        descriptor = Descriptor(
            version=DESCRIPTOR_VERSION,
            mode=params.mode,
            label=params.label,
            agent_provider=params.agent_provider,
            agent_model=params.agent_model,
            persona=params.persona,
            tool_filter=params.tool_filter,
            agent=checked_agent(params.agent, self.settings.a2a_agents),
        )
        body = _encode(descriptor).decode()
        self.quotas.text(texts.THE_LABEL, params.label, label=True)
        self.quotas.text(texts.THE_PROMPT, params.prompt)
        self.quotas.descriptor(body)
        self.quotas.activation(caller.agent_id)
        self.quotas.database()
        budgets = self.budgets
        budgets.require((child_id, *caller.lineage), spawn=True, extra=params.budget)
        record = SessionRecord(
            id=child_id,
            parent_id=caller.agent_id,
            kind="subagent",
            label=params.label,
            created_at=now(),
            depth=depth,
        )
        self.store.insert_session(record, body, descriptor.mode)
        self.agents.tracing.child_spawned(child_id, caller.agent_id, params.traceparent)
        budgets.spawned(caller.lineage)
        if params.budget is not None:  # never more than the caller's lineage has left
            budgets.set(child_id, params.budget, caller.lineage)
        if params.on_parent_close != "drain":
            self.store.set_close_policy(child_id, params.on_parent_close)
        self.agents.record(child_id, None, "descriptor", descriptor)
        child = self.activator.activate(
            child_id,
            caller.agent_id,
            KIND_OF_MODE[params.mode],
            depth,
            False,
            tools=filtered_tools(params.tool_filter),
        )
        message_id = self.scheduler.accept(
            child_id,
            [TextBlock(text=params.prompt)],
            Source(kind="coordinator", form="spawn", sender_session_id=caller.agent_id),
            child,
        )
        return SpawnResult(
            child_id=child_id,
            activation_id=child.activation_id,
            message_id=message_id,
            text=texts.SPAWN_OK.format(id=texts.shown(child_id)),
        )

    def begin_turn(
        self, agent_id: str, messages: list[str] | None, traceparent: str | None = None
    ) -> TurnBeginResult:
        agent = self.agents.require_live(agent_id)
        if agent.disposing:
            raise ActivationClosingError(f'agent "{agent_id}" activation is being disposed')
        if agent.turn is not None:
            raise StateInvalidError(
                f'agent "{agent_id}" is already running turn {agent.turn.turn_id}'
            )
        for text in messages or []:
            self.quotas.text(texts.A_MESSAGE, text)
        self.budgets.require(agent.lineage)
        source = Source(kind="user", form="direct")
        built = [
            Message(message_id=mint(), content=[TextBlock(text=text)], source=source)
            for text in messages or []
        ]
        for message in built:
            self.store.insert_message(
                message.message_id,
                agent_id,
                _encode(message.content).decode(),
                _encode(source).decode(),
                "claimed",
                now(),
            )
        turn_id = self.scheduler.start_turn(
            agent, built, claimed=[m.message_id for m in built], traceparent=traceparent
        )
        return TurnBeginResult(turn_id=turn_id)

    def finish_turn(self, params: TurnEndParams, failure: RunnerFailure | None = None) -> None:
        """turns/end; `failure`: how the turn runner's process failed (runners/runner.py)."""
        agent = self.agents.require_live(params.agent_id)
        if agent.turn is None or agent.turn.turn_id != params.turn_id:
            raise StateInvalidError(
                f'turn "{params.turn_id}" is not the open turn of agent "{params.agent_id}"'
            )
        self.quotas.text(texts.THE_OUTPUT, params.output)
        self.scheduler.end_turn(
            agent, params.reason, params.output, usage=params.usage, failure=failure
        )

    def followup(self, agent_id: str, message: str) -> MessageIdResult:
        record = self.agents.require_session(agent_id)
        agent = self.registry.get(agent_id)
        root = self.agents.draining_root(agent)
        if root is None and agent is None and self.leases.live_elsewhere(agent_id):
            root = self.leases.draining_elsewhere(agent_id)
        if root is not None:
            raise AdmissionDrainingError(draining_text(root))
        self.quotas.text(texts.THE_MESSAGE, message)
        self.quotas.inbox(agent_id, agent)
        self.quotas.database()
        self.budgets.require(
            agent.lineage if agent is not None else self.budgets.lineage(agent_id, record.parent_id)
        )
        message_id = self.scheduler.accept(
            agent_id,
            [TextBlock(text=message)],
            Source(kind="user", form="followup"),
            agent,
            record.parked,
        )
        return MessageIdResult(message_id=message_id)

    def host_interrupt(self, agent_id: str) -> InterruptResult:
        self.agents.require_session(agent_id)
        agent = self.registry.get(agent_id)
        if agent is None:  # maybe live in another process: it stops the turn
            elsewhere = self.store.live_record(agent_id)
            previous = self.agents.status_of(agent_id)
            accepted = (
                elsewhere is not None
                and not elsewhere.disposing
                and self.leases.signal_elsewhere(agent_id, "user")
            )
            return InterruptResult(accepted=accepted, previous_status=previous)
        if agent.disposing:
            return InterruptResult(accepted=False, previous_status=self.agents.status_of(agent_id))
        return InterruptResult(
            accepted=True, previous_status=self.scheduler.interrupt(agent, "user", None)
        )

    def cancel_message(self, message_id: str) -> MessageInfo:
        """Withdraw a message that no turn has claimed yet (queued or parked)."""
        record = self.store.get_message(message_id)
        if record is None:
            raise InvalidParamsError(texts.NO_MESSAGE.format(id=message_id))
        if record.state not in ("queued", "parked"):
            raise StateInvalidError(
                f'message "{message_id}" is {record.state}; it cannot be cancelled'
            )
        if self.leases.live_elsewhere(record.session_id):
            raise StateInvalidError(texts.LIVE_ELSEWHERE.format(id=record.session_id))
        self.store.cancel_message(message_id)
        self.agents.record(record.session_id, None, "message_cancelled", {"message_id": message_id})
        agent = self.registry.get(record.session_id)
        if agent is not None:
            agent.pending -= 1
            self.settlement.maybe_settle(agent)
        return self.records.get_message(message_id)
