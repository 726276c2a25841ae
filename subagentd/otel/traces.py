"""OpenTelemetry traces (the `otel` extra): a span per turn and per model-facing tool call,
exported over OTLP (HTTP/protobuf) in batches by the SDK's own thread.

Imported only when the standard OTEL_* environment asks for traces (cli/tracing.py), so a server
without the extra, or without that environment, never loads OpenTelemetry. What the spans hold:

- `invoke_agent {name}` per turn (GenAI semantic conventions: `gen_ai.operation.name`,
  `gen_ai.agent.id`, `gen_ai.agent.name`, the end reason, token usage when the host reports it),
  with an event per message the turn consumed (how long it waited, queued or parked) and a link
  to the turn that sent each one. Its parent: the host's span (`traceparent` on turns/begin,
  agents/spawn or agents/open), else for a child the parent's turn that sent the message or
  spawned it; so a tree's turns form one trace, also across processes, through the trace
  context kept with each message, session and turn (storage/traces.py).
- `execute_tool {tool}` per model-facing tool call, a child of the caller's open turn.

Nothing here is on the request path beyond creating and ending span objects: the batch
processor (otel/export.py) exports from its own thread, a collector that is down costs only the
dropped spans, and exit waits for the last export at most SHUTDOWN_WAIT seconds, not at all
when the collector is known down.

Longer than ~300 lines on purpose: the tracer is one object over one set of maps (open turns,
agents' latest contexts, sessions' parents), and re-making a dead process's span needs them all.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, Span, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from subagentd import __version__
from subagentd.core.store import Store
from subagentd.core.tracing import Tracing
from subagentd.otel.export import Batches, Collector
from subagentd.schema.messages import Message
from subagentd.schema.records import KeptTrace

log = logging.getLogger("subagentd")
SHUTDOWN_WAIT = 2.0  # seconds exit gives the last export to a live collector (a down one: none)
_PROPAGATOR = TraceContextTextMapPropagator()
KEPT_NONE = KeptTrace("", 0.0)  # a key with no kept trace context


class _Ids(RandomIdGenerator):
    """Random ids, except for a span re-made for a turn a dead process left open: it gets the
    ids that process gave it (so its children, already exported, find their parent)."""

    def __init__(self) -> None:
        self.forced = threading.local()

    def generate_span_id(self) -> int:
        span_id: int | None = getattr(self.forced, "span_id", None)
        return span_id if span_id is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id: int | None = getattr(self.forced, "trace_id", None)
        return trace_id if trace_id is not None else super().generate_trace_id()


def context_of(traceparent: str | None) -> SpanContext | None:
    """The span context a W3C traceparent names (None when absent or malformed)."""
    if not traceparent:
        return None
    span = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent}))
    found = span.get_span_context()
    return found if found.is_valid else None


def traceparent_of(span: Span) -> str:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier["traceparent"]


def _traceparent(context: SpanContext) -> str:
    return traceparent_of(trace.NonRecordingSpan(context))


def _parent(context: SpanContext | None) -> Context | None:
    return None if context is None else trace.set_span_in_context(trace.NonRecordingSpan(context))


class OtelTracing(Tracing):
    """The tracer core's hooks reach (core/tracing.py); spans of turns open in this process are
    kept by turn id, and the last context of each agent's turns by agent id (notices and reports
    sent right after a turn ended link to it)."""

    spans_tool_calls = True

    def __init__(self, store: Store, provider: TracerProvider, ids: _Ids, batches: Batches) -> None:
        self.store = store
        self.provider = provider
        self.batches = batches
        self.ids = ids
        self.tracer = provider.get_tracer("subagentd", __version__)
        self.turns: dict[str, tuple[str, Span]] = {}  # turn id -> (agent id, span)
        self.current: dict[str, str] = {}  # agent id -> traceparent of its open turn
        self.last: dict[str, str] = {}  # agent id -> traceparent of its latest turn
        self.sessions: dict[str, str | None] = {}  # agent id -> its turns' default parent
        self.names: dict[str, str] = {}
        self.prompts: dict[str, str] = {}  # child id -> the host's traceparent for its prompt

    # --- what core tells ------------------------------------------------------------------

    def agent_opened(self, agent_id: str, traceparent: str | None) -> None:
        if context_of(traceparent) is not None:
            assert traceparent is not None
            self.store.put_trace(f"s:{agent_id}", traceparent, time.time())
            self.sessions[agent_id] = traceparent

    def child_spawned(self, child_id: str, parent_id: str, traceparent: str | None) -> None:
        given = context_of(traceparent) is not None
        if given:  # the host's span: also the parent of the turn on the spawn prompt
            assert traceparent is not None
            self.prompts[child_id] = traceparent
        parent = traceparent if given else self._context_of_agent(parent_id)
        if parent is not None:
            self.store.put_trace(f"s:{child_id}", parent, time.time())
            self.sessions[child_id] = parent

    def message_sent(self, message_id: str, agent_id: str, sender_id: str | None) -> None:
        sent = self.prompts.pop(agent_id, None)
        if self.batches.collector.down:
            return  # what this row is for (the consuming turn's link and event) would be dropped
        if sent is None and sender_id is not None:
            sent = self._context_of_agent(sender_id)
        # the send time is kept too: the receiving turn tells how long the message waited
        self.store.put_trace(f"m:{message_id}", sent or "", time.time())

    def turn_started(
        self, agent_id: str, turn_id: str, messages: list[Message], traceparent: str | None
    ) -> str | None:
        started = time.time()
        keys = [f"m:{m.message_id}" for m in messages]
        if agent_id not in self.sessions:
            keys.append(f"s:{agent_id}")
        kept = self.store.get_traces(keys)
        if agent_id not in self.sessions:
            self.sessions[agent_id] = kept.get(f"s:{agent_id}", KEPT_NONE).traceparent or None
        parent = context_of(traceparent)
        links: list[Link] = []
        events: list[tuple[str, dict[str, Any], float]] = []
        for message in messages:
            row = kept.get(f"m:{message.message_id}")  # none: its send was not traced
            sent, at = row if row is not None else ("", started)
            source = message.source
            sender = context_of(sent)
            from_parent = source.kind == "coordinator"
            if sender is not None and parent is None and from_parent:
                parent = sender  # the parent agent's turn that sent it: the child joins its trace
            elif sender is not None:
                links.append(Link(sender, {"subagentd.message.id": message.message_id}))
            attributes: dict[str, Any] = {
                "subagentd.message.id": message.message_id,
                "subagentd.message.source": f"{source.kind}/{source.form}",
            }
            if row is not None:
                attributes["subagentd.message.waited_ms"] = round(max(0.0, started - at) * 1000, 3)
            if source.sender_session_id:
                attributes["subagentd.message.sender"] = source.sender_session_id
            events.append(("subagentd.message.waited", attributes, at))
        if parent is None:
            parent = context_of(self.sessions.get(agent_id))
        name = self._name(agent_id)
        span = self.tracer.start_span(
            f"invoke_agent {name}",
            context=_parent(parent),
            kind=SpanKind.INTERNAL,
            links=links,
            start_time=int(started * 1e9),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": agent_id,
                "gen_ai.agent.name": name,
                "subagentd.turn.id": turn_id,
                "subagentd.turn.messages": len(messages),
            },
        )
        for event, attributes, at in events:
            span.add_event(event, attributes, timestamp=int(at * 1e9))
        own = traceparent_of(span)
        self.turns[turn_id] = (agent_id, span)
        self.current[agent_id] = self.last[agent_id] = own
        # kept: its own context, its parent's ("-" for none) and its links', space-separated, for
        # the process that may have to end it after this one died (`_remade`)
        kept_parent = "-" if parent is None else _traceparent(parent)
        held = " ".join([own, kept_parent, *(_traceparent(link.context) for link in links)])
        self.store.put_trace(f"t:{turn_id}", held, started)
        return own

    def turn_ended(
        self,
        agent_id: str,
        turn_id: str,
        reason: str,
        cause: str | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        held = self.turns.pop(turn_id, None)
        span = held[1] if held is not None else self._remade(agent_id, turn_id)
        if span is None:
            return
        if self.current.get(agent_id) == traceparent_of(span):
            del self.current[agent_id]
        span.set_attribute("subagentd.turn.end_reason", reason)
        span.set_attribute("gen_ai.response.finish_reasons", [reason])
        if cause is not None:
            span.set_attribute("subagentd.turn.cause", cause)
        if reason in ("error", "aborted") or cause == "crash":
            span.set_status(trace.StatusCode.ERROR, cause or reason)
        for key, attribute in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
        ):
            if usage is not None and isinstance(usage.get(key), int):
                span.set_attribute(attribute, usage[key])
        span.end()

    def _remade(self, agent_id: str, turn_id: str) -> Span | None:
        """The span of a turn another process began and never ended (it died): made again here
        with the ids and start that process kept, so the trace gets it whole."""
        kept = self.store.get_traces([f"t:{turn_id}"]).get(f"t:{turn_id}")
        own, above, *linked = (kept.traceparent if kept is not None else "").split(" ") + ["-"]
        context = context_of(own)
        if kept is None or context is None:
            return None
        parent = context_of(above)
        links = [Link(c) for c in map(context_of, linked) if c is not None]
        self.ids.forced.span_id, self.ids.forced.trace_id = context.span_id, context.trace_id
        try:
            name = self._name(agent_id)
            span = self.tracer.start_span(
                f"invoke_agent {name}",
                context=_parent(parent),
                start_time=int(kept.at * 1e9),
                links=links,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.id": agent_id,
                    "gen_ai.agent.name": name,
                    "subagentd.turn.id": turn_id,
                    "subagentd.turn.recovered": True,
                },
            )
        finally:
            self.ids.forced.span_id = self.ids.forced.trace_id = None
        self.last[agent_id] = traceparent_of(span)
        return span

    @contextmanager
    def tool_call(self, caller: str, name: str) -> Iterator[None]:
        if self.batches.collector.down:  # the span would be dropped: it is not made
            self.batches.skip()
            yield
            return
        span = self.tracer.start_span(
            f"execute_tool {name}",
            context=_parent(context_of(self._context_of_agent(caller, latest=False))),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.agent.id": caller,
            },
        )
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=True):
                yield
        except BaseException as exc:
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            raise
        finally:
            span.end()

    def close(self) -> None:
        """Send the last spans, waiting SHUTDOWN_WAIT seconds at most (not at all when the
        collector is known down: `batches.outcome` says which)."""
        for _, span in list(self.turns.values()):
            span.end()  # turns still open at exit (shutdown force-ends them before this)
        self.turns.clear()
        self.batches.close(SHUTDOWN_WAIT)
        self.provider.shutdown()  # the processor is closed: this returns at once

    def _context_of_agent(self, agent_id: str, latest: bool = True) -> str | None:
        """Where what an agent does now belongs: its open turn, else (`latest`) its latest turn,
        else the span its turns go under (e.g. the host's, for a root between turns)."""
        found = self.current.get(agent_id) or (self.last.get(agent_id) if latest else None)
        if found is None:
            if agent_id not in self.sessions:
                kept = self.store.get_traces([f"s:{agent_id}"]).get(f"s:{agent_id}")
                self.sessions[agent_id] = kept.traceparent if kept is not None else None
            found = self.sessions[agent_id]
        return found

    def _name(self, agent_id: str) -> str:
        name = self.names.get(agent_id)
        if name is None:
            record = self.store.get_session(agent_id)
            name = self.names[agent_id] = (record.label if record else None) or agent_id
        return name


def start(store: Store) -> OtelTracing:
    """The tracer for a serving process: OTLP over HTTP/protobuf, batched (otel/export.py),
    configured by the standard environment (endpoint, headers, timeout, OTEL_BSP_*, OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES)."""
    attributes = {"service.version": __version__}
    named = "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not (os.environ.get("OTEL_SERVICE_NAME") or named):
        attributes["service.name"] = "subagentd"
    ids = _Ids()
    provider = TracerProvider(
        resource=Resource.create(attributes), id_generator=ids, shutdown_on_exit=False
    )
    batches = Batches(Collector())
    provider.add_span_processor(batches)
    return OtelTracing(store, provider, ids, batches)
