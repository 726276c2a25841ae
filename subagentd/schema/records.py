"""Stored records exchanged between core/ and storage/ (not on the wire as such)."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from subagentd.schema.listing import Status
from subagentd.schema.messages import MessageState, Mode


class SessionRecord(msgspec.Struct, kw_only=True):
    id: str
    parent_id: str | None
    kind: str  # "ordinary" | "subagent"; a subagent's mode lives in its descriptor
    label: str | None
    created_at: str
    depth: int
    parked: bool = False
    open_turn_id: str | None = None
    last_reason: str | None = None
    last_output: str | None = None


class InboxRecord(msgspec.Struct, kw_only=True):
    position: int
    message_id: str
    session_id: str
    content: str  # JSON text of the content blocks
    source: str  # JSON text of the source
    state: MessageState  # built from rows, never decoded: storage writes only these states
    turn_id: str | None = None


class TreeRecord(msgspec.Struct, array_like=True, gc=False):
    """One session below a listing root, in walk order.

    Array-like, so a whole subtree is built from SQL rows in one C call; untracked by the cycle
    collector (it holds only text and numbers), so a 10k-row listing does not trigger collections.
    """

    id: str
    parent_id: str | None
    depth: int
    kind: str
    label: str | None = None
    mode: Mode | None = None  # recorded at spawn from the checked descriptor (with label); or None
    descriptor: Any = None  # the stored body when asked for: str, or bytes if stored as a blob
    ended: str | None = None  # how its last turn ended (storage/trees.py ENDED)


class EventRecord(msgspec.Struct, kw_only=True):
    seq: int
    turn_id: str | None
    type: str
    data: str | None  # JSON text
    at: str


class IdempotencyRecord(msgspec.Struct, kw_only=True):
    method: str
    fingerprint: str
    result: str  # JSON text


class LiveRecord(msgspec.Struct, array_like=True):
    """One agent this process holds live, as storage has it: enough to rebuild the registry."""

    agent_id: str
    parent_id: str | None
    kind: str  # the registry's kind: ordinary | continuable | one-shot
    depth: int
    activation_id: str
    ancestry: str  # activation ids, space-separated, own first
    open_turn_id: str | None
    interrupted: bool
    parked: bool
    disposing: bool
    resume: bool
    last_reason: str | None
    last_output: str | None
    pending: int  # queued or parked inbox messages


class SpendingRecord(msgspec.Struct, array_like=True):
    """One `spending` row: a session's budget limits, its own usage and its subtree's (itself
    included). Cost is in millionths of the deployment's currency unit."""

    session_id: str
    limits_set: int  # a budget was decided for it (agents/open's defaults apply only once)
    max_turns: int | None
    max_spawns: int | None
    max_tokens: int | None
    max_cost: int | None
    deadline: float | None  # wall-clock seconds
    stopped: int
    own_turns: int
    own_spawns: int
    own_input: int
    own_output: int
    own_cost: int
    tree_turns: int
    tree_spawns: int
    tree_input: int
    tree_output: int
    tree_cost: int
    close_policy: str | None = None  # "finish": a close of its root lets its turn end first


class TaskRecord(msgspec.Struct, array_like=True):
    """A row of `tasks` (storage/tasks.py), in its columns' order."""

    task_id: str
    owner_id: str  # the calling agent that asked for the task
    agent_id: str  # the child whose settling ends it
    tool: str  # spawn_agent | send_message
    status: str
    status_message: str | None
    created_at: str
    updated_at: str
    ttl_ms: int | None
    poll_ms: int | None
    expires_at: float | None
    output: str  # JSON text: the tool's own structured fields (child_id / message_id, text)
    result: str | None  # JSON text: the CallToolResult, once terminal
    progress_token: str | None  # JSON text: the client's progress token, when it gave one


# Rows the store hands core/ as named tuples: each field read by name, and a caller that unpacks
# a row positionally still can.


class OpenTurn(NamedTuple):
    """A session whose turn is open (crash recovery, a parent's children)."""

    session_id: str
    turn_id: str


class InboxCounts(NamedTuple):
    """An inbox's queued and parked messages."""

    queued: int
    parked: int


class LeaseRow(NamedTuple):
    """A session's lease row (its owner's row says whether it is valid)."""

    owner: str
    status: str
    expires_at: float


class OwnerRow(NamedTuple):
    """A process registered on the database."""

    owner: str
    expires_at: float
    fenced: int


class OwnerState(NamedTuple):
    """One owner's row: when it expires, whether it is fenced."""

    expires_at: float
    fenced: int


class ForeignLease(NamedTuple):
    """A lease another owner holds, unfenced and unexpired."""

    session_id: str
    owner: str
    status: Status


class SignalRow(NamedTuple):
    """A signal for an owner: which session, which kind, by whom; and, when it was the only one
    taken, that session's inbox as read in the same statement (`waiting`: its queued and parked
    counts, `first`: its next queued message), so acting on it reads nothing more (None: read
    when acting; storage/postgres/tables.py PgSignals)."""

    session_id: str
    kind: str
    by: str | None
    waiting: InboxCounts | None = None
    first: InboxRecord | None = None


class KeptTrace(NamedTuple):
    """A kept trace context: its traceparent and when it was written."""

    traceparent: str
    at: float


class ChildListing(NamedTuple):
    """A subagent child as a listing reads it: its mode (None: none recorded, then its
    descriptor), whether it is parked, the other process holding it (and its status), how its
    last turn ended."""

    id: str
    label: str | None
    mode: str | None
    descriptor: Any
    parked: int
    owner: str | None
    status: str | None
    ended: str | None


class EventsPage(NamedTuple):
    """A page of a transcript's events, and whether more follow."""

    events: list[EventRecord]
    more: bool
