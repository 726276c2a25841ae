"""`subagentd demo`: a scripted host drives a real subagentd subprocess and narrates what happens.

The demo is a host like any other: it speaks to the subprocess through `subagentd.client` and never
imports core, storage or server. A deterministic stand-in plays every agent's model (no network).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from typing import Any

import msgspec

from subagentd.cli.demo_db import POSTGRES, demo_sessions, shown
from subagentd.client import Client, ConnectionClosed, RequestTimeout, RpcError
from subagentd.private_files import private_directory
from subagentd.schema.notifications import AgentSettled, TurnInterrupt, TurnStart

WAIT = 10.0  # seconds: every wait on the server is bounded by this
FAILURES = (RpcError, RequestTimeout, ConnectionClosed)


class DemoError(Exception):
    """The server did not do what the script expected (or did not answer in time)."""


def short(text: str, width: int = 60) -> str:
    text = " | ".join(line for line in text.splitlines() if line)
    return text if len(text) <= width else text[: width - 1] + "…"


class Demo:
    """The scripted host and its stand-in model; every step narrates one line or two."""

    LABELS = {"root": "coordinator"}

    def __init__(self, db: str, record: str | None = None) -> None:
        self.db = db
        self.record = record  # a directory: each subagentd's session as demo-<n>.jsonl
        self.turns: dict[str, str] = {}
        self.counts = {"turns": 0, "notices": 0, "reports": 0}
        self.servers: list[Client] = []

    @property
    def srv(self) -> Client:
        return self.servers[-1]

    def boot(self) -> Client:
        args = ["--log-level", "warning"]
        if self.record is not None:
            path = os.path.join(self.record, f"demo-{len(self.servers) + 1}.jsonl")
            args += ["--record", path]
        srv = Client.spawn(*args, db=self.db)
        self.servers.append(srv)
        info = srv.initialize(client_name="subagentd-demo", client_version="1")
        assert srv.process is not None
        print(
            f"▸ host starts subagentd {info.serverInfo.version} (pid {srv.process.pid})"
            f" on {shown(self.db)}"
        )
        return srv

    def stop(self) -> int:
        """EOF on stdin: subagentd commits, closes the database and exits."""
        code = self.srv.close(WAIT)
        if code is None or code < 0:
            raise DemoError(f"subagentd did not exit within {WAIT:.0f}s after EOF")
        return code

    def name(self, agent_id: str) -> str:
        return self.LABELS.get(agent_id, agent_id)

    def turn(self, agent_id: str, note: str = "") -> TurnStart:
        """Wait for the agent's next turn/start and show its input (one line per text block)."""
        start = self.srv.wait_for(TurnStart, WAIT, agent_id=agent_id)
        self.turns[agent_id] = start.turn_id
        self.counts["turns"] += 1
        blocks = [b.text for m in start.messages for b in m.content] or [""]
        print(f'  {self.name(agent_id)}: turn started with "{short(blocks[0], 90)}"{note}')
        for block in blocks[1:]:
            print(f'      + "{short(block, 80)}"')
        return start

    def end(self, agent_id: str, reason: Any = "completed", output: str | None = None) -> None:
        self.srv.turns_end(agent_id, self.turns.pop(agent_id), reason, output)

    def spawn(self, caller: str, child: str, label: str, prompt: str) -> None:
        result = self.srv.agents_spawn(caller, label, prompt, child_id=child)
        self.LABELS[child] = label
        print(f'▸ {self.name(caller)} spawns "{label}" ({child}) → {result.text}')
        self.turn(child)

    def send(self, caller: str, child: str, message: str) -> str:
        result = self.srv.send_message(child, message, caller=caller)
        state: str = self.srv.messages_get(result.message_id).state
        if state == "claimed":
            state = "claimed: its turn started at once"
        print(f'▸ {self.name(caller)} → {self.name(child)}: "{message}" ({state})')
        return result.text

    def settled(self, agent_id: str) -> None:
        settled = self.srv.wait_for(AgentSettled, WAIT, agent_id=agent_id)
        print(f"  agent/settled {agent_id} ({settled.reason}): it is ready, only in storage now")

    def root_notice(self) -> None:
        """The coordinator's model reads a settlement notice and ends its turn."""
        start = self.srv.wait_for(TurnStart, WAIT, agent_id="root")
        self.counts["turns"] += 1
        self.counts["notices"] += 1
        message = start.messages[0]
        first = short(message.content[0].text, 90)
        print(f'  coordinator wakes: {message.source.kind}: "{first}"')
        self.srv.turns_end("root", start.turn_id, "completed")

    def run(self) -> None:
        srv = self.boot()
        # a host span of its own (W3C trace context): with OTEL_* set, subagentd's spans of the
        # whole run form one trace below it (docs/tracing.md)
        self.traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        srv.agents_open("root", label="coordinator", traceparent=self.traceparent)
        print('▸ host opens the root session "coordinator" (root)')
        self.spawn("root", "c1", "researcher", "Find the three oldest open bugs.")
        self.spawn("root", "c2", "writer", "Draft the release notes.")
        self.spawn("c1", "g1", "bug-finder", "Scan the tracker for bugs older than 2020.")

        print("— a subagent asks its parent and waits (ask_parent)")
        asking = srv.start("ask_parent", {"caller": "c1", "question": "GitHub or Jira?"})
        start = self.turn("root")  # the question wakes the coordinator
        answer = srv.send_message("c1", "GitHub.", caller="root").text
        print(f'▸ coordinator → researcher: "GitHub." → {answer}')
        srv.turns_end("root", start.turn_id, "completed")
        print(f'  researcher\'s ask_parent returns "{srv.response(asking)["result"]["text"]}"')

        print("— a follow-up waits behind a running turn")
        print(f'  send_message: "{self.send("root", "c1", "Also check the closed ones.")}"')

        print("— an interrupt parks the queue; the next send_message unparks it")
        self.send("root", "c2", "Use the changelog.")
        self.send("root", "c2", "Keep it short.")
        stop = srv.interrupt_agent("c2", caller="root")
        cause = srv.wait_for(TurnInterrupt, WAIT, agent_id="c2").cause
        print(f"▸ coordinator interrupts writer: {stop.text} (was {stop.previous_status})")
        print(f"  host gets turn/interrupt (cause {cause.kind} by {cause.by}), ends it aborted")
        self.end("c2", "aborted")
        got = srv.agents_get("c2")
        if got.parked != 2:
            raise DemoError(f"expected 2 parked messages for c2, agents/get said {got}")
        print(f"  agents/get c2 → status {got.status}, queued {got.queued}, parked {got.parked}")
        self.send("root", "c2", "Ship it today.")
        for i, output in enumerate(["changelog read", "kept short", "Release notes: 3 fixes."]):
            self.turn("c2", "  (parked, in order)" if i < 2 else "  (then the new one)")
            self.end("c2", output=output)
        self.settled("c2")
        self.root_notice()

        print("— a report reaches the parent as its next turn")
        result = srv.report("Oldest open bug: #12 (2019).", caller="g1")
        self.counts["reports"] += 1
        print(
            f'▸ bug-finder calls report("Oldest open bug: #12 (2019).") → accepted as message {result.message_id[:8]}…'
        )
        self.end("c1", output="waiting for bug-finder")
        print("  researcher ends its first turn; its inbox runs in order:")
        self.turn("c1", "  (the queued follow-up)")
        self.end("c1", output="closed ones checked")
        self.turn("c1")

        print("— list_agents(scope=descendants), as the coordinator's model sees it:")
        for line in srv.list_agents("descendants", caller="root").text.splitlines():
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
        srv.agents_close("root")
        print(f"▸ host closes root and stdin; subagentd exits {self.stop()}")
        srv = self.boot()
        srv.agents_open("root", label="coordinator", traceparent=self.traceparent)
        print(f"  agents/get c1 → status {srv.agents_get('c1').status}")
        self.send("root", "c1", "One more: check the wiki.")
        start = self.turn("c1")
        if start.resume is None:
            raise DemoError(f"turn/start for a cold-resumed child carried no resume: {start}")
        resume = json.dumps(msgspec.to_builtins(start.resume), ensure_ascii=False)
        print(f"  turn/start carries resume: {resume}")
        events = srv.transcript_read("c1").events
        print(f"  host rebuilds researcher from the descriptor and {len(events)} transcript events")
        self.end("c1", output="Wiki checked.")
        self.settled("c1")
        self.root_notice()
        srv.agents_close("root")
        print(f"▸ host closes root and stdin; subagentd exits {self.stop()}")


