"""spawn_agent and wait_agents (the tools that let a model delegate alone), and agents/wait_idle.

Longer than ~300 lines on purpose: when a wait is over (news, settled, held by a budget, timed
out) and what its answer says are one rule, read best next to the waits that apply it.
"""

from __future__ import annotations

from functools import partial

import msgspec

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.host_api import HostApi
from subagentd.core.listing import project
from subagentd.core.questions import FORMS
from subagentd.core.registry import ONE_SHOT, LiveAgent
from subagentd.core.scheduling import Scheduler
from subagentd.core.waits import Waiter, Waits
from subagentd.errors import error_for
from subagentd.schema.budgets import Held
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import SpawnParams, WaitIdleResult
from subagentd.schema.listing import ChildRow, Status
from subagentd.schema.messages import Message, Source, TextBlock
from subagentd.schema.records import InboxRecord
from subagentd.schema.tools import (
    SpawnAgentArgs,
    SpawnAgentResult,
    WaitAgentsArgs,
    WaitAgentsResult,
    WaitedAgent,
)

_blocks_decoder: msgspec.json.Decoder[list[TextBlock]] = msgspec.json.Decoder(list[TextBlock])
_source_decoder: msgspec.json.Decoder[Source] = msgspec.json.Decoder(Source)
NEWS = ("subagent-report", "subagent-settled", "subagent-question")  # what wait_agents collects
News = tuple[InboxRecord, Message]  # one report or settlement notice, as wait_agents takes it
FOREIGN_LOOK = 0.1  # seconds between a wait's looks at agents live in other processes
# (a look's timer clears `looking[0]`: the check its transaction ends with may arm another)


