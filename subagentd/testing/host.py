"""`ScriptedHost`: runs agents' turns from a table of replies, the way a test plays the model."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from subagentd.client import Client, TurnOutcome
from subagentd.client.errors import RequestTimeout
from subagentd.client.frames import typed
from subagentd.schema.notifications import TurnStart

WAIT = 10.0
compact = partial(json.dumps, ensure_ascii=False, separators=(",", ":"))  # as Node and Go say it

Reply = str | TurnOutcome | Callable[[TurnStart], str | TurnOutcome | None]
"""A scripted turn: its output (ended completed), a TurnOutcome, or a function of the turn/start
(which may call tools with the client first) returning either, or None (completed, no output)."""


class ScriptedHostError(AssertionError):
    """The server asked for a turn the table has no reply for, or no turn came in time."""


@dataclass
class Turn:
    """A turn the host ran: whose, its input (each text block of its messages), how it ended."""

    agent_id: str
    turn_id: str
    texts: list[str]
    reason: str
    output: str | None


class ScriptedHost:
    """Answers `turn/start`s from `replies`: agent id -> its replies, one per turn, in order."""

    def __init__(self, client: Client, replies: Mapping[str, Sequence[Reply]]) -> None:
        self.client = client
        self.replies = {agent: list(rs) for agent, rs in replies.items()}
        self.used = {agent: 0 for agent in self.replies}
        self.turns: list[Turn] = []

    def run_turn(self, timeout: float = WAIT) -> Turn:
        """Take the next `turn/start` (waiting up to `timeout`), end it with its agent's next
        reply, and return it."""
        __tracebackhide__ = True  # pytest: the failure points at the test's line
        try:
            params = self.client.notification("turn/start", timeout)
        except RequestTimeout:
            raise ScriptedHostError(f"scripted host: no turn/start within {timeout:g} s") from None
        start = typed(TurnStart, params)
        texts = [block.text for message in start.messages for block in message.content]
        agent = start.agent_id
        number = self.used.get(agent, 0) + 1
        if number > len(self.replies.get(agent, ())):
            have = len(self.replies.get(agent, ()))
            why = f"scripted host: no reply left for turn {number} of agent {compact(agent)}"
            self.client.turns_end(agent, start.turn_id, "error", why)
            raise ScriptedHostError(
                f"scripted host: agent {compact(agent)} started its turn {number}, but the table has"
                f" {have} repl{'y' if have == 1 else 'ies'} for it; the turn's input:"
                f" {compact(texts)}"
            )
        reply = self.replies[agent][number - 1]
        self.used[agent] = number
        outcome = reply(start) if callable(reply) else reply
        if outcome is None or isinstance(outcome, str):
            outcome = TurnOutcome("completed", outcome)
        self.client.turns_end(agent, start.turn_id, outcome.reason, outcome.output)
        turn = Turn(agent, start.turn_id, texts, outcome.reason, outcome.output)
        self.turns.append(turn)
        return turn

    def run_until_idle(self, agent_id: str, timeout: float = WAIT) -> list[Turn]:
        """Run turns until no agent of `agent_id`'s tree runs one or has input to start one
        (agents/wait_idle); the turns run. Each wait for a turn/start is bounded by `timeout`."""
        __tracebackhide__ = True
        ran: list[Turn] = []
        while True:
            idle = self.client.agents_wait_idle(agent_id, timeout_ms=0)
            if idle.idle:
                return ran
            try:
                ran.append(self.run_turn(timeout))
            except ScriptedHostError as exc:
                busy = f"running {compact(idle.running or [])}, runnable {compact(idle.runnable or [])}"
                raise ScriptedHostError(
                    f"{exc} while the tree of {compact(agent_id)} is busy ({busy})"
                ) from None

    def left(self) -> dict[str, int]:
        """Replies not used yet, by agent (a test may assert it is all zeros)."""
        return {agent: len(rs) - self.used[agent] for agent, rs in self.replies.items()}
