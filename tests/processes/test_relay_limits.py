"""The relay socket of `serve --runner` bounds what a client costs it before proving who it is:
at most 64 KiB of a request is read before a live activation's token is seen in it, and at most
64 connections are served at once (more are closed unanswered); it keeps serving meanwhile."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import subagentd.runners.tool_socket as relaying
from tests.processes.test_runner import RunnerServer, relay

MAX_CONNECTIONS = getattr(relaying, "MAX_CONNECTIONS", 64)  # the documented bounds
UNPROVEN_BYTES = getattr(relaying, "UNPROVEN_BYTES", 64 * 1024)
assert (MAX_CONNECTIONS, UNPROVEN_BYTES) == (64, 64 * 1024)


def test_a_request_without_a_token_is_not_read_past_its_first_64_kib():
    srv = RunnerServer()
    try:
        assert srv.running is not None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(srv.running.path)
            start = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents",'
            conn.sendall(start + b'"arguments":{"x":"' + b"a" * (UNPROVEN_BYTES + 10))
            reply = conn.recv(65536)  # answered now, without the rest (no newline was sent)
        assert json.loads(reply)["error"]["code"] == -32600
        srv.spawn("c1", "still serving")
        assert srv.ended("c1")["turn_end"]["output"] == "done: still serving"
    finally:
        srv.stop()


def test_connections_past_the_limit_are_closed_at_once_and_the_relay_serves_on():
    srv = RunnerServer()
    held: list[socket.socket] = []
    try:
        assert srv.running is not None
        path = srv.running.path
        for _ in range(MAX_CONNECTIONS):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(path)
            held.append(conn)
        time.sleep(0.3)  # the server took them all
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as extra:
            extra.settimeout(5.0)
            extra.connect(path)
            assert extra.recv(1) == b""  # closed unanswered
        for conn in held:
            conn.close()
        held.clear()
        time.sleep(0.3)
        tokenless = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "x"}}
        assert relay(path, json.dumps(tokenless).encode() + b"\n")["id"] == 9
    finally:
        for conn in held:
            conn.close()
        srv.stop()


def test_a_long_temp_directory_puts_the_socket_elsewhere_and_serve_runner_keeps_serving(
    tmp_path,
):
    long = tmp_path / ("d" * 60) / ("e" * 60)
    long.mkdir(parents=True)
    script = tmp_path / "turn.py"
    script.write_text("import sys; sys.stdin.read(); print('ran')\\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "subagentd", "--db", ":memory:", "--caller", "root", "--runner",
         f"{sys.executable} {script}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**__import__("os").environ, "TMPDIR": str(long)},
    )  # fmt: skip
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}},
    ]  # fmt: skip
    out, err = proc.communicate(b"".join(json.dumps(f).encode() + b"\n" for f in frames), 60)
    replies = [json.loads(line) for line in out.splitlines()]
    assert [r.get("id") for r in replies] == [1, 2] and replies[1]["result"] == {}
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err
