"""What core tells a tracer: turns begun and ended, messages sent, sessions opened and spawned,
model-facing tool calls. This base does nothing (tracing is off); subagentd/otel/traces.py is the
OpenTelemetry tracer, built only when the OTEL_* environment asks for one.

Every hook runs inside the write transaction of the change it reports, so a tracer may keep the
trace context of a message, a session or a turn in the same commit (Store.put_traces), and a
process that recovers a dead one's turn finds the context it had.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

from subagentd.schema.messages import Message

_UNTRACED: AbstractContextManager[None] = nullcontext()


class Tracing:
    """The hooks, doing nothing: core calls them unconditionally (one call each), except
    `tool_call`, which is entered only when `spans_tool_calls` says it opens a span."""

    spans_tool_calls: ClassVar[bool] = False  # tool_call opens a span (off: skipped)

    def agent_opened(self, agent_id: str, traceparent: str | None) -> None:
        """agents/open: the host's span, if it passed one, is the parent of this agent's turns."""

    def child_spawned(self, child_id: str, parent_id: str, traceparent: str | None) -> None:
        """A child was created (agents/spawn or spawn_agent) by `parent_id`'s current turn."""

    def message_sent(self, message_id: str, agent_id: str, sender_id: str | None) -> None:
        """An inbox row was written for `agent_id`; `sender_id` the agent whose turn sent it."""

    def turn_started(
        self, agent_id: str, turn_id: str, messages: list[Message], traceparent: str | None
    ) -> str | None:
        """A turn began (`traceparent`: the host's, from turns/begin); the turn's own
        traceparent for turn/start (None when off)."""
        return None

    def turn_ended(
        self,
        agent_id: str,
        turn_id: str,
        reason: str,
        cause: str | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        """A turn ended (also one recovered after its process died). `usage`: the token counts
        the host reported for it, when it did."""

    def tool_call(self, caller: str, name: str) -> AbstractContextManager[None]:
        """A model-facing tool call by `caller`, for as long as its rules run (off: one shared
        context that does nothing, not a generator per call)."""
        return _UNTRACED

    def close(self) -> None:
        """Flush what is left, within a bound, at shutdown."""


OFF = Tracing()
