"""A `--caller` (MCP) connection carries MCP traffic only, writes nothing after its input ends,
and loses nothing held for its client: stop notices at session end, quiet reports and a
one-shot child's output are queued for the root and returned by the next wait_agents
(PROTOCOL.md section 5). Real processes over real pipes."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
INIT = {"protocolVersion": "2025-06-18", "clientInfo": {"name": "t", "version": "0"}}


def frames(*messages: dict) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


def request(request_id: int, method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def tool(request_id: int, name: str, **arguments: object) -> dict:
    return request(request_id, "tools/call", {"name": name, "arguments": arguments})


def serve_piped(db: str, *messages: dict, runner: str = "sleep 5", extra=()) -> list[dict]:
    """Pipe the frames into `subagentd --caller root --runner ...`, stdin closed after them;
    every frame it wrote, in order."""
    argv = [sys.executable, "-m", "subagentd", "--db", db, "--caller", "root", "--runner", runner]
    done = subprocess.run([*argv, *extra], input=frames(*messages), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_piped_session_gets_its_replies_and_no_host_notification(tmp_path):
    written = serve_piped(
        ":memory:",
        request(1, "initialize", {**INIT, "capabilities": {}}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        tool(2, "spawn_agent", label="w", prompt="work", child_id="c1"),
    )
    assert [m.get("id") for m in written] == [1, 2]  # replies only: no agent/settled after
    assert written[1]["result"]["content"] == [{"type": "text", "text": "started subagent c1"}]


class Piped:
    """`subagentd --caller root --runner RUNNER` with raw pipes: every line it writes is kept."""

    def __init__(self, db: str, *extra: str) -> None:
        argv = [sys.executable, "-m", "subagentd", "--db", db, "--caller", "root"]
        self.proc = subprocess.Popen(
            [*argv, "--runner", RUNNER, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.ids = iter(range(1, 10**6))
        self.seen: list[dict] = []

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def start(self, name: str, **arguments: object) -> int:
        request_id = next(self.ids)
        self.send(tool(request_id, name, **arguments))
        return request_id

    def reply(self, request_id: int) -> dict:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, "subagentd closed its stdout before the reply"
            self.seen.append(json.loads(line))
            if self.seen[-1].get("id") == request_id:
                return self.seen[-1]["result"]

    def call(self, name: str, **arguments: object) -> dict:
        return self.reply(self.start(name, **arguments))

    def end(self) -> list[dict]:
        """Close stdin; what it wrote after that, until it exited."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = [json.loads(line) for line in self.proc.stdout.read().splitlines()]
        self.proc.stdout.close()
        assert self.proc.wait(timeout=60) == 0
        return rest


def initialized(db: str, *extra: str, capabilities: dict | None = None) -> Piped:
    piped = Piped(db, *extra)
    piped.send(request(0, "initialize", {**INIT, "capabilities": capabilities or {}}))
    piped.reply(0)
    piped.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return piped


def wait_for_line(path: Path, line: str) -> None:
    deadline = time.monotonic() + 60
    while not (path.exists() and line in path.read_text().splitlines()):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def block(result: dict) -> str:
    """The one content block's text (a client that shows only the first loses nothing)."""
    (only,) = result["content"]
    return only["text"]


STOPPED = "Background subagent c2 was stopped before it finished."
# shutdown ends open turns at once: the runner's output is there only if its process was quicker
CLOSING = (["It left no closing message."], ["Its closing message:", "waiting\nterminated"])


def test_a_wait_pending_at_end_of_input_ends_unanswered_and_the_stop_notice_waits(tmp_path):
    db, log = str(tmp_path / "held.db"), tmp_path / "log"
    first = initialized(db)
    watch = json.dumps({"steps": [{"wait_term": True, "log": str(log)}]})
    first.call("spawn_agent", label="watcher", prompt=watch, child_id="c2")
    wait_for_line(log, "waiting")
    first.start("wait_agents", timeout_ms=50_000)  # pending when the input ends
    assert first.end() == []  # no reply to it, no notification: nothing after end of input

    second = initialized(db)
    result = second.call("wait_agents", timeout_ms=0)
    status = "none of the subagents waited for is still working"
    assert block(result) in ["\n".join([STOPPED, *closing, status]) for closing in CLOSING]
    (c2,) = result["structuredContent"]["agents"]
    assert (c2["agent_id"], c2["reason"]) == ("c2", "aborted")
    assert second.end() == []


