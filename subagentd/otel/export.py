"""Getting spans to the collector (the `otel` extra): a bounded queue that the request path only
appends to, one thread that sends it in batches over OTLP/HTTP, and a look at the collector's
address (one TCP connect) before each send.

A collector that is down costs the dropped spans and nothing else:
- nothing on the request path waits or grows: ending a span appends it to a queue of at most
  OTEL_BSP_MAX_QUEUE_SIZE spans; past that it is dropped and counted;
- the sending thread looks at the address when it starts, at each tick
  (OTEL_BSP_SCHEDULE_DELAY) or full batch, and after a failed send; refused, the whole queue is
  dropped (the exporter's retries with backoff never start, and the exporter with its modules
  is not even imported until a collector answers), and `down` tells the tracer to make no
  span it need not (otel/traces.py);
- at exit, with the collector known down (the last look was refused, or the one look made at
  exit), the queue is dropped without waiting; a live collector gets the final flush, bounded;
- drops are logged once when they begin and counted once at exit, never per span (at an exit
  that drops the queue, only the count);
- a collector's answer is read to at most MAX_ANSWER_BYTES and within the export's timeout
  (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default): whatever a collector sends back, an export
  holds a bounded amount of memory for a bounded time.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

log = logging.getLogger("subagentd")
LOOK_WAIT = 0.5  # seconds a look at the collector's address may take (a connect)
MAX_ANSWER_BYTES = 64 * 1024  # of a collector's answer, read (an OTLP answer is a few bytes)


def _number(environ: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(environ.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def traces_endpoint(environ: Mapping[str, str] = os.environ) -> str:
    """Where the OTLP exporter sends (the same rule it applies to the standard environment)."""
    if endpoint := environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return endpoint
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318/"
    return f"{base.removesuffix('/')}/v1/traces"


def address_of(endpoint: str) -> tuple[str, int] | None:
    """The host and port a send connects to: the endpoint's, or the proxy's when one applies
    (None when neither can be told: then no look is made)."""
    url = urllib.parse.urlsplit(endpoint)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and url.hostname and not urllib.request.proxy_bypass(url.hostname):
        url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None
    return (url.hostname, port) if url.hostname else None


class Collector:
    """The OTLP/HTTP receiver spans go to. `down`: the last look at its address failed.
    The OTLP exporter (and with it requests and protobuf) is made at the first send to an
    address that accepts connections; `looks` counts the connects made to find out."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self.endpoint = traces_endpoint(environ)
        self.address = address_of(self.endpoint)
        self.exporter: Any = None
        self.down = False
        self.looks = 0

    def look(self, wait: float = LOOK_WAIT) -> bool:
        """Whether the collector's address accepts a connection now (sets `down`)."""
        if self.address is None:
            return True
        self.looks += 1
        try:
            socket.create_connection(self.address, timeout=max(wait, 0.001)).close()
        except OSError:
            self.down = True
        else:
            self.down = False
        return not self.down

    def prepare(self) -> None:
        """Make the exporter (importing its modules) if the collector answers a look."""
        if self.exporter is None and self.look():
            self.exporter = _exporter(self.endpoint)

    def send(self, spans: Sequence[ReadableSpan]) -> bool:
        """Export one batch (right after a look found the collector up); False when it did not
        go through (the spans are then lost)."""
        if self.exporter is None:
            self.exporter = _exporter(self.endpoint)
        from opentelemetry.sdk.trace.export import SpanExportResult

        return bool(self.exporter.export(spans) == SpanExportResult.SUCCESS)

    def shutdown(self) -> None:
        if self.exporter is not None:
            self.exporter.shutdown()  # also ends a retry wait in progress


