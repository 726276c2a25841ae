"""Sending spans (subagentd/otel/export.py): a collector that is down costs the dropped spans and
nothing else — no wait at exit, no retries, no exporter import, a bounded queue, one warning —
and a live collector still gets the last spans at exit; in process, then through real servers."""

from __future__ import annotations

import logging
import re
import socket
import sys
import threading
import time

import pytest

from tests.otlp import Receiver
from tests.spawned import ServerProcess

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

from subagentd.otel import export as otel_export  # noqa: E402
from subagentd.otel.export import Batches, Collector  # noqa: E402

EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def dead_port() -> int:
    with socket.socket() as s:  # bound, never listening, closed: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def tracer_for(endpoint: str, **bsp: str):
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    environ.update({f"OTEL_BSP_{k.upper()}": v for k, v in bsp.items()})
    collector = Collector(environ)
    batches = Batches(collector, environ)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(batches)
    return provider.get_tracer("t"), batches, collector


def spans(tracer, count: int) -> None:
    for n in range(count):
        tracer.start_span(f"s{n}").end()


def test_exit_with_the_collector_down_drops_the_queue_without_sending_or_waiting(caplog):
    tracer, batches, collector = tracer_for(f"http://127.0.0.1:{dead_port()}")
    assert batches.looked.wait(30)  # the sending thread looks when it starts: refused
    assert collector.down and collector.looks == 1
    spans(tracer, 10)
    with caplog.at_level(logging.WARNING):
        assert batches.close(5.0) == "skipped"
    assert collector.looks == 1  # known down: exit made no look of its own, nor a send
    assert collector.exporter is None  # no export was tried, so none could wait
    assert (batches.dropped, batches.sent, len(batches.queue)) == (10, 0, 0)
    assert batches.thread.is_alive()  # nobody joined the sending thread
    assert [r.getMessage() for r in caplog.records] == [
        f"traces: 10 spans dropped, 0 exported (the collector at {collector.endpoint}"
        " refuses connections)",
    ]


def test_exit_looks_once_when_nothing_told_it_the_collector_is_down():
    tracer, batches, collector = tracer_for(f"http://127.0.0.1:{dead_port()}")
    assert batches.looked.wait(30)
    collector.down = False  # as if the collector had answered the first look
    spans(tracer, 4)
    assert batches.close(5.0) == "skipped"
    assert collector.looks == 2 and collector.exporter is None
    assert batches.dropped == 4


def test_with_the_collector_down_the_queue_stays_bounded_and_warns_once(caplog):
    tracer, batches, collector = tracer_for(
        f"http://127.0.0.1:{dead_port()}", max_queue_size="8", max_export_batch_size="4"
    )
    assert batches.looked.wait(30)
    with caplog.at_level(logging.WARNING):
        with batches.sending:  # the sending thread, woken by a full batch, waits for this
            spans(tracer, 500)
            assert len(batches.queue) == 8 and batches.dropped == 492
        batches.send_queued()  # the thread's send or this one finds it down, drops the 8
    assert collector.looks <= 3  # one a send (start, the wake, this one), none a span
    assert (batches.dropped, len(batches.queue)) == (500, 0)
    assert [r.getMessage() for r in caplog.records] == [
        f"traces: the collector at {collector.endpoint} refuses connections:"
        " spans are dropped (counted at exit)"
    ]


def test_a_live_collector_gets_the_last_spans_at_exit(receiver):
    tracer, batches, collector = tracer_for(receiver.endpoint)
    spans(tracer, 7)  # the schedule is 10 minutes: only the exit sends them
    assert receiver.requests == 0
    assert batches.close(30.0) == "flushed"
    assert sorted(s["name"] for s in receiver.spans) == [f"s{n}" for n in range(7)]
    assert (batches.sent, batches.dropped, collector.down) == (7, 0, False)


def test_the_exporter_is_imported_only_once_a_collector_answers(receiver):
    sys.modules.pop(EXPORTER, None)
    tracer, batches, collector = tracer_for(f"http://127.0.0.1:{dead_port()}")
    assert batches.looked.wait(30)
    spans(tracer, 3)
    batches.send_queued()
    assert EXPORTER not in sys.modules
    tracer, batches, collector = tracer_for(receiver.endpoint)
    spans(tracer, 3)
    batches.send_queued()
    assert EXPORTER in sys.modules and len(receiver.spans) == 3


class Flooding:
    """A hostile collector: each export is answered 200 with a body of `size` bytes (written as
    fast as it is read, or one byte every `drip` seconds); `sent` counts the bytes it wrote."""

    def __init__(self, size: int, drip: float | None = None) -> None:
        self.size, self.drip, self.sent, self.answered = size, drip, 0, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return  # a look at the address: connected, then closed
                head += data
            found = re.search(rb"(?i)content-length: *(\d+)", head)
            length = int(found.group(1)) if found else 0
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.size)
            chunk = b"x" if self.drip else b"x" * 65536
            try:
                while self.sent < self.size:
                    self.sent += conn.send(chunk[: self.size - self.sent])
                    if self.drip:
                        time.sleep(self.drip)
            except OSError:
                pass  # the exporter closed the connection: it read no more
            self.answered.set()

    def close(self) -> None:
        self.listener.close()


