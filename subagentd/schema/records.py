"""Stored records exchanged between core/ and storage/ (not on the wire as such)."""

from __future__ import annotations

from typing import Any

import msgspec

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