class Delegation:
    """The two delegation tools and the host's quiet-tree wait; authority only from the caller."""

    def __init__(self, agents: Agents, host: HostApi, scheduler: Scheduler, waits: Waits) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.host = host
        self.scheduler = scheduler
        self.waits = waits

    def spawn_agent(
        self, caller: str, activation: str | None, args: SpawnAgentArgs
    ) -> SpawnAgentResult:
        """agents/spawn's path, rules and errors, for the calling agent."""
        spawned = self.host.spawn(
            SpawnParams(
                caller=caller,
                activation=activation,
                label=args.label,
                prompt=args.prompt,
                mode=args.mode,
                child_id=args.child_id,
                budget=args.budget,
                agent=args.agent,
            )
        )
        return SpawnAgentResult(child_id=spawned.child_id, text=spawned.text)

    # --- wait_agents ----------------------------------------------------------------------

    def wait_agents(
        self,
        caller: str,
        activation: str | None,
        args: WaitAgentsArgs,
        token: str | int | None = None,
    ) -> WaitAgentsResult | Waiter:
        """The answer now, or a Waiter the server completes (PROTOCOL.md section 5)."""
        live = self.agents.live_caller(caller, activation)
        if live is None:
            raise error_for(
                Code.UNAUTHORIZED, texts.WAIT_NOT_LIVE.format(caller=texts.shown(caller))
            )
        if args.agent_ids is None:
            rows = project(self.store, caller, False, lambda _: "ready", include_one_shot=False)
            ids = [row.id for row in rows if isinstance(row, ChildRow)]
            if live.held:
                ids += self._one_shot_children(caller, set(ids))
        else:
            ids = list(dict.fromkeys(args.agent_ids))
            for agent_id in ids:
                record = self.store.get_session(agent_id)
                if record is None or record.parent_id != caller or record.kind != "subagent":
                    raise error_for(
                        Code.UNAUTHORIZED,
                        texts.WAIT_NOT_CHILD.format(
                            id=texts.shown(agent_id), caller=texts.shown(caller)
                        ),
                    )
        if not ids:
            return WaitAgentsResult(
                agents=[], text=texts.WAIT_NO_SUBAGENTS.format(caller=texts.shown(caller))
            )
        check = partial(self._collect, caller, live.activation_id, ids, args, [False])
        answer = check(args.timeout_ms == 0)
        if answer is not None:
            return answer
        describe = partial(self._describe, ids)
        return self.waits.add(check, args.timeout_ms, token, describe)

    def _one_shot_children(self, caller: str, listed: set[str]) -> list[str]:
        """A root held for an MCP client also waits for its one-shot children: those live now
        (their output will be queued for it, core/settlement.py) and those whose output waits."""
        senders = [
            a.agent_id
            for a in self.registry
            if a.parent_id == caller and a.kind == ONE_SHOT and a.agent_id not in listed
        ]
        for record in self.store.waiting_messages(caller):
            source = _source_decoder.decode(record.source)
            sender = source.sender_session_id
            if source.kind in NEWS and sender and sender not in listed and sender not in senders:
                stored = self.store.get_session(sender)
                if stored is not None and stored.parent_id == caller:
                    senders.append(sender)
        return senders

    def _describe(self, ids: list[str]) -> str:
        status = self.agents.status_lookup()
        working = [texts.shown(i) for i in ids if status(i) != "ready"]
        return texts.WAIT_PROGRESS.format(ids=", ".join(working) or "-")

    def _collect(
        self,
        caller: str,
        activation_id: str,
        ids: list[str],
        args: WaitAgentsArgs,
        looking: list[bool],
        timed_out: bool,
    ) -> WaitAgentsResult | None:
        """The answer once the wait is over (else None); what it returns is consumed here. A
        child working in another process is looked at again every FOREIGN_LOOK seconds (its
        news arrives by a signal, which commits here; its end alone may not)."""
        agent = self.registry.get(caller)
        gone = agent is None or agent.activation_id != activation_id
        status = self.agents.status_lookup()
        statuses = {agent_id: status(agent_id) for agent_id in ids}
        held: dict[str, Held] = {}  # idle trees a spent budget holds: nothing will arrive
        for agent_id in ids:
            if statuses[agent_id] == "idle" and (by := self.registry.held_tree(agent_id)):
                held[agent_id] = by
        working = [i for i in ids if statuses[i] != "ready" and i not in held]
        found = [] if gone else self._news(caller, set(ids))
        asking = any(message.source.form in FORMS for _, message in found)  # whatever the mode
        finished = gone or not working or asking or (args.mode == "any" and bool(found))
        if not (finished or timed_out):
            if not looking[0] and any(self.registry.lookup(i) is None for i in working):
                looking[0] = True
                self.agents.timers.call_later(FOREIGN_LOOK, partial(looking.__setitem__, 0, False))
            return None
        if found and agent is not None:
            self._consume(agent, caller, found)
        timed_out = timed_out and not finished
        return _answer(ids, statuses, working, found, timed_out, args.timeout_ms, held)

    def _consume(self, agent: LiveAgent, caller: str, found: list[News]) -> None:
        """What a wait returns is consumed: claimed, and recorded in the caller's transcript."""
        turn_id = agent.turn.turn_id if agent.turn is not None else None
        for record, message in found:
            self.store.claim_message(record.message_id, turn_id)
            self.agents.record(caller, turn_id, "message", message)
        agent.pending -= len(found)
        if agent.parked and agent.pending <= 0:
            self.scheduler.set_parked(agent, False)
        self.scheduler.pump(agent)

    def collect_settled(self, caller: str, child: str) -> WaitAgentsResult:
        """wait_agents' answer for a child that settled (an MCP task's result, core/tasks.py)."""
        agent, found = self.registry.get(caller), self._news(caller, {child})
        if found and agent is not None:
            self._consume(agent, caller, found)
        return _answer([child], {child: "ready"}, [], found, False, 0)

    def _news(self, caller: str, ids: set[str]) -> list[News]:
        """The caller's unconsumed reports and settlement notices from these children, in order."""
        found = []
        for record in self.store.waiting_messages(caller):
            source = _source_decoder.decode(record.source)
            if source.kind in NEWS and source.sender_session_id in ids:
                content = _blocks_decoder.decode(record.content)
                found.append(
                    (record, Message(message_id=record.message_id, content=content, source=source))
                )
        return found

    # --- agents/wait_idle -----------------------------------------------------------------

    def wait_idle(self, agent_id: str, timeout_ms: int) -> WaitIdleResult | Waiter:
        """Answered once no agent of the tree runs a turn or has input to run (or on timeout),
        wherever it is live: here, or in another process sharing the database."""
        self.agents.require_session(agent_id)
        looking = [False]  # a look at other processes is due (one timer at a time)
        check = partial(self._idle, agent_id, looking)
        answer = check(timeout_ms == 0)
        return answer if answer is not None else self.waits.add(check, timeout_ms)

    def _idle(self, root_id: str, looking: list[bool], timed_out: bool) -> WaitIdleResult | None:
        elsewhere = self.agents.elsewhere()
        if elsewhere:
            running, runnable, foreign = self._tree_activity(root_id, elsewhere)
        else:  # every live agent is here: the registry alone knows the tree's live part
            root = self.registry.get(root_id)
            tree = [] if root is None else [root, *self.registry.subtree(root)]
            running = [a.agent_id for a in tree if a.turn is not None]
            runnable = [
                a.agent_id
                for a in tree
                if a.pending and not (a.parked or a.held or a.held_by is not None)  # by a budget
            ]
            foreign = False
        idle = not running and not runnable
        if not (idle or timed_out):
            if foreign and not looking[0]:
                # nothing here commits when another process's agent ends its turn: look again
                # (the timer's transaction ends with Waits.check, which calls this again)
                looking[0] = True
                self.agents.timers.call_later(FOREIGN_LOOK, partial(looking.__setitem__, 0, False))
            return None
        return WaitIdleResult(idle=idle, running=running or None, runnable=runnable or None)

    def _tree_activity(
        self, root_id: str, elsewhere: dict[str, Status]
    ) -> tuple[list[str], list[str], bool]:
        """(running, runnable, whether any of them is live in another process) over the whole
        stored tree below `root_id`, in tree order: an agent live here by its registry entry,
        one live elsewhere by its lease (`running`, `waiting`) or its committed inbox (a queued
        message)."""
        ids = [root_id, *(row[0] for row in self.store.tree_rows(root_id, True))]
        live = self.registry.lookup
        running: list[str] = []
        runnable: list[str] = []
        foreign = False
        for agent_id in ids:
            agent = live(agent_id)
            if agent is not None:
                if agent.turn is not None:
                    running.append(agent_id)
                elif agent.pending and not (agent.parked or agent.held):
                    runnable.append(agent_id)
            elif agent_id in elsewhere:
                if elsewhere[agent_id] in ("running", "waiting"):  # in its turn
                    running.append(agent_id)
                    foreign = True
                elif self.store.inbox_counts(agent_id).queued:
                    runnable.append(agent_id)
                    foreign = True
        return running, runnable, foreign


