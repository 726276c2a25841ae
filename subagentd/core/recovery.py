"""Recovery: turns a dead process left open end as errors; a lost commit group is rebuilt."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.descriptors import DescriptorProblem, filtered_tools, parse_descriptor
from subagentd.core.leases import Leases
from subagentd.core.registry import CONTINUABLE, ORDINARY, LiveAgent, OpenTurn
from subagentd.core.report_rate import ReportRate
from subagentd.core.scheduling import Scheduler
from subagentd.core.settlement import Settlement
from subagentd.core.stamps import stamp
from subagentd.schema.messages import Source, TextBlock

if TYPE_CHECKING:
    from subagentd.schema.records import LiveRecord

log = logging.getLogger("subagentd")

_OWNERS_KEPT = 86400.0  # seconds a fenced owner row is kept (a process stopped longer finds none)
KEYS_EVERY = 3600.0  # seconds between two heartbeats that prune idempotency keys (per tree locks)


class Recovery:
    """Makes memory and storage agree after a crash (any process's) or a lost commit group."""

    def __init__(
        self,
        agents: Agents,
        leases: Leases,
        scheduler: Scheduler,
        settlement: Settlement,
        rate: ReportRate,
    ) -> None:
        self.agents = agents
        self.store = agents.store
        self.registry = agents.registry
        self.settings = agents.settings
        self.leases = leases
        self.settlement = settlement
        self.scheduler = scheduler
        self.rate = rate
        self.stale = False  # a rebuild could not read the database (resync retries it)
        self._keys_pruned = -math.inf  # settings.clock.monotonic() a heartbeat_due last said so
        self.after_rebuild: Callable[[], None] | None = None  # forget memory kept beside it

    # --- crashed processes ---------------------------------------------------------------

    def heartbeat_due(self) -> bool:
        """Whether the heartbeat has anything to write, read without any lock: this process
        fenced (its row fenced or gone: the heartbeat's group finds out and lets its agents
        go), an owner to fence (lapsed, or its process gone from this host) or a fenced one
        to forget, a turn no valid owner holds, a signal for this process, or the hourly
        pruning of idempotency keys. A backend that locks per tree takes every tree's lock for the heartbeat only
        then (wire/timers.py), so a quiet deployment's heartbeats hold up no tree. A read
        that fails says due: the heartbeat then meets the failure its own way."""
        try:
            return self._due()
        except Exception:
            return True

    def _due(self) -> bool:
        store, owner = self.store, self.agents.owner  # check_file: the heartbeat's own
        clock = store.clock()
        mine = False
        for other, expires_at, fenced in store.owners():
            if other == owner:
                if fenced:
                    return True
                mine = True
            elif fenced:
                if expires_at < clock - _OWNERS_KEPT:
                    return True
            elif not self.settings.owner_alive(other):
                return True
            elif expires_at <= clock and store.lapse_seen(expires_at, clock):
                return True
        if not mine:
            return True
        orphaned = store.orphaned_turns(owner, -math.inf)
        if any(self.registry.get(session_id) is None for session_id, _ in orphaned):
            return True
        if store.has_signals(owner):
            return True
        now = self.settings.clock.monotonic()
        if self._keys_pruned == -math.inf:  # start-up's recover() pruned them: from now on
            self._keys_pruned = now
        if now - self._keys_pruned < KEYS_EVERY:
            return False
        self._keys_pruned = now
        return True

    def heartbeat(self) -> None:
        """Reap what processes that died or stalled past the TTL left (leases are renewed by
        the store: at commit time and by its renewal thread)."""
        if not self.store.check_file():  # deleted or replaced: every write is refused now
            return
        self.recover()
        self.scheduler.take_signals()  # in case a doorbell's ring was lost

    def recover(self) -> int:
        """Turns left open by a process that died or stalled past the TTL (this one before a
        restart, or another one sharing the database) end with reason error (cause crash);
        parents are told. Runs at start-up and with every heartbeat: owners that lapsed are
        fenced first, then the open turns no valid owner holds are read (one query)."""
        clock = self.store.clock()
        owner = self.agents.owner
        for other, _, fenced in self.store.owners():
            if other != owner and not fenced:
                self.leases.holds(other)  # fences it if it lapsed
        # every owner that lapsed is fenced now; one expired by the clock but not fenced (it
        # expired while the database did not answer, Leases.holds) still holds its turns
        recovered = [
            (session_id, turn_id)
            for session_id, turn_id in self.store.orphaned_turns(owner, -math.inf)
            if self.registry.get(session_id) is None
        ]
        for session_id, turn_id in recovered:
            self.recover_turn(session_id, turn_id)
        self.store.prune_idempotent(
            stamp(self.settings.clock.wall() - self.settings.idempotency_retention * 86400)
        )
        self.store.prune_owners(clock - _OWNERS_KEPT)
        return len(recovered)

    def recover_children(self, parent_id: str) -> int:
        """Before a continuable agent settles: its children's open turns that no valid owner
        holds (their process died or lapsed, and no heartbeat has ended them yet) end now, so
        their notices reach it while it is live and run before it settles; how many."""
        count = 0
        for child_id, turn_id in self.store.open_children(parent_id):
            if self.registry.get(child_id) is not None:
                continue
            lease = self.store.get_lease(child_id)
            if lease is not None and (
                lease.owner == self.agents.owner or self.leases.holds(lease.owner)
            ):
                continue  # live in another process that holds it validly
            self.recover_turn(child_id, turn_id)
            count += 1
        return count

    def recover_turn(self, session_id: str, turn_id: str) -> None:
        """End a turn its process left open when it died; a continuable child's parent is told."""
        self.store.end_turn(session_id, "error", None)
        self.agents.record(
            session_id,
            turn_id,
            "turn_end",
            {"turn_id": turn_id, "reason": "error", "cause": "crash"},
        )
        self.agents.tracing.turn_ended(session_id, turn_id, "error", "crash")
        record = self.store.get_session(session_id)
        if record is None or record.kind != "subagent" or record.parent_id is None:
            return
        if self.store.question_open(session_id, turn_id):  # its question's message is kept
            self._question_cancelled(session_id, turn_id, record.parent_id)
        try:
            descriptor = parse_descriptor(self.store.get_descriptor(session_id))
        except DescriptorProblem:
            return
        if descriptor.mode == CONTINUABLE and self.store.get_session(record.parent_id):
            parent = self.registry.get(record.parent_id)
            self.settlement.notify_settled(session_id, record.parent_id, parent, "error", None)

    def _question_cancelled(self, child_id: str, turn_id: str, parent_id: str) -> None:
        """The parent is told that the question of a turn its process left open was cancelled."""
        self.agents.record(child_id, turn_id, "question_end", {"why": "ended"})
        if self.store.get_session(parent_id) is None:
            return
        why = texts.PERMISSION_WHY["ended"]
        text = texts.QUESTION_CANCELLED.format(id=texts.shown(child_id), why=why)
        source = Source(
            kind="subagent-question",
            form="question",
            summary=texts.summary_of(text),
            sender_session_id=child_id,
        )
        parent = self.registry.get(parent_id)
        self.scheduler.accept(parent_id, [TextBlock(text=text)], source, parent)

    # --- a lost commit group -------------------------------------------------------------

    def resync(self) -> bool:
        """After a lost group whose live state could not be read back (the database did not
        answer), try again (every heartbeat); whether memory agrees with storage now. Until it
        does, every write is refused 1012."""
        if not self.stale:
            return True
        self.store.check_file()  # a lost connection is replaced here
        try:
            self.rebuild()
        except Exception as exc:
            log.warning("the live state cannot be read back yet (%s); writes stay refused", exc)
            return False
        return True

    def rebuild(self) -> None:
        """After a lost commit group: roll it back and make memory agree with storage again.

        The registry is rebuilt from the rows this process holds (storage.live_agents), closing
        waiters are those of the last commit, force-end timers run exactly for interrupted open
        turns (one lost with the group is armed again, for a full grace period).
        """
        self.store.rollback()
        if self.after_rebuild is not None:
            self.after_rebuild()
        before = {agent.activation_id: agent for agent in self.registry}
        try:
            rows = self.store.live_agents(self.agents.owner)
        except Exception:
            self.stale = True  # memory is what the lost group left: no write until it is read
            self.store.refuse_writes(True)
            raise
        if self.stale:
            self.stale = False
            self.store.refuse_writes(False)
            log.warning("the live state was read back from the database; writes are accepted again")
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
                    turn=self._turn(row),
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
                    lineage=same.lineage
                    if same is not None
                    else self.agents.budgets.lineage(row.agent_id, row.parent_id),
                )
            )
        self.agents.closing = {root: list(w) for root, w in self.agents.closing_committed.items()}
        self.scheduler.rearm_grace(
            {
                agent.turn.turn_id: agent.agent_id
                for agent in self.registry
                if agent.turn is not None and agent.turn.interrupted
            }
        )
        self.rate.keep(self.registry.get)
        self.scheduler.rearm_deadlines()
        for agent in self.registry:  # what a spent budget held before is held still
            if agent.pending and agent.turn is None and not agent.parked:
                refusal = self.agents.budgets.refusal(agent.lineage)
                agent.held_by = refusal.held() if refusal is not None else None

    def _turn(self, row: LiveRecord) -> OpenTurn | None:
        """The open turn as stored; an interrupted one remembers whether its deadline stopped it
        (its interrupt event's cause), so its notice stays the deadline's."""
        if row.open_turn_id is None:
            return None
        turn = OpenTurn(row.open_turn_id, row.interrupted)
        if row.interrupted:
            turn.deadline = self.store.interrupt_cause(row.agent_id, row.open_turn_id) == "deadline"
        return turn

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
