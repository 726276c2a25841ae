"""Replies owed later (agents/close waits for its drain), and the output of an uncommitted group."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from subagentd.schema.codes import Code
from subagentd.server.envelope import error_reply, success_reply


class Kept(dict):
    """A reply that depends on no stored state (lifecycle, refusals before dispatch): it stands
    even when its commit group is lost."""


class Deferred:
    """A result that arrives later (agents/close waits for its drain)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.done = False
        self.on_done: Callable[[], None] | None = None

    def complete(self) -> None:
        self.done = True
        if self.on_done is not None:
            self.on_done()


@dataclass(eq=False)
class Pending:
    """One waiting request: its reply is owed until its deferred result is done (or cancelled)."""

    request_id: Any
    deferred: Deferred
    stateless: bool
    admitted_in: int  # the commit group that admitted it
    cancelled: bool = False
    done_in: int = -1  # the commit group in which its result became done

    def reply(self) -> dict[str, Any]:
        if self.cancelled:
            return error_reply(Code.REQUEST_CANCELLED, "request cancelled", self.request_id)
        return success_reply(self.deferred.result, self.request_id, self.stateless)


@dataclass(eq=False)
class Owed:
    """A reply still owed to the host: one waiting request, or a batch with waiting members."""

    waiting: list[Pending]
    batch: list[Any] | None = None  # a batch's replies in order (dicts and Pendings)

    def ready(self) -> bool:
        return all(p.deferred.done or p.cancelled for p in self.waiting)

    def reply(self) -> Any:
        if self.batch is None:
            return self.waiting[0].reply()
        return [r.reply() if isinstance(r, Pending) else r for r in self.batch]


ADMITTED = "admitted"  # a group entry: an Owed reply admitted in this group (no frame yet)
COMPLETED = "completed"  # a group entry: an Owed reply written in this group


@dataclass
class Group:
    """Output since the last successful commit: the host has seen none of it yet.

    `frames` are the encoded replies and notifications in order; `replies` the reply values and
    the (ADMITTED | COMPLETED, Owed) marks in the same order, so a lost group can be answered
    request by request (notifications are simply dropped).
    """

    frames: list[bytes] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    size: int = 0  # bytes in `frames`
    lost: Any = None  # the StorageFailedError that lost this group, once one did


def failed(reply: Any, error: Callable[[Any], dict[str, Any]]) -> Any:
    """A reply of a lost group, as the host now gets it: every reply to a request becomes
    `error(id)`, except Kept ones and those with id null (frame-level refusals)."""
    if isinstance(reply, list):
        return [failed(r, error) for r in reply]
    if isinstance(reply, Pending):
        return error(reply.request_id)
    if type(reply) is Kept or reply.get("id") is None:
        return reply
    return error(reply["id"])
