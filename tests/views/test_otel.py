"""OpenTelemetry traces against a real OTLP/HTTP receiver (tests/otlp.py decodes the protobuf
with opentelemetry-proto): a tree three deep with a report, an interrupt and a crash that
another process recovers, checked span by span (names, parents, links, attributes, events);
a host's traceparent; a collector that is down; and no OpenTelemetry without the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from subagentd.cli.tracing import configured
from tests.otlp import Receiver
from tests.spawned import TIMEOUT, ServerProcess

HOST_TRACE = "0af7651916cd43dd8448eb211c80319c"
HOST_SPAN = "b7ad6b7169203331"
HOST = f"00-{HOST_TRACE}-{HOST_SPAN}-01"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def env_for(receiver: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}


def tool(host, name: str, caller: str, **arguments):
    return host.call(
        "tools/call", {"name": name, "arguments": arguments, "_meta": {"subagentd/caller": caller}}
    )


def span_of(traceparent: str) -> str:
    return traceparent.split("-")[2]


def turns(spans, agent_id: str) -> list[dict]:
    found = [s for s in spans if s["attributes"].get("gen_ai.agent.id") == agent_id]
    return sorted(
        (s for s in found if s["name"].startswith("invoke_agent")), key=lambda s: s["start"]
    )


def named(spans, name: str) -> list[dict]:
    return [s for s in spans if s["name"] == name]


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_a_tree_three_deep_with_a_report_an_interrupt_and_a_crash_is_one_trace(
    receiver, tmp_path, request, backend_name
):
    db = str(tmp_path / "traced.db")
    if backend_name == "postgres":
        db = request.getfixturevalue("pg_stores").url()
    first = ServerProcess("--log-level", "info", db=db, env=env_for(receiver))
    host = first.host
    host.initialize()
    host.open("root", label="coordinator", traceparent=HOST)
    begun = host.call("turns/begin", {"agent_id": "root", "messages": ["plan"]})
    r1 = host.notification("turn/start", agent_id="root")
    assert r1["turn_id"] == begun["turn_id"]
    assert r1["traceparent"].startswith(f"00-{HOST_TRACE}-")  # the host's trace
    host.call("agents/spawn", {"caller": "root", "child_id": "c1", "label": "researcher",
                               "prompt": "look"})  # fmt: skip
    c1a = host.notification("turn/start", agent_id="c1")
    host.call("agents/spawn", {"caller": "c1", "child_id": "g1", "label": "finder",
                               "prompt": "look deeper"})  # fmt: skip
    g1a = host.notification("turn/start", agent_id="g1")
    assert tool(host, "report", "g1", output="found it")["isError"] is False
    usage = {"input_tokens": 1200, "output_tokens": 300, "cost": 0.25}
    end = {"agent_id": "g1", "turn_id": g1a["turn_id"], "reason": "completed"}
    host.call("turns/end", {**end, "output": "all found", "usage": usage})
    host.notification("agent/settled", agent_id="g1")
    assert tool(host, "interrupt_agent", "root", agent_id="c1")["isError"] is False
    host.notification("turn/interrupt", agent_id="c1")
    host.end_turn("c1", c1a["turn_id"], "aborted")
    assert tool(host, "send_message", "root", subagent_id="c1", message="go on")["isError"] is False
    c1b = host.notification("turn/start", agent_id="c1")  # g1's news first (FIFO), then ours
    names = ("execute_tool report", "execute_tool interrupt_agent", "execute_tool send_message")
    receiver.wait_for(lambda spans: len(turns(spans, "g1")) == 1 and len(turns(spans, "c1")) == 1
                      and all(named(spans, n) for n in names))  # fmt: skip
    first.proc.send_signal(signal.SIGKILL)  # root's and c1's turns left open
    first.proc.wait(TIMEOUT)
    first.stop()

    second = ServerProcess("--log-level", "info", db=db, env=env_for(receiver))
    try:
        again = second.host
        again.initialize()
        again.open("root")  # c1's crash notice, queued while root was not live, runs now
        r2 = again.notification("turn/start", agent_id="root")
        again.end_turn("root", r2["turn_id"], "completed", "noted")
        spans = receiver.wait_for(lambda spans: len(turns(spans, "root")) == 2
                                  and len(turns(spans, "c1")) == 2)  # fmt: skip
    finally:
        assert second.stop() == 0

    (root1, root2), (c1_first, c1_second), (g1_only,) = (
        turns(spans, "root"), turns(spans, "c1"), turns(spans, "g1"),
    )  # fmt: skip
    every = [root1, root2, c1_first, c1_second, g1_only]
    assert {s["trace_id"] for s in every} == {HOST_TRACE}  # one trace, across two processes
    for span in every:
        assert span["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert span["name"] == "invoke_agent " + span["attributes"]["gen_ai.agent.name"]
        assert span["resource"]["service.name"] == "subagentd"
    assert [s["attributes"]["gen_ai.agent.name"] for s in (root1, c1_first, g1_only)] == [
        "coordinator", "researcher", "finder",
    ]  # fmt: skip
    # parents: the host's span, then each child's turn below the parent turn that spawned it
    assert (root1["parent"], root2["parent"]) == (HOST_SPAN, HOST_SPAN)
    assert root1["span_id"] == span_of(r1["traceparent"])
    assert c1_first["parent"] == c1_second["parent"] == root1["span_id"]
    assert g1_only["parent"] == c1_first["span_id"]
    # the usage turns/end reported, on that turn's span only
    assert (
        g1_only["attributes"]["gen_ai.usage.input_tokens"],
        g1_only["attributes"]["gen_ai.usage.output_tokens"],
    ) == (1200, 300)
    assert all(
        "gen_ai.usage.input_tokens" not in s["attributes"] for s in every if s is not g1_only
    )
    assert [c1_first["span_id"], g1_only["span_id"]] == [
        span_of(c1a["traceparent"]), span_of(g1a["traceparent"]),
    ]  # fmt: skip
    # how each turn ended: the interrupt, the report's sender, the crash recovered elsewhere
    ends = {id(s): s["attributes"]["subagentd.turn.end_reason"] for s in every}
    assert [ends[id(s)] for s in every] == ["error", "completed", "aborted", "error", "completed"]
    for crashed, started in ((root1, r1), (c1_second, c1b)):  # re-made by the second process
        assert crashed["span_id"] == span_of(started["traceparent"])
        assert crashed["attributes"]["subagentd.turn.recovered"] is True
        assert crashed["attributes"]["subagentd.turn.cause"] == "crash"
        assert crashed["status"] == 2  # STATUS_CODE_ERROR
    assert c1_first["status"] == 2 and g1_only["status"] == 0
    # links: the turn that consumed a message links to the turn that sent it
    assert [link["span_id"] for link in c1_second["links"]] == [g1_only["span_id"]]
    assert [link["span_id"] for link in root2["links"]] == [c1_second["span_id"]]
    assert g1_only["links"] == [] and c1_first["links"] == []
    # the messages each turn consumed, and how long they waited (a recovered turn's span is
    # re-made without them: they were the dead process's)
    waited = g1_only["events"]
    assert [e["name"] for e in waited] == ["subagentd.message.waited"]
    assert waited[0]["attributes"]["subagentd.message.sender"] == "c1"
    assert waited[0]["attributes"]["subagentd.message.source"] == "coordinator/spawn"
    assert waited[0]["attributes"]["subagentd.message.waited_ms"] >= 0
    assert root2["events"][0]["attributes"]["subagentd.message.source"] == "subagent-settled/notice"
    # the model-facing tool calls, each a child of its caller's open turn
    for name, caller, parent in (
        ("execute_tool report", "g1", g1_only),
        ("execute_tool interrupt_agent", "root", root1),
        ("execute_tool send_message", "root", root1),
    ):
        (call,) = named(spans, name)
        assert call["parent"] == parent["span_id"] and call["trace_id"] == HOST_TRACE
        assert call["attributes"] == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name.split()[1],
            "gen_ai.agent.id": caller,
        }


def test_a_host_traceparent_on_spawn_and_begin_parents_those_turns(receiver):
    proc = ServerProcess(db=":memory:", env=env_for(receiver))
    try:
        host = proc.host
        host.initialize()
        host.open("root")
        spawn_parent = f"00-{'1' * 32}-{'2' * 16}-01"
        begin_parent = f"00-{'3' * 32}-{'4' * 16}-01"
        begun = host.call(
            "turns/begin", {"agent_id": "root", "messages": ["x"], "traceparent": begin_parent}
        )
        root = host.notification("turn/start", agent_id="root")
        assert root["turn_id"] == begun["turn_id"]
        assert root["traceparent"].startswith(f"00-{'3' * 32}-")
        # spawned in root's turn, but under the span the host names
        host.call("agents/spawn", {"caller": "root", "child_id": "c1", "label": "w", "prompt": "p",
                                   "traceparent": spawn_parent})  # fmt: skip
        c1 = host.notification("turn/start", agent_id="c1")
        assert c1["traceparent"].startswith(f"00-{'1' * 32}-")
        host.end_turn("c1", c1["turn_id"], "completed", "done")
        host.end_turn("root", begun["turn_id"], "completed", "ok")
        spans = receiver.wait_for(lambda s: len(turns(s, "root")) >= 1 and turns(s, "c1"))
        assert (turns(spans, "c1")[0]["trace_id"], turns(spans, "c1")[0]["parent"]) == (
            "1" * 32, "2" * 16,
        )  # fmt: skip
        mine = [s for s in turns(spans, "root") if s["span_id"] == span_of(root["traceparent"])]
        assert [(s["trace_id"], s["parent"]) for s in mine] == [("3" * 32, "4" * 16)]
    finally:
        assert proc.stop() == 0


def test_a_collector_that_is_down_costs_only_the_dropped_spans(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{dead}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    proc = ServerProcess("--log-level", "info", db=str(tmp_path / "d.db"), env=env)
    try:
        host = proc.host
        host.initialize()
        host.open("root")
        for n in range(30):
            begun = host.call("turns/begin", {"agent_id": "root", "messages": [f"m{n}"]})
            start = host.notification("turn/start", agent_id="root")
            assert start["traceparent"]  # traced, though nothing receives it
            host.end_turn("root", begun["turn_id"], "completed", f"r{n}")
        events = host.call("transcript/read", {"agent_id": "root"})["events"]
        assert [e["type"] for e in events].count("turn_end") == 30
        proc.close_stdin()
        assert proc.wait() == 0  # shutdown waits for the last export a bounded time only
        logged = proc.stderr_text()
        assert "tracing: OpenTelemetry spans exported over OTLP/HTTP" in logged
        assert "Traceback" not in logged
    finally:
        proc.stop()


def test_without_the_environment_opentelemetry_is_never_imported(tmp_path):
    session = (
        "from tests.spawned import ServerProcess\n"
        "import sys, json\n"
        "p = ServerProcess(argv=['-X', 'importtime', '-m', 'subagentd',"
        f" '--db', {str(tmp_path / 'q.db')!r}], env=json.loads(sys.argv[1]))\n"
        "h = p.host; h.initialize(); h.open('root')\n"
        "b = h.call('turns/begin', {'agent_id': 'root', 'messages': ['x']})\n"
        "s = h.notification('turn/start', agent_id='root')\n"
        "h.end_turn('root', b['turn_id'], 'completed', 'ok')\n"
        "p.close_stdin(); assert p.wait() == 0\n"
        "print('opentelemetry' in p.stderr_text(), 'traceparent' in s); p.stop()\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    import json

    def imported(extra: dict[str, str]) -> str:
        done = subprocess.run(
            [sys.executable, "-c", session, json.dumps(extra)],
            capture_output=True, text=True, timeout=TIMEOUT, env=clean,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert imported({}) == "False False"  # neither imported nor on turn/start
    assert imported({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) == "False False"
    # the control: the same session with an endpoint imports it and traces
    assert imported({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) == "True True"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, False),
    ],
)
def test_traces_are_on_only_when_the_standard_environment_asks(environ, on):
    assert configured(environ) is on
