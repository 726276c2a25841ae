"""The process boundary: stdout purity, LSP framing, frame limits, EOF and signals, restarts."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import textwrap

import pytest

import subagentd
from subagentd.schema.codes import Code
from tests.spawned import TIMEOUT, RpcError

PYTHON = sys.executable
INIT = {"protocolVersion": "2025-06-18", "clientInfo": {"name": "stdio-test", "version": "0"}}


def request(request_id, method, params=None) -> dict:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def lsp_frame(message) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_lsp_stream(data: bytes) -> list:
    """Every byte must belong to an LSP frame; returns the decoded bodies in order."""
    frames = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"incomplete LSP header: {data[:80]!r}"
        lines = header.split(b"\r\n")
        lengths = [
            int(v)
            for k, _, v in (ln.partition(b":") for ln in lines)
            if k.lower() == b"content-length"
        ]
        assert len(lengths) == 1, header
        body, data = rest[: lengths[0]], rest[lengths[0] :]
        assert len(body) == lengths[0], "truncated LSP body"
        frames.append(json.loads(body))
    return frames


def run_with_stdin(
    data: bytes, *args: str, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "subagentd", *args],
        input=data,
        capture_output=True,
        timeout=timeout,
    )


# --- stdout purity -------------------------------------------------------------------------

NOISY_SERVER = textwrap.dedent(
    """
    import os, sys
    from subagentd.schema import host_methods as h
    from subagentd.server import handlers
    from subagentd import cli

    def noisy_ping(call, params):
        print("STRAY")
        sys.__stdout__.write("DUNDER\\n")
        sys.__stdout__.flush()
        os.write(1, b"RAW\\n")
        return h.Empty()

    handlers.METHODS["ping"] = handlers.Handler(noisy_ping, None, h.Empty, writes=False)
    raise SystemExit(cli.main(sys.argv[1:]))
    """
)


def test_stray_prints_and_raw_fd1_writes_never_reach_the_protocol_stream(spawn_process):
    proc = spawn_process(argv=["-c", NOISY_SERVER, "--db", ":memory:", "--log-level", "debug"])
    host = proc.host
    host.initialize()
    assert host.call("ping") == {}
    host.send([request("b1", "ping"), request("b2", "ping")])
    assert host.read_any() == [
        {"jsonrpc": "2.0", "result": {}, "id": "b1"},
        {"jsonrpc": "2.0", "result": {}, "id": "b2"},
    ]
    host.open("r")
    proc.close_stdin()
    assert proc.wait() == 0
    host.close()  # reads everything up to EOF
    assert host.raw, "nothing was read from stdout"
    for line in host.raw:
        message = json.loads(line)
        items = message if isinstance(message, list) else [message]
        for item in items:
            assert item["jsonrpc"] == "2.0"
            if "id" in item:  # a response: exactly one of result and error
                assert len({"result", "error"} & set(item)) == 1, item
            else:  # a notification
                assert isinstance(item["method"], str) and "params" in item, item
    stdout = b"\n".join(host.raw)
    for marker in (b"STRAY", b"RAW", b"DUNDER"):
        assert marker not in stdout
    stderr = proc.stderr_text()
    assert stderr.count("STRAY") == 3 and stderr.count("RAW") == 3 and stderr.count("DUNDER") == 3
    assert "DEBUG" in stderr or "debug" in stderr.lower()


def test_json_logs_go_to_stderr_as_json_lines(spawn_process):
    proc = spawn_process("--log-format", "json", "--log-level", "info")
    proc.host.initialize()
    proc.close_stdin()
    assert proc.wait() == 0
    lines = [ln for ln in proc.stderr_text().splitlines() if ln.strip()]
    assert lines
    entries = [json.loads(ln) for ln in lines]
    assert {"ts", "level", "logger", "message"} <= set(entries[0])
    assert any(e["message"] == "stopped" for e in entries)


# --- framing over real pipes ---------------------------------------------------------------


@pytest.mark.parametrize("framing_args", [(), ("--framing", "lsp")])
def test_lsp_framing_end_to_end(framing_args):
    frames = [
        lsp_frame(request(1, "initialize", INIT)),
        lsp_frame({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        lsp_frame(request(2, "ping")),
        lsp_frame(request("three", "agents/open", {"agent_id": "r"})),
        b"Content-Length: 5\r\n\r\n{bad}",
        lsp_frame([request(4, "ping"), request(5, "agents/get", {"agent_id": "r"})]),
    ]
    done = run_with_stdin(b"".join(frames), "--db", ":memory:", *framing_args)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.startswith(b"Content-Length: ")
    replies = parse_lsp_stream(done.stdout)
    assert [r["id"] if isinstance(r, dict) else [x["id"] for x in r] for r in replies] == [
        1,
        2,
        "three",
        None,
        [4, 5],
    ]
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[1]["result"] == {}
    assert replies[2]["result"]["agent_id"] == "r"
    assert replies[3]["error"]["code"] == Code.PARSE_ERROR
    assert replies[4][1]["result"]["agent_id"] == "r"


def test_lsp_frames_written_byte_by_byte_are_answered():
    proc = subprocess.Popen(
        [PYTHON, "-m", "subagentd", "--db", ":memory:"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,
    )
    try:
        data = lsp_frame(request(1, "ping")) + lsp_frame(request(2, "ping"))
        for i in range(len(data)):
            proc.stdin.write(data[i : i + 1])
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert [r["id"] for r in parse_lsp_stream(stdout)] == [1, 2]


def test_bad_lsp_header_is_a_parse_error_and_the_connection_keeps_working():
    data = b"Content-Length: lots\r\n\r\n" + lsp_frame(request(1, "ping"))
    done = run_with_stdin(data, "--db", ":memory:", "--framing", "lsp")
    assert done.returncode == 0
    replies = parse_lsp_stream(done.stdout)
    assert replies[0] == {
        "jsonrpc": "2.0",
        "error": {
            "code": Code.PARSE_ERROR.value,
            "message": "Parse error: Content-Length is not a number",
        },
        "id": None,
    }
    assert replies[1] == {"jsonrpc": "2.0", "result": {}, "id": 1}


def test_over_long_frame_is_answered_and_the_next_request_works(spawn_process):
    proc = spawn_process("--max-frame-bytes", "1000")
    host = proc.host
    host.send(request(1, "ping", {"padding": "p" * 2000}))
    assert host.read_any() == {
        "jsonrpc": "2.0",
        "error": {
            "code": Code.INVALID_REQUEST.value,
            "message": "frame exceeds the limit of 1000 bytes (--max-frame-bytes); it was discarded",
        },
        "id": None,
    }
    host.send(request(2, "ping", {"padding": "p" * 900}))
    assert host.read_any() == {"jsonrpc": "2.0", "result": {}, "id": 2}


def test_over_long_lsp_frame_is_answered_and_the_next_request_works():
    big = lsp_frame(request(1, "ping", {"padding": "p" * 5000}))
    data = big + lsp_frame(request(2, "ping"))
    done = run_with_stdin(data, "--db", ":memory:", "--max-frame-bytes", "1000")
    assert done.returncode == 0
    replies = parse_lsp_stream(done.stdout)
    assert [r["id"] for r in replies] == [None, 2]
    assert replies[0]["error"]["code"] == Code.INVALID_REQUEST


# --- shutdown ------------------------------------------------------------------------------


def test_eof_on_stdin_exits_zero_promptly(spawn_process):
    proc = spawn_process()
    proc.host.initialize()
    proc.close_stdin()
    assert proc.wait(timeout=TIMEOUT) == 0
    assert "end of input" in proc.stderr_text()


def test_eof_with_a_turn_still_open_stops_it_records_it_and_exits_zero(spawn_process, tmp_path):
    db = str(tmp_path / "eof.db")
    proc = spawn_process("--shutdown-grace", "2", db=db)
    host = proc.host
    host.initialize()
    host.open("r")
    turn_id = host.spawn("r", "c")["turn_id"]
    proc.close_stdin()
    assert proc.wait(timeout=TIMEOUT) == 0
    host.close()
    # what was owed was written before the exit: the stop request, then the disposal
    frames = [json.loads(line) for line in host.raw]
    notes = [(f["method"], f["params"]) for f in frames if "method" in f]
    assert notes[-2:] == [
        ("turn/interrupt", {"agent_id": "c", "turn_id": turn_id, "cause": {"kind": "shutdown"}}),
        ("agent/settled", {"agent_id": "c", "reason": "closed"}),
    ]
    assert "end of input" in proc.stderr_text()

    # and durably: the turn ended (aborted, cause shutdown); the notice to the closing root was
    # recorded in its transcript, not queued as a turn
    after = spawn_process(db=db).host
    after.initialize()
    events = after.call("transcript/read", {"agent_id": "c"})["events"]
    assert [e["type"] for e in events][-4:] == ["turn_start", "interrupt", "turn_end", "settled"]
    assert events[-2]["data"] == {"turn_id": turn_id, "reason": "aborted", "cause": "shutdown"}
    assert events[-1]["data"] == {"reason": "closed"}
    root_events = after.call("transcript/read", {"agent_id": "r"})["events"]
    [notice] = [e for e in root_events if e["type"] == "notice"]
    assert [b["text"] for b in notice["data"]["content"]] == [
        "Background subagent c was stopped before it finished.",
        "It left no closing message.",
    ]
    assert root_events[-1]["type"] == "closed"
    for agent_id in ("r", "c"):
        info = after.call("agents/get", {"agent_id": agent_id})
        assert (info["status"], info["queued"], info["parked"]) == ("ready", 0, 0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_termination_signal_exits_zero(spawn_process, signum):
    proc = spawn_process()
    host = proc.host
    host.initialize()
    host.open("r")
    proc.proc.send_signal(signum)
    assert proc.wait(timeout=TIMEOUT) == 0
    assert f"received {signum.name}" in proc.stderr_text()


def test_host_closing_our_stdout_does_not_crash_the_server():
    proc = subprocess.Popen(
        [PYTHON, "-m", "subagentd", "--db", ":memory:"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    try:
        for i in range(20):
            proc.stdin.write(json.dumps(request(i, "ping")).encode() + b"\n")
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


# --- durability across processes -----------------------------------------------------------


def test_restart_with_the_same_database_sees_the_same_sessions(spawn_process, tmp_path):
    db = str(tmp_path / "sessions.db")
    first = spawn_process(db=db)
    first.host.initialize()
    first.host.open("r", label="the root")
    child = first.host.spawn("r", "c", label="kid")
    first.host.end_turn("c", child["turn_id"], output="done")
    first.host.notification("agent/settled", agent_id="c")
    before = {a: first.host.call("agents/get", {"agent_id": a}) for a in ("r", "c")}
    child_events = first.host.call("transcript/read", {"agent_id": "c"})["events"]
    spawned = first.host.call("messages/get", {"message_id": child["message_id"]})
    first.close_stdin()
    assert first.wait() == 0

    second = spawn_process(db=db)
    second.host.initialize()
    after = {a: second.host.call("agents/get", {"agent_id": a}) for a in ("r", "c")}
    assert after["c"] == before["c"]  # a settled child reads the same in every process
    assert after["c"] == {
        "agent_id": "c",
        "parent_id": "r",
        "kind": "continuable",
        "mode": "continuable",
        "label": "kid",
        "status": "ready",
        "depth": 1,
        "created_at": before["c"]["created_at"],
        "queued": 0,
        "parked": 0,
        "usage": {"turns": 1, "spawns": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0},
        "tree_usage": {"turns": 1, "spawns": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0},
    }
    # the root was live (running the notice turn) in the first process; after a restart: ready
    assert before["r"]["status"] == "running"
    assert after["r"] == {**before["r"], "status": "ready"}
    assert (after["r"]["label"], after["r"]["kind"]) == ("the root", "ordinary")
    # the child's transcript and its spawn message are the same, the closing output included
    assert second.host.call("transcript/read", {"agent_id": "c"})["events"] == child_events
    assert child_events[-2]["data"] == {
        "turn_id": child["turn_id"],
        "reason": "completed",
        "output": "done",
    }
    assert second.host.call("messages/get", {"message_id": child["message_id"]}) == spawned
    assert spawned["state"] == "claimed" and spawned["turn_id"] == child["turn_id"]
    assert (
        second.host.call("list_agents", {"caller": "r"})["text"]
        == "c [ready, last turn completed] — kid"
    )
    with pytest.raises(RpcError) as excinfo:
        second.host.call("agents/get", {"agent_id": "never"})
    assert excinfo.value.code == Code.UNKNOWN_AGENT


def test_acknowledged_open_survives_a_kill(spawn_process, tmp_path):
    db = str(tmp_path / "crash.db")
    first = spawn_process(db=db)
    first.host.initialize()
    first.host.open("acked")
    first.proc.kill()
    first.wait()

    second = spawn_process(db=db)
    second.host.initialize()
    assert second.host.call("agents/get", {"agent_id": "acked"})["agent_id"] == "acked"


def test_fresh_database_has_no_sessions(spawn_process, tmp_path):
    proc = spawn_process(db=str(tmp_path / "fresh.db"))
    proc.host.initialize()
    with pytest.raises(RpcError) as excinfo:
        proc.host.call("agents/get", {"agent_id": "r"})
    assert excinfo.value.code == Code.UNKNOWN_AGENT


# --- stdin as a regular file ---------------------------------------------------------------


def test_stdin_as_a_regular_file_answers_everything_and_exits_zero(tmp_path):
    lines = [
        json.dumps(request(1, "initialize", INIT)),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps(request(2, "agents/open", {"agent_id": "r"})),
        "",
        "{not json",
        json.dumps([request(3, "ping"), request(4, "agents/get", {"agent_id": "r"})]),
        json.dumps(request(5, "ping")),  # no final newline: still a frame at EOF
    ]
    script = tmp_path / "input.jsonl"
    script.write_text("\n".join(lines))
    with open(script, "rb") as stdin:
        done = subprocess.run(
            [PYTHON, "-m", "subagentd", "--db", ":memory:"],
            stdin=stdin,
            capture_output=True,
            timeout=TIMEOUT,
        )
    assert done.returncode == 0, done.stderr.decode()
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    ids = [r["id"] if isinstance(r, dict) else [x["id"] for x in r] for r in replies]
    assert ids == [1, 2, None, [3, 4], 5]
    assert replies[2]["error"]["code"] == Code.PARSE_ERROR
    assert replies[3][1]["result"]["agent_id"] == "r"


def test_empty_stdin_exits_zero_with_no_output():
    done = run_with_stdin(b"", "--db", ":memory:")
    assert done.returncode == 0
    assert done.stdout == b""


# --- command line --------------------------------------------------------------------------


def test_help_describes_the_server():
    done = subprocess.run(
        [PYTHON, "-m", "subagentd", "--help"], capture_output=True, timeout=TIMEOUT, text=True
    )
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: subagentd")
    assert "serve" in done.stdout
    assert "stdin/stdout" in done.stdout


def test_serve_help_lists_the_transport_options():
    done = subprocess.run(
        [PYTHON, "-m", "subagentd", "serve", "--help"],
        capture_output=True,
        timeout=TIMEOUT,
        text=True,
    )
    assert done.returncode == 0
    for option in ("--db", "--framing", "--max-frame-bytes", "--log-level", "--log-format"):
        assert option in done.stdout


def test_version_prints_version_and_protocol():
    done = subprocess.run(
        [PYTHON, "-m", "subagentd", "--version"], capture_output=True, timeout=TIMEOUT, text=True
    )
    assert done.returncode == 0
    assert (
        done.stdout.strip() == f"subagentd {subagentd.__version__} (protocol {subagentd.PROTOCOL})"
    )


def test_bad_option_exits_with_usage_error_on_stderr():
    done = subprocess.run(
        [PYTHON, "-m", "subagentd", "--max-frame-bytes", "0"],
        capture_output=True,
        timeout=TIMEOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--max-frame-bytes" in done.stderr


@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_pending_close_is_answered_before_exit(spawn_process, how):
    proc = spawn_process("--shutdown-grace", "2")
    host = proc.host
    host.initialize()
    host.open("r")
    host.spawn("r", "c")
    close_id = host.start("agents/close", {"agent_id": "r"})
    host.barrier()
    assert close_id not in host.responses
    if how == "eof":
        proc.close_stdin()
    else:
        proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=TIMEOUT) == 0
    host.close()
    replies = [json.loads(line) for line in host.raw]
    assert {"jsonrpc": "2.0", "result": {}, "id": close_id} in replies


def test_replies_flow_and_sigterm_is_handled_while_input_never_runs_dry():
    """A host that streams requests faster than they are served must still get replies as it
    goes, and SIGTERM must take effect, not wait until stdin momentarily runs dry."""
    import queue
    import threading

    proc = subprocess.Popen(
        [PYTHON, "-m", "subagentd", "--db", ":memory:", "--shutdown-grace", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    done_writing = threading.Event()
    lines: queue.Queue[bytes] = queue.Queue()

    def write() -> None:
        """An endless stream of pings: the input never runs dry, whatever the machine's load."""
        try:
            for start in itertools.count(0, 1000):
                proc.stdin.write(
                    b"".join(
                        json.dumps(request(i, "ping")).encode() + b"\n"
                        for i in range(start, start + 1000)
                    )
                )
                proc.stdin.flush()
        except (OSError, ValueError):  # the server exited (broken pipe), or we closed stdin
            pass
        finally:
            done_writing.set()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=write, daemon=True).start()
    threading.Thread(target=read, daemon=True).start()
    try:
        first = lines.get(timeout=TIMEOUT)  # a server waiting for the input to end never replies
        assert json.loads(first)["id"] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == 0
        assert done_writing.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.stdout.close()


def test_handshake_fast_path_hands_everything_else_to_the_server_in_order(spawn_process):
    """initialize is answered before the database is open; the rest of the chunk follows in order."""
    proc = spawn_process()
    frames = [
        request(1, "initialize", {"protocolVersion": "2025-06-18"}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        request(2, "initialize", {}),
        request(3, "agents/open", {"agent_id": "root"}),
        request(4, "ping"),
    ]
    proc.host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
    replies = [proc.host.read_any() for _ in range(4)]
    assert [r["id"] for r in replies] == [1, 2, 3, 4]
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[1]["error"]["code"] == Code.INVALID_REQUEST  # second initialize
    assert replies[2]["result"]["agent_id"] == "root"
    assert replies[3]["result"] == {}


def test_a_database_that_cannot_be_opened_is_a_clear_error_and_a_failing_exit(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    proc = subprocess.run(
        [PYTHON, "-m", "subagentd", "--db", str(missing)],
        input=json.dumps(request(1, "agents/open", {"agent_id": "r"})).encode() + b"\n",
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert b"cannot start" in proc.stderr and str(missing).encode() in proc.stderr
    assert proc.stdout == b""  # nothing was acknowledged
