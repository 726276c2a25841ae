"""The four model-facing tools, in the exact order of checks SEMANTICS.md sections 4-7 fix.

Longer than ~300 lines on purpose: the four tools' checks read top to bottom in the order the
semantics lists them, with the tool filter they share; split, one rule's order would span files.
"""

from __future__ import annotations

from subagentd.core import texts
from subagentd.core.activation import Activator
from subagentd.core.agents import Agents
from subagentd.core.descriptors import DescriptorProblem, filtered_tools, parse_descriptor
from subagentd.core.kept_listings import Listings, live_statuses
from subagentd.core.leases import Leases
from subagentd.core.listing import (
    children,
    descendants,
    mark_parked,
    project,
    render,
    with_held,
)
from subagentd.core.questions import Questions
from subagentd.core.registry import CONTINUABLE, LiveAgent
from subagentd.core.report_rate import ReportRate
from subagentd.core.scheduling import Scheduler
from subagentd.errors import BudgetExceededError, QuotaExceededError, SubagentdError, error_for
from subagentd.schema.codes import Code
from subagentd.schema.listing import Status
from subagentd.schema.messages import Source, TextBlock
from subagentd.schema.tools import (
    InterruptAgentArgs,
    InterruptAgentResult,
    ListAgentsArgs,
    ListAgentsResult,
    ReportArgs,
    ReportResult,
    SendMessageArgs,
    SendMessageResult,
)


def _not_delivered(code: Code, reason: str, cause: Code | None = None) -> SubagentdError:
    """A send_message refusal; `cause` refines `data.reason` for the host (the model sees the
    text only): NOT_RESUMABLE with cause UNKNOWN_AGENT is a target that does not exist."""
    error = error_for(code, texts.NOT_DELIVERED.format(reason=reason))
    if cause is not None:
        error.data = {"reason": cause.name}
    return error


def _other_parent(caller: LiveAgent, target_id: str) -> str:
    """Why a send_message to an agent the caller did not start is refused: a child that writes
    to its own parent is pointed at `report`."""
    shown_id = texts.shown(target_id)
    if caller.parent_id == target_id:
        return texts.SEND_TO_PARENT.format(id=shown_id)
    return texts.SEND_OTHER_PARENT.format(id=shown_id)


def draining_text(root: str) -> str:
    return texts.DRAINING_BELOW.format(root=texts.shown(root)) if root else texts.DRAINING_ALL


