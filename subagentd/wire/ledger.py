"""Replies owed later (agents/close, wait_agents, agents/wait_idle), and the output of an uncommitted group."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from subagentd.errors import RequestCancelledError
from subagentd.wire.boundary import refusal
from subagentd.wire.session import success_reply


class Settable(Protocol):  # anyio.Event, as the flusher uses it
    def set(self) -> None: ...
    def wait(self) -> Awaitable[Any]: ...


class Wake:
    """When the connection's flusher task is woken: output held outside the read loop wakes it
    (`held`, the Ledger's callback); the read loop commits and writes inline after each chunk."""

    def __init__(self) -> None:
        self.reading = False  # handling a chunk of input (its flush follows inline)
        self.event: Settable  # the flusher's current anyio.Event (made when it serves)

    def held(self, size: int) -> None:
        if not self.reading:
            self.event.set()


class Kept(dict[str, Any]):
    """A reply that depends on no stored state (lifecycle, refusals before dispatch): it stands
    even when its commit group is lost."""


class Deferred:
    """A result that arrives later (agents/close waits for its drain, a wait for its event)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.done = False
        self.on_done: Callable[[], None] | None = None
        self.on_cancel: Callable[[], None] | None = None  # the client cancelled: stop waiting
        self.on_undone: Callable[[], None] | None = None  # its completion was rolled back

    def complete(self) -> None:
        self.done = True
        if self.on_done is not None:
            self.on_done()


class Pending(msgspec.Struct, eq=False):
    """One waiting request: its reply is owed until its deferred result is done (or cancelled)."""

    request_id: Any
    deferred: Deferred
    stateless: bool
    admitted_in: int  # the commit group that admitted it
    cancelled: bool = False
    done_in: int = -1  # the commit group in which its result became done

    def reply(self) -> dict[str, Any]:
        if self.cancelled:
            return refusal(RequestCancelledError("request cancelled"), self.request_id)
        return success_reply(self.deferred.result, self.request_id, self.stateless)


class Owed(msgspec.Struct, eq=False):
    """A reply still owed to the host: one waiting request, or a batch with waiting members."""

    waiting: list[Pending]
    batch: list[Any] | None = None  # a batch's replies in order (dicts and Pendings)

    def ready(self) -> bool:
        return all(p.deferred.done or p.cancelled for p in self.waiting)

    def reply(self) -> Any:
        if self.batch is None:
            return self.waiting[0].reply()
        return [r.reply() if isinstance(r, Pending) else r for r in self.batch]


ADMITTED = "admitted"  # a ledger entry: an Owed reply admitted in this group (no frame yet)
COMPLETED = "completed"  # a ledger entry: an Owed reply written in this group


class Ledger:
    """What the host is owed: the output of the uncommitted commit group, and waiting replies.

    `frames` are the group's encoded replies and notifications in order; `entries` its reply
    values and (ADMITTED | COMPLETED, Owed) marks in the same order, so a lost group can be
    answered request by request (`answer_lost`); notifications are simply dropped then.
    """

    def __init__(self, frame: Callable[[Any], bytes], noted: Callable[[int], None]) -> None:
        self._frame = frame
        self._noted = noted  # told the size of each held frame
        self.frames: list[bytes] = []
        self.entries: list[Any] = []
        self.size = 0  # bytes in `frames`
        self.lost: Any = None  # the StorageFailedError that lost this group, once one did
        self.generation = 0  # counts commit groups (committed or lost)
        self.pending: dict[Any, Pending] = {}  # waiting requests by id

    def hold(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.size += len(frame)
        self._noted(len(frame))

    def reply(self, message: Any, entry: Any = None) -> None:
        """A reply (or batch of replies), held with its group until the group commits."""
        self.hold(self._frame(message))
        self.entries.append(message if entry is None else entry)

    def answer(self, reply: Any) -> None:
        """The dispatcher's reply to one frame: held now, or owed while a member waits."""
        if isinstance(reply, list):
            waiting = [r for r in reply if isinstance(r, Pending)]
            if waiting:
                self.wait(Owed(waiting, reply))
            else:
                self.reply(reply)
        elif isinstance(reply, Pending):
            self.wait(Owed([reply]))
        elif reply is not None:
            self.reply(reply)

    def committed(self) -> tuple[list[bytes], int]:
        """The group committed: its frames (and their size) may be written now."""
        frames, size = self.frames, self.size
        self.generation += 1
        if frames:
            self.frames, self.size = [], 0
        if self.entries:  # also a waiting reply's admission alone, which has no frame
            self.entries.clear()
        return frames, size

    # --- waiting replies -----------------------------------------------------------------

    def wait(self, owed: Owed, admitted: bool = True) -> None:
        """Owe a reply until every waiting member is done or cancelled (it may be already)."""
        if admitted:
            self.entries.append((ADMITTED, owed))
        for p in owed.waiting:
            self.pending[p.request_id] = p
            p.deferred.on_done = lambda p=p: self._member_done(owed, p)
        if owed.ready():
            self._member_done(owed, None)

    def _member_done(self, owed: Owed, member: Pending | None) -> None:
        if member is not None and member.deferred.done and not member.cancelled:
            member.done_in = self.generation
        if not owed.ready():
            return
        for p in owed.waiting:
            p.deferred.on_done = None
            if self.pending.get(p.request_id) is p:
                del self.pending[p.request_id]
        self.reply(owed.reply(), (COMPLETED, owed))

    def cancel(self, request_id: Any) -> None:
        """Answer a waiting request with -32800; accepted effects stay accepted."""
        pending = self.pending.get(request_id)
        if pending is None:
            return
        pending.cancelled = True
        if pending.deferred.on_cancel is not None:
            pending.deferred.on_cancel()
        if pending.deferred.on_done is not None:
            pending.deferred.on_done()

    # --- a lost group --------------------------------------------------------------------

    def answer_lost(self, error: Callable[[Any], dict[str, Any]]) -> list[Any]:
        """The lost group's answers, in order: each reply becomes `error(id)` (Kept ones and
        id-null ones stand), a waiting request it admitted is answered so and forgotten, one
        admitted earlier whose result it completed waits again (that completion was rolled
        back), cancellations stand. Its frames are dropped; the next group starts empty."""
        entries, failed_in = self.entries, self.generation
        self.frames, self.entries, self.size, self.lost = [], [], 0, None
        self.generation += 1
        answers = []
        for entry in entries:
            if type(entry) is not tuple:
                answers.append(failed(entry, error))
                continue
            mark, owed = entry
            if mark == ADMITTED:
                for p in owed.waiting:
                    p.deferred.on_done = None
                    if p.deferred.on_cancel is not None:  # a wait: it must consume nothing now
                        p.deferred.on_cancel()
                    key = p.request_id  # not p.request_id below: mypy narrows p after `is p`
                    if self.pending.get(key) is p:
                        del self.pending[key]
                answers.append(failed(owed.batch or owed.waiting[0], error))
            elif any(p.admitted_in == failed_in for p in owed.waiting):
                continue  # its ADMITTED entry answers it
            elif undone := [p for p in owed.waiting if p.done_in == failed_in]:
                for p in undone:
                    p.deferred.done, p.done_in = False, -1
                    if p.deferred.on_undone is not None:
                        p.deferred.on_undone()
                self.wait(owed, admitted=False)
            else:
                answers.append(owed.reply())
        return answers


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
