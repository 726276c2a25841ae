"""`subagentd demo`: a scripted host drives a real subagentd subprocess and narrates what happens.

The demo is a host like any other: it speaks JSON-RPC over the subprocess's stdin/stdout and never
imports core or storage. A deterministic stand-in plays every agent's model (no network).
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any

WAIT = 10.0  # seconds: every wait on the server is bounded by this


class DemoError(Exception):
    """The server did not do what the script expected (or did not answer in time)."""


class Server:
    """One `python -m subagentd` subprocess and a minimal JSON-RPC client over its pipes."""

    def __init__(self, db: str) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "subagentd", "--db", db, "--log-level", "warning"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        self.frames: queue.Queue[bytes | None] = queue.Queue()
        self.responses: dict[int, dict[str, Any]] = {}
        self.notes: deque[dict[str, Any]] = deque()
        self.ids = itertools.count(1)
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(line)
        self.frames.put(None)

    def _died(self, what: str) -> DemoError:
        code = self.proc.poll()
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace").strip()[-2000:]
        state = f"exited with code {code}" if code is not None else "is still running"
        return DemoError(f"subagentd {what} (it {state}){': ' + tail if tail else ''}")

    def _read(self, waiting_for: str, deadline: float) -> None:
        """Take the next frame; the whole wait for one thing ends at `deadline`."""
        try:
            line = self.frames.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise self._died(
                f"sent nothing within {WAIT:.0f}s while the demo waited for {waiting_for}"
            ) from None
        if line is None:
            raise self._died(f"closed its stdout while the demo waited for {waiting_for}")
        try:
            message = json.loads(line)
        except ValueError:
            raise self._died(f"wrote a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise self._died(f"sent a frame that is not an object: {line[:200]!r}")
        if "id" in message and "method" not in message:
            self.responses[message["id"]] = message
        elif "method" in message:
            self.notes.append(message)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died(f"stopped reading (sending {message.get('method')})") from None

    def start(self, method: str, params: dict[str, Any] | None = None) -> int:
        request_id = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        return request_id

    def result(self, request_id: int, method: str) -> Any:
        deadline = time.monotonic() + WAIT
        while request_id not in self.responses:
            self._read(f"the answer to {method}", deadline)
        response = self.responses.pop(request_id)
        if "error" in response:
            error = response["error"]
            raise self._died(
                f"answered {method} with error {error.get('code')} {error.get('message')}"
            )
        return response["result"]

    def call(self, method: str, **params: Any) -> Any:
        return self.result(self.start(method, params), method)

    def note(self, method: str, agent_id: str) -> dict[str, Any]:
        """The first queued notification `method` for `agent_id`; waits (bounded) for it."""
        deadline = time.monotonic() + WAIT
        while True:
            for note in self.notes:
                if note["method"] == method and note["params"].get("agent_id") == agent_id:
                    self.notes.remove(note)
                    return note["params"]
            self._read(f"{method} for {agent_id}", deadline)

    def stop(self) -> int:
        """EOF on stdin: subagentd commits, closes the database and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise self._died(f"did not exit within {WAIT:.0f}s after EOF") from None
        self.reader.join(WAIT)
        self.stderr.close()
        return code


def short(text: str, width: int = 60) -> str:
    text = " | ".join(line for line in text.splitlines() if line)
    return text if len(text) <= width else text[: width - 1] + "…"


