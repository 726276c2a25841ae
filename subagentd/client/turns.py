"""`AgentHost`: run agent turns when subagentd asks for them (blocking; like the TypeScript
client's runAgentHost), and what both turn loops share: the outcome type and error reporting."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from subagentd.client.blocking import Client
from subagentd.client.errors import ConnectionClosed, RequestTimeout
from subagentd.client.frames import typed
from subagentd.client.pipes import TIMEOUT
from subagentd.schema.host_methods import TurnReason
from subagentd.schema.notifications import TurnInterrupt, TurnStart

POLL = 1.0  # seconds: how often `AgentHost.run` checks `until` while no turn starts


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """What a turn function returns: how the turn ended and the agent's closing message.
    The loops report `aborted` whenever the turn was interrupted, whatever this says."""

    reason: TurnReason = "completed"
    output: str | None = None


ErrorHook = Callable[[BaseException, TurnStart], None]
TurnEndHook = Callable[[TurnStart, TurnOutcome], None]


def report_turn_error(error: BaseException, start: TurnStart) -> None:
    """The default `on_error`: print the failure, with its traceback, to stderr."""
    print(f'subagentd: turn {start.turn_id} of agent "{start.agent_id}" failed:', file=sys.stderr)
    traceback.print_exception(error, file=sys.stderr)


def error_text(error: BaseException) -> str:
    """The text a raised exception leaves as the turn's output."""
    return str(error) or type(error).__name__


class TurnControl:
    """Handed to a blocking turn function: is this turn interrupted (asks subagentd's pipe)?"""

    def __init__(self, host: AgentHost, start: TurnStart) -> None:
        self._host, self.start = host, start

    @property
    def interrupt(self) -> TurnInterrupt | None:
        """The `turn/interrupt` for this turn, once read (frames waiting are read first)."""
        self._host.client.poll()
        return self._host.interrupts.get(self.start.turn_id)

    @property
    def interrupted(self) -> bool:
        return self.interrupt is not None


TurnFunction = Callable[[TurnStart, TurnControl], "TurnOutcome | None"]


class AgentHost:
    """Take each `turn/start`, call `turn(start, control)` in this thread, then `turns/end`.

    A turn function that raises ends its turn with reason `error` and the exception's text as
    output, and the exception goes to `on_error` (default: printed to stderr); an interrupted
    turn (see `TurnControl.interrupted`) ends `aborted`, and what it raised is not reported.
    Turns run one at a time, in the order subagentd started them.
    """

    def __init__(
        self,
        client: Client,
        turn: TurnFunction,
        *,
        on_error: ErrorHook = report_turn_error,
        on_turn_end: TurnEndHook | None = None,
    ) -> None:
        self.client, self.turn = client, turn
        self.on_error, self.on_turn_end = on_error, on_turn_end
        self.interrupts: dict[str, TurnInterrupt] = {}
        self.active: TurnStart | None = None
        client.on("turn/interrupt", self._interrupted)

    def _interrupted(self, params: dict[str, Any]) -> None:
        note = typed(TurnInterrupt, params)
        if self.active is not None and note.turn_id == self.active.turn_id:
            self.interrupts[note.turn_id] = note

    def stop(self) -> None:
        """Stop handling `turn/interrupt` (it is queued on the client again)."""
        self.client.off("turn/interrupt", self._interrupted)

    def run_turn(self, timeout: float = TIMEOUT) -> TurnStart | None:
        """Wait (up to `timeout`) for the next `turn/start` and run it to its `turns/end`; the
        turn that ran, or None when none came."""
        try:
            params = self.client.notification("turn/start", timeout)
        except RequestTimeout:
            return None
        start = typed(TurnStart, params)
        self.active = start
        control = TurnControl(self, start)
        try:
            outcome = self.turn(start, control) or TurnOutcome()
        except Exception as error:
            outcome = TurnOutcome("error", None if control.interrupted else error_text(error))
            if not control.interrupted:
                self.on_error(error, start)
        if control.interrupted:
            outcome = TurnOutcome("aborted", None)
        self.active = None
        self.interrupts.pop(start.turn_id, None)
        try:
            self.client.turns_end(start.agent_id, start.turn_id, outcome.reason, outcome.output)
        except Exception as error:  # e.g. the turn was ended for us (an interrupt's grace ran out)
            self.on_error(error, start)
        else:
            if self.on_turn_end is not None:
                self.on_turn_end(start, outcome)
        return start

    def run(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> None:
        """Run turns until `until()` is true (checked after each turn, and every second while
        none starts) or subagentd exits; with `timeout`, `RequestTimeout` is raised when no turn
        starts for that long."""
        idle_since = time.monotonic()
        while until is None or not until():
            try:
                ran = self.run_turn(POLL if timeout is None else min(POLL, timeout))
            except ConnectionClosed:
                return
            now = time.monotonic()
            if ran is not None:
                idle_since = now
            elif timeout is not None and now - idle_since >= timeout:
                raise RequestTimeout(f"no turn/start within {timeout:g} s")