def _exporter(endpoint: str) -> Any:
    """The OTLP/HTTP exporter, over a session that reads at most MAX_ANSWER_BYTES of an answer,
    within the request's timeout (requests alone would read a body of any size, and its timeout
    bounds each read, not the whole)."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from urllib3.exceptions import HTTPError as urllib3_errors

    class BoundedAnswers(requests.Session):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["stream"] = True
            timeout = kwargs.get("timeout")
            ends = time.monotonic() + (timeout if isinstance(timeout, int | float) else 10.0)
            response = super().request(*args, **kwargs)
            body = bytearray()
            raw = response.raw
            read = getattr(raw, "read1", None) or raw.read  # read1: what arrived (urllib3 2)
            try:
                while len(body) < MAX_ANSWER_BYTES and time.monotonic() < ends:
                    chunk = read(16 * 1024, decode_content=True)
                    if not chunk:
                        break
                    body += chunk
            except (OSError, requests.RequestException, urllib3_errors):
                pass  # what was read stands: the status decides the export
            finally:
                response.close()  # the rest of the answer is never read
            response._content = bytes(body[:MAX_ANSWER_BYTES])
            return response

    return OTLPSpanExporter(endpoint=endpoint, session=BoundedAnswers())


class Batches(SpanProcessor):
    """The batch span processor: OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE and
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE as the standard defines them. `outcome` after `close`:
    "flushed" (everything queued was handed to the collector), "skipped" (the collector was
    known down: dropped without waiting) or "timed out" (a live collector took too long)."""

    def __init__(self, collector: Collector, environ: Mapping[str, str] = os.environ) -> None:
        self.collector = collector
        self.delay = _number(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.limit = _number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = min(_number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512), self.limit)
        self.queue: collections.deque[ReadableSpan] = collections.deque()
        self.sent = 0
        self.dropped = 0
        self.counting = threading.Lock()  # drops are counted by the request path and the thread
        self.warned = False
        self.outcome: str | None = None
        self.looked = threading.Event()  # the sending thread's first look is done
        self.stopping = False
        self.wake = threading.Event()
        self.sending = threading.Lock()  # one send at a time (the thread, a flush)
        self.thread = threading.Thread(target=self._run, name="subagentd-otlp", daemon=True)
        self.thread.start()

    # --- the request path -----------------------------------------------------------------

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        if self.stopping or len(self.queue) >= self.limit:
            self._drop(1)
            return
        self.queue.append(span)
        if len(self.queue) >= self.batch:
            self.wake.set()

    # --- the sending thread ---------------------------------------------------------------

    def _run(self) -> None:
        self.collector.prepare()  # at once: a look tells whether the collector is up
        self.looked.set()
        while not self.stopping:
            self.wake.wait(self.delay)
            self.wake.clear()
            if not self.stopping:
                self.send_queued()
        if self.outcome is None:  # close is waiting for this final send
            self.send_queued()

    def skip(self) -> None:
        """A span not made because the collector is known down (it would be dropped)."""
        self._drop(1)

    def send_queued(self) -> None:
        """Hand everything queued to the collector, a batch at a time, after a look (so a
        collector that is down is looked at once a tick, queue or not, and found again when it
        is back, and one that went down is found before the exporter's retries start); down,
        everything queued is dropped."""
        with self.sending:
            if not self.collector.look():
                self._drop_queued()
                return
            while self.queue:
                batch = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
                if self.collector.send(batch):
                    self.sent += len(batch)
                    continue
                self._drop(len(batch))
                if not self.collector.look():
                    self._drop_queued()
                    return

    def _drop_queued(self) -> None:
        dropped = 0
        while self.queue:
            self.queue.popleft()
            dropped += 1
        self._drop(dropped)

    def _why(self) -> str:
        return "refuses connections" if self.collector.down else "does not keep up"

    def _drop(self, count: int) -> None:
        with self.counting:
            self.dropped += count
            warn = count and not self.warned  # once; at exit, the count
            self.warned = self.warned or bool(count)
        if warn:
            log.warning(
                "traces: the collector at %s %s: spans are dropped (counted at exit)",
                self.collector.endpoint,
                self._why(),
            )

    # --- exit -------------------------------------------------------------------------------

    def close(self, wait: float) -> str:
        """Send what is queued, waiting `wait` seconds at most; at once when the collector is
        known down (its last look was refused, or the one look made now)."""
        if self.outcome is not None:
            return self.outcome
        ends = time.monotonic() + wait
        known_down = self.collector.down or (bool(self.queue) and not self.collector.look(wait))
        self.stopping = True
        if known_down:
            self.outcome = "skipped"
            self.warned = True  # the count below says it all
            self._drop_queued()
        else:
            self.wake.set()
            self.thread.join(max(0.0, ends - time.monotonic()))
            self.outcome = "timed out" if self.thread.is_alive() else "flushed"
        self.collector.shutdown()
        if self.outcome == "timed out":
            self.dropped += len(self.queue)
            why = f"did not take the last spans within {wait:.1f} s"
        else:
            why = self._why()
        if self.dropped:
            log.warning(
                "traces: %d spans dropped, %d exported (the collector at %s %s)",
                self.dropped,
                self.sent,
                self.collector.endpoint,
                why,
            )
        return self.outcome

    def shutdown(self) -> None:
        self.close(LOOK_WAIT)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.send_queued()
        return not self.queue
