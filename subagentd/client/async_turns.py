"""`AsyncAgentHost`: run agent turns concurrently when subagentd asks for them (anyio; the shape
of the TypeScript client's runAgentHost, with a cancel scope where TypeScript has an AbortSignal)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from subagentd.client.asynchronous import AsyncClient
from subagentd.client.frames import typed
from subagentd.client.turns import (
    ErrorHook,
    TurnEndHook,
    TurnOutcome,
    error_text,
    report_turn_error,
)
from subagentd.schema.notifications import InterruptCause, TurnInterrupt, TurnStart


class AsyncTurnControl:
    """Handed to an async turn function: `interrupted` is set on `turn/interrupt` (just before
    the turn is cancelled); `interrupt` holds that notification."""

    def __init__(self, start: TurnStart) -> None:
        self.start = start
        self.interrupted = anyio.Event()
        self.interrupt: TurnInterrupt | None = None
        self.scope = anyio.CancelScope()

    def cancel(self, interrupt: TurnInterrupt) -> None:
        if self.interrupt is None:
            self.interrupt = interrupt
            self.interrupted.set()
            self.scope.cancel()


AsyncTurnFunction = Callable[[TurnStart, AsyncTurnControl], Awaitable["TurnOutcome | None"]]


class AsyncAgentHost:
    """`async with AsyncAgentHost(client, turn) as host:` runs `turn(start, control)` as a task
    for every `turn/start` (also those queued before), then `turns/end`.

    On `turn/interrupt` the turn's task is cancelled and the turn ends `aborted`. A turn function
    that raises ends its turn with reason `error` and the exception's text as output, and the
    exception goes to `on_error` (default: printed to stderr). Leaving the block stops listening
    and cancels the turns still running (await `host.idle()` first to let them finish).
    """

    def __init__(
        self,
        client: AsyncClient,
        turn: AsyncTurnFunction,
        *,
        on_error: ErrorHook = report_turn_error,
        on_turn_end: TurnEndHook | None = None,
    ) -> None:
        self.client, self.turn = client, turn
        self.on_error, self.on_turn_end = on_error, on_turn_end
        self.active: dict[str, AsyncTurnControl] = {}
        self._idle = anyio.Event()
        self._idle.set()
        self._tasks: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> AsyncAgentHost:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        for note in [n for n in self.client.notifications if n.get("method") == "turn/start"]:
            self.client.notifications.remove(note)
            self._started(note["params"])
        self.client.on("turn/start", self._started)
        self.client.on("turn/interrupt", self._interrupted)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Stop, and wait for the cancelled turns to be reported; what the body raised
        propagates as it is, not wrapped in an exception group."""
        self.stop()
        assert self._tasks is not None
        await self._tasks.__aexit__(None, None, None)

    def stop(self) -> None:
        """Stop listening; running turns are cancelled (and still reported, `aborted`)."""
        for method, handler in (
            ("turn/start", self._started),
            ("turn/interrupt", self._interrupted),
        ):
            if handler in self.client.handlers.get(method, []):
                self.client.off(method, handler)
        for control in list(self.active.values()):
            shutdown = InterruptCause(kind="shutdown")
            start = control.start
            control.cancel(
                TurnInterrupt(agent_id=start.agent_id, turn_id=start.turn_id, cause=shutdown)
            )

    async def idle(self) -> None:
        """Return when no turn is running (at once when none is)."""
        await self._idle.wait()

    def _started(self, params: dict[str, Any]) -> None:
        start = typed(TurnStart, params)
        control = self.active[start.turn_id] = AsyncTurnControl(start)
        if self._idle.is_set():
            self._idle = anyio.Event()
        assert self._tasks is not None
        self._tasks.start_soon(self._run, control)

    def _interrupted(self, params: dict[str, Any]) -> None:
        interrupt = typed(TurnInterrupt, params)
        control = self.active.get(interrupt.turn_id)
        if control is not None:
            control.cancel(interrupt)

    async def _run(self, control: AsyncTurnControl) -> None:
        start = control.start
        outcome = TurnOutcome()
        try:
            with control.scope:
                outcome = await self.turn(start, control) or TurnOutcome()
        except Exception as error:
            outcome = TurnOutcome("error", None if control.interrupt else error_text(error))
            if control.interrupt is None:
                self.on_error(error, start)
        if control.interrupt is not None:
            outcome = TurnOutcome("aborted", None)
        try:
            await self.client.turns_end(
                start.agent_id, start.turn_id, outcome.reason, outcome.output
            )
        except Exception as error:  # e.g. the turn was ended for us (an interrupt's grace ran out)
            self.on_error(error, start)
        else:
            if self.on_turn_end is not None:
                self.on_turn_end(start, outcome)
        finally:
            del self.active[start.turn_id]
            if not self.active:
                self._idle.set()
