"""`Served`: the blocking client over a subagentd started for a test, keeping every notification."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from subagentd.client import Client
from subagentd.client import frames as wire
from subagentd.client.errors import RequestTimeout
from subagentd.client.pipes import TIMEOUT

WAIT = 10.0  # seconds a wait lasts unless told otherwise
KEEP = 10_000  # notifications kept for the waits (the oldest go first)


class NotificationTimeout(AssertionError):
    """No notification matched within the timeout; the message lists what did arrive."""


@dataclass
class Note:
    """One notification received: its method and params, and whether a wait returned it."""

    method: str
    params: Any
    taken: bool = False


class Served(Client):
    """`Client` that also keeps every notification it reads, in order, for
    `wait_for_notification`: whether a handler (`on`), `wait_for` or an `AgentHost` took it, a
    notification received before the wait started still matches."""

    def __init__(self, write_fd: int, read_fd: int, *, keep_raw: bool = False) -> None:
        super().__init__(write_fd, read_fd, keep_raw=keep_raw)
        self.log: list[Note] = []

    def next_frame(self, timeout: float = TIMEOUT) -> Any:
        message = super().next_frame(timeout)
        if wire.is_notification(message):
            self.log.append(Note(message["method"], message.get("params")))
            if len(self.log) > KEEP:
                del self.log[0]
        return message

    def received(self, method: str | None = None) -> list[Any]:
        """The params of every notification kept (of `method`), in arrival order."""
        return [n.params for n in self.log if method is None or n.method == method]

    def _take(self, method: str, match: dict[str, Any]) -> Any:
        for note in self.log:
            if note.taken or note.method != method:
                continue
            if wire.matches({"method": method, "params": note.params}, method, match):
                note.taken = True
                return note.params if note.params is not None else {}
        return None

    def wait_for_notification(self, method: str, timeout: float = WAIT, **match: Any) -> Any:
        """The params of the earliest notification `method` whose params hold every `match`
        pair and that no earlier call returned, one received before this call included; else
        the first such to arrive within `timeout` seconds (`NotificationTimeout` after)."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        while True:
            found = self._take(method, match)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotificationTimeout(self._missing(method, match, timeout))
            try:
                self.next_frame(min(left, 0.05))
            except RequestTimeout:
                continue

    def _missing(self, method: str, match: dict[str, Any], timeout: float) -> str:
        seen = [n for n in self.log if n.method == method]
        said = f"no {method} notification matching {json.dumps(match)} within {timeout:g} s"
        if not seen:
            return said + f"; no {method} notification arrived at all"
        lines = [
            f"  {json.dumps(n.params, ensure_ascii=False)}" + (" (taken)" if n.taken else "")
            for n in seen[-10:]
        ]
        return said + f"; the {method} notifications received:\n" + "\n".join(lines)


def assert_replays(path: str | Path, *serve_args: str, db: str = ":memory:") -> None:
    """Replay a transcript (docs/scripts.md) against a fresh subagentd; AssertionError with the
    report (the step, a diff) when it does not pass."""
    __tracebackhide__ = True
    from subagentd.scripts.replay import replay

    outcome = replay(path, serve_args, db=db)
    if outcome.failure is not None:
        raise AssertionError(outcome.failure)


def serve(args: Sequence[str] = (), client_name: str = "pytest") -> Served:
    """A fresh subagentd (`--db :memory:` unless `args` name a database), initialized."""
    db = None if any(a == "--db" or a.startswith("--db=") for a in args) else ":memory:"
    served = Served.spawn(*args, db=db)
    assert isinstance(served, Served)
    try:
        served.initialize(client_name=client_name)
    except BaseException:
        served.close(WAIT)
        raise
    return served