class ToolRules:
    """send_message, interrupt_agent, list_agents and report; authority only from the caller."""

    def __init__(
        self,
        agents: Agents,
        leases: Leases,
        activator: Activator,
        scheduler: Scheduler,
        rate: ReportRate,
        questions: Questions,
    ) -> None:
        self.agents = agents
        self.questions = questions
        self.store = agents.store
        self.registry = agents.registry
        self.settings = agents.settings
        self.quotas = agents.quotas
        self.leases = leases
        self.activator = activator
        self.scheduler = scheduler
        self.rate = rate
        self.listings = Listings(agents.store)  # children listings kept while storage stands

    def send_message(
        self, caller: str, activation: str | None, args: SendMessageArgs
    ) -> SendMessageResult:
        target_id = args.subagent_id
        shown_id = texts.shown(target_id)
        live_caller = self.agents.live_caller(caller, activation)
        target = self.registry.get(target_id)
        caller_agent = live_caller if live_caller is not None else self.registry.get(caller)
        root = self.agents.draining_root(caller_agent, target)
        if root is not None:
            raise _not_delivered(Code.DRAINING, draining_text(root))
        stored_parked = False  # a target live in another process: its parking as stored
        if target is not None:
            if live_caller is None:
                raise _not_delivered(Code.UNAUTHORIZED, texts.SEND_STALE.format(id=shown_id))
            if target.parent_id != caller:
                raise _not_delivered(Code.UNAUTHORIZED, _other_parent(live_caller, target_id))
            answered = self.questions.answer(target, args.message)
            if answered is not None:  # it answered the target's question (a one-shot's too)
                return answered
            if target.kind != CONTINUABLE:
                raise _not_delivered(
                    Code.NOT_RESUMABLE, texts.SEND_NOT_RESUMABLE.format(id=shown_id)
                )
            self._admit_message(args.message, target_id, target, None, caller)
        else:
            record = self.store.get_session(target_id)
            if record is None:
                raise _not_delivered(
                    Code.NOT_RESUMABLE,
                    texts.SEND_UNAVAILABLE.format(id=shown_id),
                    cause=Code.UNKNOWN_AGENT,
                )
            if live_caller is None:
                raise _not_delivered(Code.UNAUTHORIZED, texts.SEND_STALE.format(id=shown_id))
            if record.parent_id != caller:
                raise _not_delivered(Code.UNAUTHORIZED, _other_parent(live_caller, target_id))
            try:
                if record.kind != "subagent":
                    raise DescriptorProblem("ordinary")
                descriptor = parse_descriptor(self.store.get_descriptor(target_id))
                if descriptor.mode != CONTINUABLE:
                    raise DescriptorProblem("one-shot")
            except DescriptorProblem:
                raise _not_delivered(
                    Code.NOT_RESUMABLE, texts.SEND_NOT_RESUMABLE.format(id=shown_id)
                ) from None
            if self.leases.live_elsewhere(target_id):  # its process runs it (accept signals it)
                root = self.leases.draining_elsewhere(target_id)
                if root is not None:
                    raise _not_delivered(Code.DRAINING, draining_text(root))
                self._admit_message(args.message, target_id, None, None, caller)
                stored_parked = record.parked
            else:
                self._admit_message(args.message, target_id, None, record.parent_id, caller)
                target = self.activator.activate(
                    target_id,
                    record.parent_id,
                    CONTINUABLE,
                    record.depth,
                    record.parked,
                    resume=True,
                    tools=filtered_tools(descriptor.tool_filter),
                    stored=record,
                    descriptor=descriptor,
                )
        message_id = self.scheduler.accept(
            target_id,
            [TextBlock(text=args.message)],
            Source(kind="coordinator", form="relay", sender_session_id=caller),
            target,
            stored_parked,
        )
        return SendMessageResult(text=texts.SEND_OK.format(id=shown_id), message_id=message_id)

    def _admit_message(
        self,
        message: str,
        target_id: str,
        target: LiveAgent | None,
        resume_parent: str | None,
        parent_id: str,
    ) -> None:
        """Quotas and budgets for a send_message that passed every rule (a cold resume also
        activates); `parent_id`: the target's durable parent (the caller)."""
        try:
            self.quotas.text(texts.THE_MESSAGE, message)
            self.quotas.inbox(target_id, target)
            if target is None and resume_parent is not None:  # a cold resume here
                self.quotas.activation(resume_parent)
            self.quotas.database()
            budgets = self.agents.budgets
            budgets.require(
                target.lineage if target is not None else budgets.lineage(target_id, parent_id)
            )
        except (QuotaExceededError, BudgetExceededError) as exc:
            raise exc.reworded(texts.NOT_DELIVERED) from None

    def interrupt_agent(
        self, caller: str, activation: str | None, args: InterruptAgentArgs
    ) -> InterruptAgentResult:
        target_id = args.agent_id
        shown_id, shown_caller = texts.shown(target_id), texts.shown(caller)
        live_caller = self.agents.live_caller(caller, activation)
        if live_caller is None:
            raise error_for(Code.UNAUTHORIZED, texts.INTERRUPT_STALE.format(id=shown_id))
        if target_id == caller:
            raise error_for(Code.UNAUTHORIZED, texts.INTERRUPT_SELF.format(caller=shown_caller))
        done = texts.INTERRUPT_OK.format(id=shown_id)
        target = self.registry.get(target_id)
        if target is None:  # maybe live in another process: its recorded ancestry decides
            elsewhere = self.store.live_record(target_id)
            if (
                elsewhere is not None
                and elsewhere.kind == CONTINUABLE
                and not elsewhere.disposing
                and self.leases.live_elsewhere(target_id)
            ):
                ancestry = tuple(elsewhere.ancestry.split())
                self._authorize_interrupt(live_caller, ancestry, elsewhere.parent_id, target_id)
                status = self.agents.status_of(target_id)
                self.leases.signal_elsewhere(target_id, "parent", caller)
                return InterruptAgentResult(text=done, accepted=True, previous_status=status)
        if target is None or target.kind != CONTINUABLE or target.disposing:
            previous = None
            if self._below(caller, target_id):  # nothing is told about other trees
                previous = self.agents.status_of(target_id)  # another process may hold it live
            return InterruptAgentResult(text=done, accepted=True, previous_status=previous)
        self._authorize_interrupt(live_caller, target.ancestry, target.parent_id, target_id)
        previous = self.scheduler.interrupt(target, "parent", caller)
        return InterruptAgentResult(text=done, accepted=True, previous_status=previous)

    def _authorize_interrupt(
        self, caller: LiveAgent, ancestry: tuple[str, ...], parent_id: str | None, target_id: str
    ) -> None:
        """Only an ancestor's current activation may interrupt (SEMANTICS.md section 5)."""
        if caller.activation_id in ancestry:
            return
        if caller.parent_id is not None and caller.parent_id == parent_id:
            reason = texts.INTERRUPT_SIBLING
        else:
            reason = texts.INTERRUPT_NOT_DESCENDANT
        raise error_for(
            Code.UNAUTHORIZED,
            reason.format(id=texts.shown(target_id), caller=texts.shown(caller.agent_id)),
        )

    def _below(self, ancestor: str, agent_id: str) -> bool:
        """Whether the session `agent_id` exists below `ancestor` (durable parent links)."""
        seen = {agent_id}
        record = self.store.get_session(agent_id)
        while record is not None and record.parent_id is not None:
            if record.parent_id == ancestor:
                return True
            if record.parent_id in seen:
                return False  # a cycle in corrupt data
            seen.add(record.parent_id)
            record = self.store.get_session(record.parent_id)
        return False

    def list_agents(
        self, caller: str, activation: str | None, args: ListAgentsArgs
    ) -> ListAgentsResult:
        agents = self.agents
        live = self.registry.lookup
        key = (args.scope, caller)
        kept: tuple[list[Status | None], ListAgentsResult] | None = agents.kept(key)
        if kept is not None and kept[0] == live_statuses(kept[1].agents, live):
            return self._held(
                kept[1]
            )  # read together with an earlier request, the live agents as they were
        if args.scope == "descendants":
            rows, text = descendants(self.store, caller, live, agents.elsewhere())
            result = ListAgentsResult(text=text, agents=rows)
        else:
            result = self._children(caller)
        agents.keep(key, (live_statuses(result.agents, live), result))
        return self._held(result)

    def _held(self, result: ListAgentsResult) -> ListAgentsResult:
        """Idle rows whose tree a spent budget holds say so (marked on every read: whether a
        budget holds a tree changes without any row's status changing)."""
        marked = with_held(result.agents, self.registry.held_tree)
        if marked is None:
            return result
        return ListAgentsResult(text=render(marked, self.registry.lookup), agents=marked)

    def _children(self, caller: str) -> ListAgentsResult:
        """list_agents {scope: children}: the kept listing while it holds (Listings), else read."""
        live = self.registry.lookup
        same, changes, outside = self.listings.get(caller, live)
        if same is not None:
            return ListAgentsResult(text=same.text, agents=same.rows)
        store = self.store
        read = children(
            store, caller, self.agents.owner, store.clock(), live, self.settings.owner_alive
        )
        if read is None:  # some stored state cannot be read: row by row, not kept
            self.listings.forget(caller)
            status = self.agents.status_lookup()
            listed = project(store, caller, False, status, include_one_shot=False, endings=True)
            return ListAgentsResult(text=render(mark_parked(store, listed), live), agents=listed)
        listed, by_lease = read
        text = render(listed, live)
        if by_lease:
            self.listings.forget(caller)
        else:
            self.listings.keep(caller, changes, outside, listed, text, live)
        return ListAgentsResult(text=text, agents=listed)

    def report(self, caller: str, activation: str | None, args: ReportArgs) -> ReportResult:
        child = self.agents.live_caller(caller, activation)
        shown_caller = texts.shown(caller)
        if child is None or child.kind != CONTINUABLE:
            raise error_for(Code.UNAUTHORIZED, texts.REPORT_NOT_REPORTER.format(id=shown_caller))
        if child.disposing:
            raise error_for(Code.ACTIVATION_CLOSING, texts.REPORT_DISPOSING.format(id=shown_caller))
        parent = self.registry.get(child.parent_id)
        if parent is None:
            raise error_for(Code.PARENT_UNAVAILABLE, texts.REPORT_PARENT_NOT_LIVE)
        try:
            self.quotas.text(texts.THE_REPORT, args.output)
            if self.settings.report_delivery != "quiet" or parent.held:  # it is queued
                self.quotas.inbox(parent.agent_id, parent)
            self.quotas.database()
            if self.settings.report_delivery != "quiet":  # a wakeup starts a turn of the parent
                self.agents.budgets.require(parent.lineage)
            self.quotas.report(caller, args.output)  # last: it charges the child's budget
        except (QuotaExceededError, BudgetExceededError) as exc:
            raise exc.reworded(texts.REPORT_NOT_DELIVERED) from None
        blocks = [
            TextBlock(text=texts.REPORT_HEADER.format(id=shown_caller)),
            TextBlock(text=args.output),
        ]
        source = Source(kind="subagent-report", form="relay", sender_session_id=caller)
        quiet = self.settings.report_delivery == "quiet" or not self.rate.wakeup_allowed(child)
        if quiet and not parent.held:  # a held root's input is queued for its client: kept
            message_id = self.scheduler.inject(parent, blocks, source)
        else:
            message_id = self.scheduler.accept(parent.agent_id, blocks, source, parent)
        turn_id = child.turn.turn_id if child.turn else None
        self.agents.record(
            caller, turn_id, "report", {"message_id": message_id, "output": args.output}
        )
        return ReportResult(
            text=texts.REPORT_OK.format(message_id=message_id), message_id=message_id
        )

    def can_report(self, caller: str | None, activation: str | None) -> bool:
        """Whether `report` is offered to this caller (a live continuable child)."""
        agent: LiveAgent | None = self.agents.live_caller(caller, activation) if caller else None
        return agent is not None and agent.kind == CONTINUABLE and not agent.disposing

    def can_ask(self, caller: str | None, activation: str | None) -> bool:
        """Whether `ask_parent` is offered to this caller (a live child, either mode)."""
        agent: LiveAgent | None = self.agents.live_caller(caller, activation) if caller else None
        return agent is not None and agent.parent_id is not None and not agent.disposing

    def offered_tools(self, caller: str | None, activation: str | None) -> tuple[str, ...]:
        """The tools `tools/list` shows this caller: the served set (--tools), less what its
        descriptor's tool_filter removes; `report` only for a live continuable child,
        `ask_parent` only for a live child."""
        allowed = self.caller_tools(caller) if caller else None
        return tuple(
            name
            for name in self.settings.tools
            if (name in allowed if allowed is not None else True)
            and (name != "report" or self.can_report(caller, activation))
            and (name not in ("ask_parent", "ask_user") or self.can_ask(caller, activation))
        )

    def caller_tools(self, caller: str) -> frozenset[str] | None:
        """The tools the caller's tool_filter leaves it (None: all): kept on its live activation,
        else read from its descriptor (a caller that is not live, e.g. a stale one)."""
        agent = self.registry.get(caller)
        if agent is not None:
            return agent.tools
        record = self.store.get_session(caller)
        if record is None or record.kind != "subagent":
            return None
        try:
            return filtered_tools(parse_descriptor(self.store.get_descriptor(caller)).tool_filter)
        except DescriptorProblem:
            return None

    def check_tool_allowed(self, caller: str, name: str) -> None:
        """A tool the caller's tool_filter removes is refused, naming it."""
        allowed = self.caller_tools(caller)
        if allowed is not None and name not in allowed:
            raise error_for(
                Code.UNAUTHORIZED, texts.TOOL_FILTERED.format(tool=name, caller=texts.shown(caller))
            )