class Demo:
    """The scripted host and its stand-in model; every step narrates one line or two."""

    LABELS = {"root": "coordinator"}

    def __init__(self, db: str) -> None:
        self.db = db
        self.turns: dict[str, str] = {}
        self.counts = {"turns": 0, "notices": 0, "reports": 0}
        self.servers: list[Server] = []

    @property
    def srv(self) -> Server:
        return self.servers[-1]

    def boot(self) -> Server:
        srv = Server(self.db)
        self.servers.append(srv)
        info = srv.call(
            "initialize",
            protocolVersion="2025-06-18",
            clientInfo={"name": "subagentd-demo", "version": "1"},
        )
        srv.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        version = info["serverInfo"]["version"]
        print(f"▸ host starts subagentd {version} (pid {srv.proc.pid}) on {self.db}")
        return srv

    def name(self, agent_id: str) -> str:
        return self.LABELS.get(agent_id, agent_id)

    def turn(self, agent_id: str, note: str = "") -> dict[str, Any]:
        """Wait for the agent's next turn/start and show its input (one line per text block)."""
        start = self.srv.note("turn/start", agent_id)
        self.turns[agent_id] = start["turn_id"]
        self.counts["turns"] += 1
        blocks = [b["text"] for m in start["messages"] for b in m["content"]] or [""]
        print(f'  {self.name(agent_id)}: turn started with "{short(blocks[0], 90)}"{note}')
        for block in blocks[1:]:
            print(f'      + "{short(block, 80)}"')
        return start

    def end(self, agent_id: str, reason: str = "completed", output: str | None = None) -> None:
        params: dict[str, Any] = {"agent_id": agent_id, "turn_id": self.turns.pop(agent_id)}
        params["reason"] = reason
        if output is not None:
            params["output"] = output
        self.srv.call("turns/end", **params)

    def spawn(self, caller: str, child: str, label: str, prompt: str) -> None:
        result = self.srv.call(
            "agents/spawn", caller=caller, child_id=child, label=label, prompt=prompt
        )
        self.LABELS[child] = label
        print(f'▸ {self.name(caller)} spawns "{label}" ({child}) → {result["text"]}')
        self.turn(child)

    def send(self, caller: str, child: str, message: str) -> str:
        result = self.srv.call("send_message", caller=caller, subagent_id=child, message=message)
        state = self.srv.call("messages/get", message_id=result["message_id"])["state"]
        if state == "claimed":
            state = "claimed: its turn started at once"
        print(f'▸ {self.name(caller)} → {self.name(child)}: "{message}" ({state})')
        return result["text"]

    def settled(self, agent_id: str) -> None:
        settled = self.srv.note("agent/settled", agent_id)
        print(f"  agent/settled {agent_id} ({settled['reason']}): it is ready, only in storage now")

    def root_notice(self) -> None:
        """The coordinator's model reads a settlement notice and ends its turn."""
        start = self.srv.note("turn/start", "root")
        self.counts["turns"] += 1
        self.counts["notices"] += 1
        message = start["messages"][0]
        first = short(message["content"][0]["text"], 90)
        print(f'  coordinator wakes: {message["source"]["kind"]}: "{first}"')
        self.srv.call("turns/end", agent_id="root", turn_id=start["turn_id"], reason="completed")

    def run(self) -> None:
        srv = self.boot()
        srv.call("agents/open", agent_id="root", label="coordinator")
        print('▸ host opens the root session "coordinator" (root)')
        self.spawn("root", "c1", "researcher", "Find the three oldest open bugs.")
        self.spawn("root", "c2", "writer", "Draft the release notes.")
        self.spawn("c1", "g1", "bug-finder", "Scan the tracker for bugs older than 2020.")

        print("— a follow-up waits behind a running turn")
        print(f'  send_message: "{self.send("root", "c1", "Also check the closed ones.")}"')

        print("— an interrupt parks the queue; the next send_message unparks it")
        self.send("root", "c2", "Use the changelog.")
        self.send("root", "c2", "Keep it short.")
        stop = srv.call("interrupt_agent", caller="root", agent_id="c2")
        interrupt = srv.note("turn/interrupt", "c2")
        print(f"▸ coordinator interrupts writer: {stop['text']} (was {stop['previous_status']})")
        cause = interrupt["cause"]
        print(
            f"  host gets turn/interrupt (cause {cause['kind']} by {cause['by']}), ends it aborted"
        )
        self.end("c2", "aborted")
        got = srv.call("agents/get", agent_id="c2")
        if got["parked"] != 2:
            raise DemoError(f"expected 2 parked messages for c2, agents/get said {got}")
        print(
            f"  agents/get c2 → status {got['status']}, queued {got['queued']}, parked {got['parked']}"
        )
        self.send("root", "c2", "Ship it today.")
        for i, output in enumerate(["changelog read", "kept short", "Release notes: 3 fixes."]):
            self.turn("c2", "  (parked, in order)" if i < 2 else "  (then the new one)")
            self.end("c2", output=output)
        self.settled("c2")
        self.root_notice()

        print("— a report reaches the parent as its next turn")
        result = srv.call("report", caller="g1", output="Oldest open bug: #12 (2019).")
        self.counts["reports"] += 1
        print(
            f'▸ bug-finder calls report("Oldest open bug: #12 (2019).") → accepted as message {result["message_id"][:8]}…'
        )
        self.end("c1", output="waiting for bug-finder")
        print("  researcher ends its first turn; its inbox runs in order:")
        self.turn("c1", "  (the queued follow-up)")
        self.end("c1", output="closed ones checked")
        self.turn("c1")

        print("— list_agents(scope=descendants), as the coordinator's model sees it:")
        listing = srv.call("list_agents", caller="root", scope="descendants")
        for line in listing["text"].splitlines():
            print(f"    {line}")

        print("— settle notices")
        self.end("g1", output="Done: #12, #31, #40.")
        self.settled("g1")
        self.end("c1", output="bug-finder is on it")
        self.turn("c1")
        self.counts["notices"] += 1
        self.end("c1", output="Three oldest bugs: #12, #31, #40.")
        self.settled("c1")
        self.root_notice()

        print("— cold resume after the database is reopened")
        srv.call("agents/close", agent_id="root")
        code = srv.stop()
        print(f"▸ host closes root and stdin; subagentd exits {code}")
        srv = self.boot()
        srv.call("agents/open", agent_id="root", label="coordinator")
        print(f"  agents/get c1 → status {srv.call('agents/get', agent_id='c1')['status']}")
        self.send("root", "c1", "One more: check the wiki.")
        start = self.turn("c1")
        if "resume" not in start:
            raise DemoError(f"turn/start for a cold-resumed child carried no resume: {start}")
        print(f"  turn/start carries resume: {json.dumps(start['resume'], ensure_ascii=False)}")
        events = srv.call("transcript/read", agent_id="c1")["events"]
        print(f"  host rebuilds researcher from the descriptor and {len(events)} transcript events")
        self.end("c1", output="Wiki checked.")
        self.settled("c1")
        self.root_notice()
        srv.call("agents/close", agent_id="root")
        code = srv.stop()
        print(f"▸ host closes root and stdin; subagentd exits {code}")


