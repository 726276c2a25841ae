"""A real OTLP/HTTP receiver for the tests: an HTTP server on 127.0.0.1 that accepts
`POST /v1/traces` (protobuf, optionally gzip), decodes each ExportTraceServiceRequest with
opentelemetry-proto and keeps every span as a plain dict."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes(pairs) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


class Receiver:
    """`endpoint` for OTEL_EXPORTER_OTLP_ENDPOINT; `spans` as received; `requests` counted."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.take(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex() or None,
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "attributes": attributes(span.attributes),
                                "events": [
                                    {"name": e.name, "attributes": attributes(e.attributes)}
                                    for e in span.events
                                ],
                                "links": [
                                    {
                                        "trace_id": link.trace_id.hex(),
                                        "span_id": link.span_id.hex(),
                                        "attributes": attributes(link.attributes),
                                    }
                                    for link in span.links
                                ],
                                "status": span.status.code,
                                "resource": resource,
                            }
                        )

    def wait_for(self, condition, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The spans once `condition(spans)` holds (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if condition(spans):
                return spans
            assert time.monotonic() < deadline, (
                f"the receiver got only {[s['name'] for s in spans]}"
            )
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
