"""Overload: a host that does not read, and a bound on deferred replies."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from subagentd.schema.codes import Code
from subagentd.server.dispatcher import MAX_PENDING
from tests.spawned import InProcessServer, rss_kib

MIB = 1024 * 1024


class LineReader:
    """Reads the server's stdout only when asked to: the test decides when the host reads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.partial = b""
        self.lines: collections.deque[bytes] = collections.deque()

    def next(self, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while not self.lines:
            assert time.monotonic() < deadline, "no reply within the timeout"
            chunk = os.read(self.fd, 1 << 20)
            assert chunk, "subagentd closed its stdout"
            *complete, self.partial = (self.partial + chunk).split(b"\n")
            self.lines.extend(complete)
        return json.loads(self.lines.popleft())


def _request(request_id: Any, method: str, params: dict[str, Any]) -> bytes:
    return (
        json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        ).encode()
        + b"\n"
    )


def test_a_host_that_never_reads_stdout_pauses_the_server_with_bounded_memory_and_loses_nothing():
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "subagentd", "--db", ":memory:"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin.fileno(), proc.stdout.fileno()
    replies = LineReader(stdout)
    try:
        os.write(stdin, _request("init", "initialize", {"protocolVersion": "2025-06-18"}))
        assert replies.next()["id"] == "init"
        label = "a long label so that every reply is big " * 15
        os.write(stdin, _request("open", "agents/open", {"agent_id": "root", "label": label}))
        assert replies.next()["result"]["agent_id"] == "root"
        baseline = rss_kib(proc.pid)

        # ~30 MB of replies, far beyond the pipe buffer plus the 8 MiB outbox plus one write in
        # flight. server/discover is cheap and answers ~600 bytes; every 50th request reads the
        # database (agents/get).
        count, per_chunk = 50_000, 1_000

        def request(i: int) -> bytes:
            if i % 50 == 0:
                return _request(i, "agents/get", {"agent_id": "root"})
            return _request(i, "server/discover", {})

        chunks = [
            b"".join(request(i) for i in range(start, start + per_chunk))
            for start in range(1, count + 1, per_chunk)
        ]
        progress = {"chunks": 0, "at": time.monotonic(), "error": None}

        def write_all() -> None:
            try:
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(stdin, view) :]
                    progress["chunks"] += 1
                    progress["at"] = time.monotonic()
            except OSError as exc:
                progress["error"] = exc

        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()

        # The writer must block: the server stops reading once its outbox is full. A pause is
        # two seconds without a written chunk after the server took some (the writer still alive,
        # most of the input left); on a loaded machine it may come late: the bound is a deadline.
        peak = baseline
        deadline = time.monotonic() + 60
        while not progress["chunks"] or time.monotonic() - progress["at"] <= 2.0:
            peak = max(peak, rss_kib(proc.pid))
            assert writer.is_alive(), "the server read every request although nobody read a reply"
            assert time.monotonic() < deadline, "the writer never stalled"
            time.sleep(0.05)
        stalled_at = progress["chunks"]
        peak = max(peak, rss_kib(proc.pid))
        assert writer.is_alive()
        assert stalled_at < len(chunks)
        assert proc.poll() is None
        assert peak < 150 * 1024, f"RSS {peak} KiB while the host did not read (was {baseline})"

        # Now the host reads: every request gets its reply, in order, and nothing else is lost.
        for expected in range(1, count + 1):
            reply = replies.next(timeout=30)
            assert reply["id"] == expected, reply
            if expected % 50 == 0:
                assert reply["result"]["label"] == label
            else:
                assert reply["result"]["serverInfo"]["name"] == "subagentd"
        writer.join(30)
        assert not writer.is_alive() and progress["error"] is None
        os.write(stdin, _request("last", "ping", {}))
        assert replies.next() == {"jsonrpc": "2.0", "result": {}, "id": "last"}
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        stderr.close()


# --- a bound on deferred replies ------------------------------------------------------------------

OVER = 16


def _read_until(host, done, timeout: float) -> None:
    """Read frames (batches, responses, notifications) until done() or the timeout."""
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            host.read_any(timeout=left)
        except TimeoutError:
            return


def test_deferred_replies_past_the_bound_are_refused_with_overloaded_and_change_nothing():
    server = InProcessServer(interrupt_grace=600.0)
    host = server.host
    try:
        host.initialize()
        roots = [f"root-{i}" for i in range(MAX_PENDING + OVER)]
        children = {root: f"child-of-{root}" for root in roots}
        batch = [
            {
                "jsonrpc": "2.0",
                "id": f"open-{r}",
                "method": "agents/open",
                "params": {"agent_id": r},
            }
            for r in roots
        ]
        host.send(batch)
        spawns = [
            {
                "jsonrpc": "2.0",
                "id": f"spawn-{r}",
                "method": "agents/spawn",
                "params": {"caller": r, "child_id": children[r], "label": "slow", "prompt": "go"},
            }
            for r in roots
        ]
        host.send(spawns)
        turns: dict[str, str] = {}
        batches: list[list[Any]] = []

        def collect() -> bool:
            for note in list(host.notifications):
                if note["method"] == "turn/start":
                    turns[note["params"]["agent_id"]] = note["params"]["turn_id"]
            host.notifications.clear()
            return len(turns) == len(roots)

        while len(batches) < 2 or not collect():
            frame = host.read_any(timeout=30)
            if isinstance(frame, list):
                assert all("result" in r for r in frame), [r for r in frame if "error" in r][:3]
                batches.append(frame)

        # Every child is mid-turn and never ends it: each close stays pending.
        closes = b"".join(_request(f"close-{r}", "agents/close", {"agent_id": r}) for r in roots)
        host.send_bytes(closes)
        refused_ids = {f"close-{r}" for r in roots[MAX_PENDING:]}
        _read_until(host, lambda: refused_ids <= set(host.responses), timeout=60)
        host.barrier()  # anything else answered for the closes would have been read by now
        answered = dict(host.responses)
        assert set(answered) == refused_ids  # the admitted closes are still waiting for drains
        for request_id in refused_ids:
            error = answered[request_id]["error"]
            assert error["code"] == Code.OVERLOADED and error["data"]["reason"] == "OVERLOADED"

        # A refused close changed nothing: its root still admits work and its child still runs.
        refused_root = roots[-1]
        assert host.call("agents/get", {"agent_id": children[refused_root]})["status"] == "running"
        host.call("agents/followup", {"agent_id": refused_root, "message": "still open"})

        # The admitted closes complete once their children end their turns.
        host.responses.clear()
        for root in roots[:MAX_PENDING]:
            child = children[root]
            host.send_bytes(
                _request(
                    f"end-{child}",
                    "turns/end",
                    {"agent_id": child, "turn_id": turns[child], "reason": "aborted"},
                )
            )
        admitted = {f"close-{r}" for r in roots[:MAX_PENDING]}
        _read_until(host, lambda: admitted <= set(host.responses), timeout=60)
        for request_id in admitted:
            assert host.responses[request_id]["result"] == {}
    finally:
        server.stop()
