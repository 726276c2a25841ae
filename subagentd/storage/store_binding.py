"""The store's methods, bound once from its parts: both backends compose the same table objects."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from subagentd.storage.events import Events
from subagentd.storage.idempotency import IdempotencyKeys
from subagentd.storage.inbox import Inbox
from subagentd.storage.leases import LeaseTables
from subagentd.storage.sessions import Sessions
from subagentd.storage.signals import Signals
from subagentd.storage.spending import Spending
from subagentd.storage.tasks import Tasks
from subagentd.storage.trees import Trees


class Bell(Protocol):
    """A doorbell's end this process reads (storage/signals.py, postgres/doorbell.py)."""

    def fileno(self) -> int: ...
    def drain(self) -> list[str]: ...


class Grouping(Protocol):
    """What a store takes from its group commit (storage/transactions.py, postgres/group.py)."""

    @property
    def doorbell(self) -> Bell | None: ...

    def atomic(self) -> AbstractContextManager[None]: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...
    def check_file(self) -> bool: ...
    def limit_lock_wait(self, milliseconds: int) -> None: ...
    def take_lock(self, tree: str | None = None) -> bool: ...
    def take_lock_for_frame(self, tree: str | None = None) -> bool: ...
    def set_scope(self, tree: str | None) -> None: ...
    def aim(self, tree: str | None) -> None: ...

    per_tree: bool

    def give_up_lock(self) -> None: ...
    def lend_lock(self, seconds: float) -> Callable[[], None] | None: ...
    def settle_lent(self, keep: bool) -> None: ...
    def hold(self, owner: str, ttl: float, on_lost: Callable[[], None]) -> None: ...
    def clock(self) -> float: ...
    def lapse_seen(self, expires_at: float, clock: float) -> bool: ...
    def refuse_writes(self, refused: bool) -> None: ...
    def transient(self, exc: BaseException) -> bool: ...
    def give_up_after(self, seconds: float) -> None: ...


class BoundParts:
    """Binds the parts' methods as the store's own (no call in between on the hot paths)."""

    group: Grouping  # the store sets it: its own group commit

    def bind_parts(
        self,
        group: Grouping,
        sessions: Sessions,
        trees: Trees,
        inbox: Inbox,
        events: Events,
        leases: LeaseTables,
        signals: Signals,
        keys: IdempotencyKeys,
    ) -> None:
        self.atomic = group.atomic
        self.commit = group.commit
        self.rollback = group.rollback
        self.close = group.close
        self.check_file = group.check_file
        self.limit_lock_wait = group.limit_lock_wait
        self.hold = group.hold
        self.clock = group.clock
        self.lapse_seen = group.lapse_seen
        self.refuse_writes = group.refuse_writes
        self.transient = group.transient
        self.give_up_after = group.give_up_after
        self.take_lock = group.take_lock
        self.take_lock_for_frame = group.take_lock_for_frame
        self.set_scope = group.set_scope
        self.aim = group.aim
        self.per_tree = group.per_tree
        self.give_up_lock = group.give_up_lock
        self.lend_lock = group.lend_lock
        self.settle_lent = group.settle_lent

        self.get_session = sessions.get_session
        self.insert_session = sessions.insert_session
        self.get_descriptor = sessions.get_descriptor
        self.get_descriptors = sessions.get_descriptors
        self.set_open_turn = sessions.set_open_turn
        self.end_turn = sessions.end_turn
        self.open_turns = sessions.open_turns
        self.open_children = sessions.open_children
        self.tree = trees.tree
        self.tree_rows = trees.tree_rows
        self.children_listing = trees.children_listing

        self.insert_message = inbox.insert_message
        self.next_queued = inbox.next_queued
        self.claim_message = inbox.claim_message
        self.cancel_message = inbox.cancel_message
        self.set_parked = inbox.set_parked
        self.inbox_counts = inbox.inbox_counts
        self.get_message = inbox.get_message
        self.waiting_messages = inbox.waiting_messages
        self.parked_counts = inbox.parked_counts

        self.append_events = events.append_events
        self.add_event = events.add_event
        self.read_events = events.read_events
        self.interrupt_cause = events.interrupt_cause
        self.question_open = events.question_open

        self.owners = leases.owners
        self.owner_state = leases.owner_state
        self.fence = leases.fence
        self.prune_owners = leases.prune_owners
        self.orphaned_turns = leases.orphaned_turns
        self.get_lease = leases.get_lease
        self.put_lease = leases.put_lease
        self.set_lease_status = leases.set_lease_status
        self.live_agents = leases.live_agents
        self.live_record = leases.live_record
        self.drop_lease = leases.drop_lease
        self.foreign_leases = leases.foreign_leases

        self.put_signal = signals.put_signal
        self.take_signals = signals.take_signals
        self.has_signals = signals.has_signals

        self.get_idempotent = keys.get_idempotent
        self.put_idempotent = keys.put_idempotent
        self.prune_idempotent = keys.prune_idempotent

    def bind_spending(self, spending: Spending) -> None:
        """Usage and budgets (storage/spending.py), bound as the store's own too."""
        self.spending_rows = spending.spending_rows
        self.charge = spending.charge
        self.set_limits = spending.set_limits
        self.set_stopped = spending.set_stopped
        self.set_close_policy = spending.set_close_policy

    def bind_tasks(self, tasks: Tasks) -> None:
        """MCP tasks (storage/tasks.py), bound as the store's own too."""
        self.insert_task = tasks.insert_task
        self.get_task = tasks.get_task
        self.finish_task = tasks.finish_task
        self.working_tasks = tasks.working_tasks
        self.tasks_page = tasks.tasks_page
        self.count_working = tasks.count_working
        self.delete_expired_tasks = tasks.delete_expired

    def doorbell(self) -> int | None:
        """The fd another process's signal makes readable (None: nobody can signal this one, or
        its doorbell was closed with the store)."""
        bell = self.group.doorbell
        fd = -1 if bell is None else bell.fileno()
        return None if fd < 0 else fd

    def drain_doorbell(self) -> list[str]:
        """Read the rings waiting: the sessions they name, whose signals to look at ("" for a
        ring that names none: look at all)."""
        bell = self.group.doorbell
        return [] if bell is None else bell.drain()
