"""Settlement (SEMANTICS.md sections 1 and 8): when an activation ends, its notice, draining."""

from __future__ import annotations

from collections.abc import Callable

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.core.registry import CONTINUABLE, ONE_SHOT, LiveAgent
from subagentd.core.report_rate import ReportRate
from subagentd.core.scheduling import Scheduler
from subagentd.core.stamps import mint
from subagentd.message_fences import fence_token
from subagentd.schema.messages import Message, Source, TextBlock
from subagentd.schema.notifications import AgentSettled, AgentStatus
from subagentd.schema.records import SessionRecord
from subagentd.schema.runner import RunnerFailure


class Settlement:
    """Settles agents nothing keeps live, tells their parents, drains closing roots.

    It builds the Scheduler, handing it the three decisions that are settlement's (settle an
    idle agent, dispose a one-shot one after its turn, take a draining one a step on): the two
    call each other, and this way neither module imports the other's."""

    def __init__(
        self,
        agents: Agents,
        rate: ReportRate,
        signal_elsewhere: Callable[[str, str], bool],
        recover_children: Callable[[str], int],
    ) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.rate = rate
        self.scheduler = Scheduler(
            agents,
            settle=self.maybe_settle,
            dispose=self.dispose,
            drain=self.drain_step,
            signal_elsewhere=signal_elsewhere,
        )
        # ends the open turns of its children that a lapsed process left (Recovery's, reached
        # through the service): their notices are input that must run before it settles
        self.recover_children = recover_children

    # --- settling ------------------------------------------------------------------------

    def maybe_settle(self, agent: LiveAgent) -> None:
        """A continuable agent with no turn, no waiting input and no live child settles."""
        if (
            agent.kind == CONTINUABLE
            and not agent.disposing
            and agent.turn is None
            and agent.pending == 0
            and not self.registry.has_live_children(agent)
        ):
            if self.recover_children(agent.agent_id):  # their notices are its input now
                self.maybe_settle(agent)  # it settles only once nothing is left to run
                return
            # the inbox as committed decides: another process may have queued a message here
            # (its signal may not be taken yet); under this group's write lock nothing else can
            queued, _ = self.store.inbox_counts(agent.agent_id)
            if queued:  # a waking input (the sender put parked ones back in the queue too)
                agent.pending = sum(self.store.inbox_counts(agent.agent_id))
                self.scheduler.set_parked(agent, False)
                self.scheduler.pump(agent)
                return
            self.dispose(agent, agent.last_reason or "completed")

    def leave(self, agent: LiveAgent) -> None:
        """The agent is no longer live here: out of the registry, its lease released."""
        self.registry.remove(agent)
        self.agents.questions_over(agent.agent_id, None, "ended")
        self.rate.forget(agent.agent_id)
        self.agents.quotas.forget(agent.agent_id)
        self.store.drop_lease(agent.agent_id, self.agents.owner)
        if self.agents.settings.status_events:
            self.agents.emit("agent/status", AgentStatus(agent_id=agent.agent_id, status="ready"))

    def dispose(self, agent: LiveAgent, reason: str) -> None:
        """The activation ends: the host drops it, a continuable child's parent gets its notice."""
        self.leave(agent)
        if agent.parked and agent.pending == 0:
            self.store.set_parked(agent.agent_id, False)
        settled: dict[str, object] = {"reason": reason}
        if agent.last_failure is not None:
            settled["runner"] = agent.last_failure
        self.agents.record(agent.agent_id, None, "settled", settled)
        self.agents.emit("agent/settled", AgentSettled(agent_id=agent.agent_id, reason=reason))
        if agent.parent_id is not None:
            parent = self.registry.get(agent.parent_id)
            # a one-shot child's output goes back with its host's delegation call; a root held
            # for an MCP client has none, so it gets the output as a notice too
            if agent.kind == CONTINUABLE or (parent is not None and parent.held):
                self.notify_settled(
                    agent.agent_id,
                    agent.parent_id,
                    parent,
                    agent.last_reason,
                    agent.last_output,
                    one_shot=agent.kind == ONE_SHOT,
                    failure=agent.last_failure,
                )
        owner = self.registry.get(agent.owner_id)  # the durable parent, or who adopted it
        if owner is not None:
            if owner.disposing:
                self.drain_step(owner)
            else:
                self.scheduler.pump(owner)

    def notify_settled(
        self,
        child_id: str,
        parent_id: str,
        parent: LiveAgent | None,
        reason: str | None,
        output: str | None,
        one_shot: bool = False,
        failure: RunnerFailure | None = None,
    ) -> None:
        """The settlement notice (SEMANTICS.md section 8): a waking input, or only recorded in the
        parent's transcript when the parent is closing or is a one-shot child — except for a
        root held for an MCP client, which gets it queued even while closing (PROTOCOL.md
        section 5: nothing held for the client is recorded as delivered to it)."""
        first = texts.SETTLED_FIRST_LINE.get(
            reason or "completed", texts.SETTLED_FIRST_LINE["error"]
        )
        if one_shot and (reason or "completed") == "completed":
            first = texts.ONE_SHOT_FINISHED
        first = first.format(id=texts.shown(child_id))
        blocks = [TextBlock(text=first), *runner_blocks(failure)]
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
        held = parent is not None and parent.held
        if not held and (
            (parent is not None and parent.disposing) or self._one_shot(parent, stored)
        ):
            # a closing parent, or a one-shot one (it never runs another turn): recorded, not woken
            self.agents.record(
                parent_id, None, "notice", Message(message_id=mint(), content=blocks, source=source)
            )
            return
        self.scheduler.accept(parent_id, blocks, source, parent, bool(stored and stored.parked))

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
        self.agents.closing.setdefault(root.agent_id, []).append(done)
        draining = [a for a in [*self.registry.subtree(root), root] if not a.disposing]
        finishing = self._finishing(draining)
        for agent in draining:
            agent.disposing = True
            if agent.turn is not None and agent.agent_id not in finishing:
                self.scheduler.interrupt(agent, "shutdown", None)
            self.agents.save_live(agent)
        for agent in draining:
            if self.registry.get(agent.agent_id) is agent:
                self.drain_step(agent)

    def _finishing(self, draining: list[LiveAgent]) -> set[str]:
        """The running children spawned with `on_parent_close: "finish"`: a close (not a
        shutdown) lets their open turn end before they are disposed."""
        if self.agents.shutting_down:
            return set()
        running = [a.agent_id for a in draining if a.turn is not None and a.parent_id is not None]
        rows = self.store.spending_rows(running) if running else {}
        return {sid for sid, row in rows.items() if row.close_policy == "finish"}

    def drain_step(self, agent: LiveAgent) -> None:
        """A draining agent leaves once its turn has ended and its live children are gone."""
        if agent.turn is not None or self.registry.has_live_children(agent):
            return
        if agent.agent_id in self.agents.closing:
            self._check_closed(agent)
        else:
            self.dispose(agent, "closed")

    def _check_closed(self, agent: LiveAgent) -> None:
        closing = self.agents.closing
        waiters = closing.get(agent.agent_id)
        if waiters is None or agent.turn is not None or self.registry.has_live_children(agent):
            return
        del closing[agent.agent_id]
        if self.registry.get(agent.agent_id) is agent:
            self.leave(agent)
            self.agents.record(agent.agent_id, None, "closed", {})
        for done in waiters:
            done()

    def shutdown(self, done: Callable[[], None]) -> None:
        """Drain everything: close every topmost live agent; `done` runs when all have left."""
        self.agents.shutting_down = True
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
                self.scheduler.end_turn(agent, "aborted", None, cause=cause)


def runner_blocks(failure: RunnerFailure | None) -> list[TextBlock]:
    """How a turn runner's process failed, for the notice: its status, then the last lines of
    its stderr fenced by a token they do not hold (docs/rendering.md), so that text, the
    runner's own, cannot pass for subagentd's lines around it."""
    if failure is None:
        return []
    tail = failure.stderr_tail
    if not tail:
        never_ran = failure.status.startswith(texts.RUNNER_NOT_STARTED.partition("{")[0])
        line = texts.RUNNER_FAILED_TO_START if never_ran else texts.RUNNER_FAILED_SILENT
        return [TextBlock(text=line.format(status=failure.status))]
    token = fence_token(tail, tail)
    return [
        TextBlock(text=texts.RUNNER_FAILED.format(status=failure.status, token=token)),
        TextBlock(text=f"<stderr-{token}>\n{tail}\n</stderr-{token}>"),
    ]
