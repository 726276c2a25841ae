"""The `--detach on` relay is a transparent pipe: through real front processes, each client gets
the answers its own direct connection gives (bursts, batches, parse errors, odd ids, progress
tokens, a refused first handshake, a client that never initializes), and a client that stops
reading slows no other (it is disconnected, with a log line). A seeded generator drives several
clients at once and compares every answer with a direct connection's."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes.test_detached import Detached, texts, wait_for_file

ROOT = Path(__file__).resolve().parents[2]
PATIENCE = 60.0
INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "0"},
}


class Client:
    """A client's pipes to a server process (a front, or a direct `serve`), read on a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], reads: bool = True) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        self.lines: queue.Queue[Any] = queue.Queue()
        self.notes: list[dict[str, Any]] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._drain_stderr, daemon=True),
        ]
        if not reads:  # a client that never reads its stdout
            del self.readers[0]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.write(json.dumps(message).encode() + b"\n")

    def answer(self) -> Any:
        """The next answer (a notification is kept in notes); fails past PATIENCE."""
        while True:
            try:
                message = self.lines.get(timeout=PATIENCE)
            except queue.Empty:
                raise AssertionError("no answer within the patience: the relay is stuck") from None
            assert message is not None, "the server closed its stdout"
            if isinstance(message, dict) and "method" in message:
                self.notes.append(message)
                continue
            return message

    def call(self, request_id: Any, method: str, params: Any = None) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        while True:
            reply = self.answer()
            if isinstance(reply, dict) and reply.get("id") == request_id:
                return reply

    def initialize(self) -> None:
        assert "result" in self.call("init", "initialize", INIT)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def relay(tmp_path):
    """Front processes of one background process (SQLite) and direct servers to compare with."""
    runtime = tempfile.mkdtemp(prefix="sd-", dir="/tmp")
    made: list[Client] = []
    d = Detached(str(tmp_path / "d.db"), runtime, "--max-frame-bytes", "4096")

    class Made:
        detached = d

        def front(self, reads: bool = True) -> Client:
            client = Client(d.argv, d.env, reads)
            made.append(client)
            return client

        def direct(self, n: int) -> Client:
            argv = [a for a in d.argv if a not in ("--detach", "on")]
            argv[argv.index("--db") + 1] = str(tmp_path / f"direct-{n}.db")
            client = Client(argv, d.env)
            made.append(client)
            return client

    yield Made()
    for client in made:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()
        for reader in client.readers:
            reader.join(PATIENCE)
        for pipe in (client.proc.stdin, client.proc.stdout, client.proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
    d.stop()
    shutil.rmtree(runtime, ignore_errors=True)


def test_a_pipelined_burst_of_2000_requests_is_answered_in_full(relay):
    client = relay.front()
    client.initialize()
    burst = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/list"}).encode() + b"\n"
        for n in range(2000)
    )
    writer = threading.Thread(target=client.write, args=(burst,), daemon=True)
    writer.start()  # as a client writes: while it reads
    answered = [client.answer() for _ in range(2000)]
    assert sorted(a["id"] for a in answered) == list(range(2000))
    assert all(len(a["result"]["tools"]) > 0 for a in answered)
    writer.join(PATIENCE)
    second = relay.front()  # and the root is answered again
    second.initialize()
    assert second.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_a_client_that_stops_reading_slows_no_other_and_is_disconnected(relay):
    stalled = relay.front(reads=False)
    stalled.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT})
    other = relay.front()
    other.initialize()

    def flood() -> None:
        line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode() + b"\n"
        try:
            while True:
                stalled.write(line * 100)
        except (BrokenPipeError, ValueError, OSError):
            pass

    threading.Thread(target=flood, daemon=True).start()
    for n in range(200):  # answered meanwhile, each one
        assert other.call(n, "tools/list")["result"]["tools"]
    log = relay.detached.log
    deadline = time.monotonic() + PATIENCE
    while "stopped reading" not in log():
        assert time.monotonic() < deadline, log()
        assert other.call("still", "ping")["result"] == {}
        time.sleep(0.2)
    assert re.search(r"detached: client \d+ stopped reading \(\d+ bytes unread", log())
    assert "bytes unread" in log() and "): disconnected" in log()
    assert other.call("after", "ping")["result"] == {}


def test_a_refused_first_initialize_leaves_the_next_clients_initialize_answered(relay):
    first = relay.front()
    refused = first.call(1, "initialize", {"protocolVersion": 7})
    assert refused["error"]["code"] == -32602, refused
    second = relay.front()
    reply = second.call(1, "initialize", INIT)
    assert reply["result"]["serverInfo"]["name"] == "subagentd", reply
    assert second.call(2, "ping")["result"] == {}


def test_progress_goes_only_to_the_client_whose_token_it_is(relay, tmp_path):
    one, two = relay.front(), relay.front()
    one.initialize()
    two.initialize()
    tool = {"name": "list_agents", "arguments": {}, "_meta": {"progressToken": 7}}
    assert "result" in one.call(1, "tools/call", tool)
    go = tmp_path / "go"
    spawn = {"name": "spawn_agent", "arguments": {"label": "a", "prompt": wait_for_file(go)}}
    assert "result" in two.call(1, "tools/call", spawn)
    wait = {"name": "wait_agents", "arguments": {"timeout_ms": 6000}, "_meta": {"progressToken": 7}}
    waited = two.call(2, "tools/call", wait)  # progress every 5 s: one, to this client
    assert "still working" in " ".join(texts(waited["result"])), waited
    progress = [n["params"]["progressToken"] for n in two.notes if "progress" in n["method"]]
    assert progress and set(progress) == {7}, two.notes
    assert one.call(2, "ping")["result"] == {}  # anything meant for it came before this
    assert [n for n in one.notes if "progress" in n["method"]] == []
    go.touch()