def _answer(
    ids: list[str],
    statuses: dict[str, Status],
    working: list[str],
    found: list[News],
    timed_out: bool,
    timeout_ms: int,
    held: dict[str, Held] | None = None,
) -> WaitAgentsResult:
    """wait_agents' answer: the collected messages' blocks, then which are still working (and
    which are held by a spent budget)."""
    held = held or {}
    entries = {i: WaitedAgent(agent_id=i, status=statuses[i], held=held.get(i)) for i in ids}
    blocks: list[str] = []
    for _, message in found:
        parts = [block.text for block in message.content]
        blocks += parts
        sender = message.source.sender_session_id or ""
        entry = entries[sender]
        if message.source.form in FORMS:
            entry.questions = [*(entry.questions or []), "\n".join(parts)]
        elif message.source.kind == "subagent-report":
            entry.reports = [*(entry.reports or []), parts[1] if len(parts) > 1 else ""]
        else:
            entry.reason = _reason(parts[0], sender)
            entry.output = parts[2] if len(parts) > 2 else None
    shown = ", ".join(texts.shown(i) for i in working)
    if timed_out:
        blocks.append(texts.WAIT_TIMED_OUT.format(ms=timeout_ms, ids=shown))
    elif working:
        blocks.append(texts.WAIT_STILL_WORKING.format(ids=shown))
    else:
        blocks.append(texts.WAIT_NONE_WORKING)
    if held:
        told = [
            texts.WAIT_HELD_ONE.format(
                id=texts.shown(i), why=texts.held_why(i, by.budget, by.agent_id)
            )
            for i, by in held.items()
        ]
        blocks.append(texts.WAIT_HELD.format(held=", ".join(told)))
    return WaitAgentsResult(
        agents=list(entries.values()),
        timed_out=timed_out,
        still_working=working,
        text="\n".join(blocks),
        blocks=blocks,
    )


def _reason(first_line: str, sender: str) -> str | None:
    """The reason a settlement notice's first line stands for (SEMANTICS.md section 8)."""
    if first_line == texts.ONE_SHOT_FINISHED.format(id=(shown := texts.shown(sender))):
        return "completed"
    for reason, line in texts.SETTLED_FIRST_LINE.items():
        if line.format(id=shown) == first_line:
            return reason
    return None