def run(db: str | None) -> int:
    """Run the scripted tour; returns the process exit code."""
    began = time.monotonic()
    if hasattr(sys.stdout, "reconfigure"):  # ▸ and — on a terminal that cannot show them
        sys.stdout.reconfigure(errors="replace")
    tmp = None
    if db is None:
        tmp = tempfile.mkdtemp(prefix="subagentd-demo-")
        db = os.path.join(tmp, "demo.db")
    elif db == ":memory:" or (os.path.exists(db) and os.path.getsize(db) > 0):
        why = "needs a file (it restarts subagentd on it)" if db == ":memory:" else "exists"
        print(f"subagentd demo: {db} {why}; give a new path", file=sys.stderr)
        return 2
    print("subagentd demo — a scripted host (no model, no network) drives a real subagentd")
    demo = None
    try:
        demo = Demo(db)
        demo.run()
    except DemoError as exc:
        print(f"subagentd demo failed: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `subagentd demo | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        for srv in demo.servers if demo is not None else []:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    c = demo.counts
    print(
        f"Done in {time.monotonic() - began:.1f}s: 4 agents, {c['turns']} turns, "
        f"{c['reports']} report, {c['notices']} settle notices read, {len(demo.servers)} subagentd processes."
    )
    if tmp is None:
        print(f"Look inside: subagentd inspect --db {db}")
    return 0