def test_a_batched_wait_agents_brings_the_settlement_it_consumed(relay):
    client = relay.front()
    client.initialize()
    spawn = {"name": "spawn_agent", "arguments": {"label": "x", "prompt": "look", "child_id": "x"}}
    assert "result" in client.call(1, "tools/call", spawn)
    wait = {"name": "wait_agents", "arguments": {"timeout_ms": 50000}}
    client.send(
        [
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": wait},
            {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/progress"},
        ]
    )
    batch = client.answer()
    assert isinstance(batch, list), batch
    assert [m["id"] for m in batch] == [2, None]
    assert texts(batch[0]["result"])[:3] == [
        "Background subagent x finished and will do no further work unless you send it more.",
        "Its closing message:",
        "done: look",
    ]
    assert batch[1]["error"] == {
        "code": -32600,
        "message": "Invalid Request: id must be a string, a number or null",
    }


# --- the randomized comparison ----------------------------------------------------------


def _frames(rng: random.Random, initializes: bool) -> list[bytes]:
    """One client's frames: a handshake (or none), then a random mix of what clients send."""
    ids: list[Any] = [1, 2, 0, -5, 2**70, "a", "a:b", "", "1:2", None, "ü"]
    bad_ids: list[Any] = [{"x": 1}, [1], 1.5, True]
    out: list[Any] = []
    if initializes:
        out.append({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT})
        out.append({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def request() -> Any:
        kind = rng.randrange(12)
        rid = rng.choice(ids)
        meta = {"_meta": {"progressToken": rng.choice([7, "t", "7:8"])}}
        if kind == 0:
            return {"jsonrpc": "2.0", "id": rid, "method": "ping"}
        if kind == 1:
            return {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": meta}
        if kind == 2:
            params = {"name": "list_agents", "arguments": {}, **meta}
            return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        if kind == 3:
            return {"jsonrpc": "2.0", "id": rng.choice(bad_ids), "method": "ping"}
        if kind == 4:
            return {"jsonrpc": "1.0", "id": rid, "method": "ping"}
        if kind == 5:
            return {"jsonrpc": "2.0", "method": 5}  # a notification with a broken envelope
        if kind == 6:
            return {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": rid},
            }
        if kind == 7:
            return {"jsonrpc": "2.0", "id": rid, "method": "no/such"}
        if kind == 8:
            return rng.choice([3, "text", None, []])
        if kind == 9:
            return {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": 3}
        if kind == 10:
            return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": INIT}
        return {"jsonrpc": "2.0", "method": "notifications/initialized"}

    for _ in range(rng.randrange(40, 80)):
        roll = rng.random()
        if roll < 0.15:
            out.append([request() for _ in range(rng.randrange(1, 5))])
        else:
            out.append(request())
    frames = [json.dumps(m).encode() for m in out]
    for _ in range(rng.randrange(1, 4)):  # parse errors and an oversized frame, anywhere
        spot = rng.randrange(2 if initializes else 0, len(frames) + 1)
        frames.insert(spot, rng.choice([b"{not json", b'{"a":', b"[1,", b"x" * 5000]))
    return frames


def _difference(expected: list[Any], got: list[Any]) -> tuple[list[str], list[str]]:
    """The answers a direct connection gave that the relay did not, and those it gave more."""
    left = sorted(json.dumps(a, sort_keys=True) for a in expected)
    right = sorted(json.dumps(a, sort_keys=True) for a in got)
    missing = [a for a in left if a not in right or left.count(a) > right.count(a)]
    extra = [a for a in right if a not in left or right.count(a) > left.count(a)]
    return sorted(set(missing)), sorted(set(extra))


def test_random_traffic_of_several_clients_gets_the_answers_direct_connections_give(relay):
    seed = int(os.environ.get("RELAY_SEED", "0")) or random.randrange(1, 2**32)
    rng = random.Random(seed)
    scripts = [_frames(rng, initializes=n != 3) for n in range(4)]  # the last never initializes
    expected: list[list[Any]] = []
    for n, frames in enumerate(scripts):  # each one alone on a direct connection
        direct = relay.direct(n)
        direct.write(b"".join(f + b"\n" for f in frames))
        direct.proc.stdin.close()
        answers = []
        while (message := direct.lines.get(timeout=PATIENCE)) is not None:
            if not (isinstance(message, dict) and "method" in message):
                answers.append(message)
        direct.proc.wait(timeout=PATIENCE)
        expected.append(answers)
    first = relay.front()  # the background process runs, initialized by a client of its own
    first.initialize()
    fronts = [relay.front() for _ in scripts]
    got: list[list[Any]] = [[] for _ in scripts]

    def drive(n: int) -> None:
        front = fronts[n]
        front.write(b"".join(f + b"\n" for f in scripts[n]))
        got[n] = [front.answer() for _ in expected[n]]
        front.send({"jsonrpc": "2.0", "id": "sentinel", "method": "ping"})
        while (reply := front.answer()) != {"jsonrpc": "2.0", "id": "sentinel", "result": {}}:
            got[n].append(reply)  # one more than a direct connection gives

    threads = [threading.Thread(target=drive, args=(n,)) for n in range(len(scripts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE * 2)
    for n in range(len(scripts)):
        missing, extra = _difference(expected[n], got[n])
        assert (missing, extra) == ([], []), f"client {n}, RELAY_SEED={seed}: " + "\n".join(
            ["missing:", *missing, "extra:", *extra]
        )