def test_a_collectors_huge_answer_is_read_to_a_bound_and_the_export_still_counts():
    collector_server = Flooding(64 * 1024 * 1024)
    try:
        tracer, batches, collector = tracer_for(collector_server.endpoint)
        spans(tracer, 2)
        batches.send_queued()
        assert (batches.sent, batches.dropped) == (2, 0)
        assert collector_server.answered.wait(60)
        # read: at most MAX_ANSWER_BYTES; written: that plus what the sockets' buffers took
        assert collector_server.sent < 16 * 1024 * 1024, collector_server.sent
    finally:
        collector_server.close()


def test_a_collector_dripping_an_endless_answer_is_cut_at_the_export_timeout(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    collector_server = Flooding(1 << 40, drip=0.05)  # a byte at a time: no read ever times out
    try:
        tracer, batches, collector = tracer_for(collector_server.endpoint)
        spans(tracer, 1)
        sending = threading.Thread(target=batches.send_queued, daemon=True)
        sending.start()
        sending.join(60)  # a hang detector, not a timing check: the export ends at its timeout
        assert not sending.is_alive()
        assert collector_server.answered.wait(60)
        assert batches.sent == 1
    finally:
        collector_server.close()


def test_the_endpoint_and_the_address_looked_at(monkeypatch):
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    assert otel_export.traces_endpoint({}) == "http://localhost:4318/v1/traces"
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:9/"}
    assert otel_export.traces_endpoint(base) == "http://c:9/v1/traces"
    own = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t/x"}
    assert otel_export.traces_endpoint(own) == "https://t/x"
    assert otel_export.address_of("https://t/x") == ("t", 443)
    assert otel_export.address_of("http://c:9/v1/traces") == ("c", 9)
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    monkeypatch.setenv("no_proxy", "")
    assert otel_export.address_of("http://c:9/v1/traces") == ("proxy", 3128)


def test_while_the_collector_is_down_tool_calls_make_no_span_and_come_back_with_it(
    monkeypatch,
):
    from subagentd.otel import traces as otel

    port = dead_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    tracing = otel.start(store=None)  # no store read below:
    tracing.sessions["root"] = None  # root has no turn and no stored context
    batches = tracing.batches
    assert batches.looked.wait(30) and batches.collector.down
    with tracing.tool_call("root", "list_agents"):
        pass
    assert (len(batches.queue), batches.dropped) == (0, 1)  # counted, never made
    with socket.socket() as listening:  # a collector on that port now
        listening.bind(("127.0.0.1", port))
        listening.listen()
        batches.send_queued()  # the next tick's look finds it
        assert not batches.collector.down
        with tracing.tool_call("root", "list_agents"):
            pass
        assert [s.name for s in batches.queue] == ["execute_tool list_agents"]
        batches.collector.down = True  # gone again: exit drops the queue
        assert batches.close(5.0) == "skipped"


def serve(tmp_path, endpoint: str, turns: int) -> ServerProcess:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "600000"}
    proc = ServerProcess(db=str(tmp_path / "d.db"), env=env)
    host = proc.host
    host.initialize()
    host.open("root")
    for n in range(turns):
        begun = host.call("turns/begin", {"agent_id": "root", "messages": [f"m{n}"]})
        host.notification("turn/start", agent_id="root")
        host.end_turn("root", begun["turn_id"], "completed", f"r{n}")
    proc.close_stdin()
    return proc


def test_a_server_exiting_with_the_collector_down_skips_the_wait(tmp_path):
    endpoint = f"http://127.0.0.1:{dead_port()}"
    proc = serve(tmp_path, endpoint, 30)
    try:
        assert proc.wait() == 0
        logged = proc.stderr_text()
        assert (
            f"traces: 30 spans dropped, 0 exported (the collector at {endpoint}/v1/traces"
            " refuses connections)"
        ) in logged
        assert "did not take" not in logged  # the exit did not wait for an export
        assert logged.count("dropped") == 1  # the count at exit, nothing per span
        assert "Traceback" not in logged and "retrying" not in logged
    finally:
        proc.stop()


def test_a_server_exiting_sends_its_last_spans_to_a_live_collector(tmp_path, receiver):
    proc = serve(tmp_path, receiver.endpoint, 5)
    try:
        assert proc.wait() == 0
        names = [s["name"] for s in receiver.spans]
        assert names.count("invoke_agent root") == 5
        assert "dropped" not in proc.stderr_text()
    finally:
        proc.stop()