def failure(srv: Client | None, error: BaseException) -> str:
    """What went wrong, with what subagentd logged (its stderr tail)."""
    state = ""
    if srv is not None and srv.process is not None:
        code = srv.process.poll()
        state = f" (it exited with code {code})" if code is not None else " (it is still running)"
    tail = srv.stderr_text().strip()[-2000:] if srv is not None else ""
    return f"subagentd: {error}{state}{': ' + tail if tail else ''}"


def run(db: str | None, record: str | None = None) -> int:
    """Run the scripted tour; returns the process exit code. `record`: a directory to write
    each subagentd's session to as a transcript (`subagentd serve --record`)."""
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
    elif db.startswith(POSTGRES):  # the same rule: the demo's agents must be new there
        try:
            held = demo_sessions(db)
        except FAILURES as exc:
            print(f"subagentd demo failed: subagentd: {exc}", file=sys.stderr)
            return 1
        if held:
            print(
                f"subagentd demo: {shown(db)} already holds the demo's sessions"
                f" ({', '.join(held)}); give a new database",
                file=sys.stderr,
            )
            return 2
    print("subagentd demo — a scripted host (no model, no network) drives a real subagentd")
    demo = None
    try:
        if record is not None:
            private_directory(record)  # the sessions' recordings are private (0700, 0600)
        demo = Demo(db, record)
        demo.run()
    except DemoError as exc:
        print(f"subagentd demo failed: {exc}", file=sys.stderr)
        return 1
    except FAILURES as exc:  # an error answer, a timeout, subagentd gone
        srv = demo.srv if demo is not None and demo.servers else None
        print(f"subagentd demo failed: {failure(srv, exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError as exc:
        srv = demo.srv if demo is not None and demo.servers else None
        if srv is not None and srv.process is not None and srv.process.poll() is not None:
            print(f"subagentd demo failed: {failure(srv, exc)}", file=sys.stderr)
            return 1
        # `subagentd demo | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        for srv in demo.servers if demo is not None else []:
            if srv.process is not None and srv.process.poll() is None:
                srv.process.kill()
                srv.process.wait()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    c = demo.counts
    print(
        f"Done in {time.monotonic() - began:.1f}s: 4 agents, {c['turns']} turns, "
        f"{c['reports']} report, {c['notices']} settle notices read, {len(demo.servers)} subagentd processes."
    )
    if tmp is None:
        print(f"Look inside: subagentd inspect --db {shown(db)}")
    return 0