def test_host_notifications_are_sent_when_the_client_asks_for_them(tmp_path):
    caps = {"experimental": {"subagentd": {"hostNotifications": True}}}
    piped = initialized(":memory:", capabilities=caps)
    piped.call("spawn_agent", label="w", prompt="work", child_id="c1")
    piped.call("wait_agents", timeout_ms=50_000)  # c1 ran `done: work` and settled
    piped.call("list_agents")  # answered after the notifications of that change
    methods = [m["method"] for m in piped.seen if "method" in m]
    assert methods == ["agent/settled"]
    assert piped.end() == []  # still nothing after end of input


def test_quiet_reports_are_queued_for_the_client_and_returned_by_wait_agents(tmp_path):
    piped = initialized(str(tmp_path / "quiet.db"), "--report-delivery", "quiet")
    steps = {"steps": [{"tool": "report", "args": {"output": "found it"}}, {"print": "bye"}]}
    piped.call("spawn_agent", label="w", prompt=json.dumps(steps), child_id="c1")
    result = piped.call("wait_agents", mode="all", timeout_ms=50_000)
    assert re.fullmatch(
        "\n".join(
            [
                "Background subagent c1 reported:",
                "found it",
                "Background subagent c1 finished and will do no further work unless you send"
                " it more.",
                "Its closing message:",
                r"report -> 0: report accepted by the agent that started you as message \S+",
                "bye",
                "none of the subagents waited for is still working",
            ]
        ),
        block(result),
    )
    (c1,) = result["structuredContent"]["agents"]
    assert c1["reports"] == ["found it"]
    assert piped.end() == []


def test_a_one_shot_childs_output_is_queued_for_the_client(tmp_path):
    piped = initialized(str(tmp_path / "one-shot.db"))
    piped.call("spawn_agent", label="o", prompt="count", mode="one-shot", child_id="o1")
    result = piped.call("wait_agents", timeout_ms=50_000)
    assert block(result) == "\n".join(
        [
            "Background one-shot subagent o1 finished; it takes no further messages.",
            "Its closing message:",
            "done: count",
            "none of the subagents waited for is still working",
        ]
    )
    (o1,) = result["structuredContent"]["agents"]
    assert (o1["agent_id"], o1["status"], o1["reason"], o1["output"]) == (
        "o1",
        "ready",
        "completed",
        "done: count",
    )
    assert piped.end() == []


def test_a_second_process_for_the_same_caller_refuses_to_start_naming_the_first(tmp_path):
    db = str(tmp_path / "shared.db")
    first = initialized(db)
    first.call("list_agents")  # loaded: it holds root live
    argv = [sys.executable, "-m", "subagentd", "--db", db, "--caller", "root"]
    init = frames(request(1, "initialize", {**INIT, "capabilities": {}}))
    second = subprocess.run(argv, input=init, capture_output=True, timeout=60)
    assert second.returncode == 1
    assert second.stdout == b""  # refused before initialize is answered: no handshake succeeds
    said = second.stderr.decode()
    assert "Traceback" not in said
    [line] = [line for line in said.splitlines() if "cannot start" in line]
    host = socket.gethostname()
    assert line.endswith(
        f"cannot start: --caller root is already served by another subagentd process (pid"
        f" {first.proc.pid} on {host}) sharing this database; one root is served by one"
        " process: stop that one, or give this one another --caller"
    ), line
    from subagentd.client import CannotStart, Client

    try:  # what the Python client raises: the same line
        with Client.spawn(db=db, caller="root") as client:
            client.initialize()
    except CannotStart as refused:
        assert str(refused) == line[line.index("cannot start: ") :]
    else:
        raise AssertionError("the second --caller root answered initialize")
    other = subprocess.run([*argv[:-1], "other"], input=init, capture_output=True, timeout=60)
    assert other.returncode == 0  # another root on the same database is served
    assert json.loads(other.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "subagentd"
    assert first.end() == []
