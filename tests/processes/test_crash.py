"""Crash and restart under pipelined load (PROTOCOL.md section 7).

A scripted host drives the real `python -m subagentd` over pipes without waiting for replies,
records every request it sent and every reply it read, and SIGKILLs the process at a random
moment. The next process on the same database must show: every acknowledged effect present
exactly once and in acknowledged order, no request half-applied, the turns open at the crash
ended with reason "error" (cause "crash") and continuable parents told, and the messages that
were still queued or parked running in their original order, one turn each, once resumed.

Rounds chain: the restarted process of round n is the loaded process of round n + 1, so one
database accumulates every round. `SUBAGENTD_CRASH_ROUNDS` (default 30) sets the number of
rounds, `SUBAGENTD_CRASH_SECONDS` (default 60) bounds the time spent starting new rounds, and
`SUBAGENTD_CRASH_SEED` replays one run (the seed is in every assertion message).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from subagentd.client.errors import ConnectionClosed, RpcError
from subagentd.storage.postgres import is_postgres
from tests.spawned import ServerProcess

ROUNDS = int(os.environ.get("SUBAGENTD_CRASH_ROUNDS", "30"))
BUDGET = float(os.environ.get("SUBAGENTD_CRASH_SECONDS", "60"))
SEED = int(os.environ.get("SUBAGENTD_CRASH_SEED", str(random.SystemRandom().randrange(2**32))))
MAX_IN_FLIGHT = 48  # unanswered requests before the host waits for replies
MIN_ROUNDS = min(ROUNDS, 5)  # run even when a loaded machine makes them slower than the budget
WAIT = 30.0  # every single wait for a frame is bounded by this (generous: CI machines are loaded)
REASONS = ["completed", "completed", "completed", "aborted", "max-tokens", "refusal", "error"]
INBOX_METHODS = {"agents/spawn", "send_message", "agents/followup", "report"}


@dataclass
class Request:
    """One request the host wrote (or tried to write) to a subagentd process."""

    epoch: int
    rpc_id: int
    method: str
    params: dict[str, Any]
    token: str | None = None  # the unique text that marks the message it carries
    target: str | None = None  # whose inbox that message goes to
    must_succeed: bool = False
    reply: dict[str, Any] | None = None

    @property
    def order(self) -> tuple[int, int]:
        return (self.epoch, self.rpc_id)

    @property
    def acked(self) -> bool:
        return self.reply is not None and "result" in self.reply

    @property
    def result(self) -> dict[str, Any]:
        """The result of an acknowledged request."""
        assert self.reply is not None, self
        return self.reply["result"]

    @property
    def refused(self) -> bool:
        return self.reply is not None and "error" in self.reply


@dataclass
class Ledger:
    """Everything the host did across every process of the run."""

    requests: list[Request] = field(default_factory=list)
    by_token: dict[str, Request] = field(default_factory=dict)
    parent_of: dict[str, str] = field(default_factory=dict)  # spawned child -> caller
    mode_of: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(
        default_factory=lambda: {
            "rounds": 0,
            "requests_sent": 0,
            "replies_read": 0,
            "acknowledged_messages_checked": 0,
            "acknowledged_turn_ends_checked": 0,
            "open_turns_recovered": 0,
            "host_open_turns_recovered": 0,
            "crash_notices_checked": 0,
            "resumed_queues_checked": 0,
            "resumed_messages_in_order": 0,
        }
    )


class Epoch:
    """One process's life: the requests sent to it and what it told the host."""

    def __init__(
        self, number: int, proc: ServerProcess, ledger: Ledger, rng: random.Random
    ) -> None:
        self.number = number
        self.proc = proc
        self.host = proc.host
        self.ledger = ledger
        self.rng = rng
        self.pending: dict[int, Request] = {}
        self.open_turns: dict[
            str, str
        ] = {}  # turn id -> agent, turn/start seen, turns/end not sent
        self.interrupted: set[str] = set()  # turn ids the host was asked to abort
        self.seen_turns: dict[str, str] = {}  # every turn/start seen: turn id -> agent
        self.ended_acked: set[str] = set()
        self.turns_of: dict[str, list[str]] = {}  # agent -> its turn ids in turn/start order
        self.turn_messages: dict[str, list[str]] = {}  # turn id -> the message ids it took
        self.cold_resumes: set[str] = set()  # turn ids whose turn/start carried `resume`
        self.settled: set[str] = set()
        self.live_children: list[str] = []  # continuable children of the root, spawn acked
        self.all_children: list[str] = []
        self.counter = 0
        self.dead = False
        self.eof = False
        self.errors: list[str] = []
        self.replies = 0  # replies read from this process
        self.killed = False  # the host sent SIGKILL
        self.died_alone = False  # it was gone before the host killed it

    # --- sending and reading -----------------------------------------------------------

    def token(self, kind: str) -> str:
        self.counter += 1
        return f"e{self.number}-{kind}-{self.counter}"

    def send(
        self,
        method: str,
        params: dict[str, Any],
        token: str | None = None,
        target: str | None = None,
        must_succeed: bool = False,
    ) -> Request | None:
        """Write one request; it counts as sent even when the write fails (the kill raced it)."""
        rpc_id = next(self.host.ids)
        request = Request(self.number, rpc_id, method, params, token, target, must_succeed)
        self.ledger.requests.append(request)
        self.ledger.stats["requests_sent"] += 1
        if token is not None:
            self.ledger.by_token[token] = request
        self.pending[rpc_id] = request
        frame = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
        try:
            self.host.send(frame)
        except OSError:
            self.gone()
            return None
        return request

    def call(self, method: str, params: dict[str, Any], **marks: Any) -> dict[str, Any]:
        """Send one request and read frames (handling them) until its reply; the reply."""
        request = self.send(method, params, **marks)
        assert request is not None, f"{method}: subagentd is gone (seed {SEED})"
        while request.reply is None:
            self.read_one(WAIT)
        return request.reply

    def result(self, method: str, params: dict[str, Any], **marks: Any) -> Any:
        reply = self.call(method, params, **marks)
        if "result" not in reply:  # what the server logged says why
            raise AssertionError(
                f"{method} {params} failed: {reply} (seed {SEED}); its stderr: "
                + self.proc.stderr_text()[-4000:]
            )
        return reply["result"]

    def read_one(self, timeout: float) -> None:
        message = self.host.read_any(timeout)
        self.host.responses.clear()
        self.host.notifications.clear()
        if "method" in message:
            self.on_notification(message["method"], message["params"])
            return
        request = self.pending.pop(message["id"])
        request.reply = message
        self.ledger.stats["replies_read"] += 1
        self.replies += 1
        if request.method == "turns/end" and "result" in message:
            self.ended_acked.add(request.params["turn_id"])
        if request.method == "agents/spawn" and "result" in message:
            child = request.params["child_id"]
            self.all_children.append(child)
            if request.params["caller"] == self.root and request.params["mode"] == "continuable":
                self.live_children.append(child)
        if request.must_succeed and "error" in message:
            self.errors.append(f"{request.method} {request.params} was refused: {message}")

    def read_available(self, timeout: float) -> None:
        try:
            while True:
                self.read_one(timeout)
        except TimeoutError:
            return

    def on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "turn/start":
            agent: str = params["agent_id"]
            turn_id = params["turn_id"]
            earlier = [t for t in self.turns_of.get(agent, []) if t not in self.ended_acked]
            if earlier:
                self.errors.append(
                    f"turn/start {turn_id} for {agent} while its turn(s) {earlier} were not ended"
                )
            self.turns_of.setdefault(agent, []).append(turn_id)
            self.turn_messages[turn_id] = [m["message_id"] for m in params["messages"]]
            if "resume" in params:
                self.cold_resumes.add(turn_id)
            self.seen_turns[turn_id] = agent
            self.open_turns[turn_id] = agent
            self.settled.discard(agent)
        elif method == "turn/interrupt":
            self.interrupted.add(params["turn_id"])
        elif method == "agent/settled":
            self.settled.add(params["agent_id"])

    def end_turn(self, turn_id: str, reason: str | None = None) -> None:
        agent = self.open_turns.pop(turn_id)
        if reason is None:
            reason = "aborted" if turn_id in self.interrupted else self.rng.choice(REASONS)
        params: dict[str, Any] = {"agent_id": agent, "turn_id": turn_id, "reason": reason}
        if self.rng.random() < 0.5:
            params["output"] = self.token("output")
        self.send("turns/end", params, must_succeed=True)

    # --- the load ------------------------------------------------------------------------

    def load(self, root: str, kill_after: float) -> None:
        """Pipeline requests until the process is killed `kill_after` seconds after it began
        answering them (or, one round in five, after they began: maybe before any answer). A
        loaded machine may take longer than that to answer the first group (its commit), so
        the time is counted from then: each round checks acknowledged work."""
        self.root = root
        self.result("agents/open", {"agent_id": root})
        before, armed = self.replies, False
        killer = threading.Timer(kill_after, self.kill)
        if self.rng.random() < 0.2:
            killer.start()
            armed = True
        deadline = time.monotonic() + WAIT
        try:
            for _ in range(3):
                self.spawn(root)
            while not self.dead:
                for _ in range(self.rng.randint(1, 8)):
                    self.one_action()
                    if self.dead:
                        break
                if not self.dead:
                    self.read_available(0.002)
                while not self.dead and len(self.pending) > MAX_IN_FLIGHT:
                    self.read_available(0.01)
                    if not armed and time.monotonic() > deadline:
                        raise AssertionError(
                            f"no reply to the load within {WAIT} s (seed {SEED}, round"
                            f" {self.number}); its stderr: {self.proc.stderr_text()[-4000:]}"
                        )
                if not armed and self.replies > before:
                    killer.start()
                    armed = True
        except EOFError:
            self.gone()
            self.eof = True
        finally:
            if armed:
                killer.join()
        self.read_until_eof()
        assert not self.died_alone, (
            f"subagentd exited before it was killed (seed {SEED}, round {self.number},"
            f" status {self.proc.proc.wait(WAIT)}): {self.proc.stderr_text()[-4000:]}"
        )

    def kill(self) -> None:
        self.killed = True
        self.proc.proc.kill()

    def gone(self) -> None:
        """The process is found gone (a write to it failed, or its stdout ended)."""
        if not self.dead and not self.killed:
            self.died_alone = True
        self.dead = True

    def read_until_eof(self) -> None:
        """Every frame the process wrote before it died is still in the pipe: read it all."""
        self.dead = True
        try:
            while not self.eof:
                self.read_one(WAIT)
        except EOFError:
            self.eof = True

    def spawn(self, caller: str) -> None:
        self.counter += 1
        child = f"e{self.number}-c{self.counter}"
        mode = "continuable" if caller != self.root or self.rng.random() < 0.85 else "one-shot"
        token = self.token("prompt")
        self.ledger.parent_of[child] = caller
        self.ledger.mode_of[child] = mode
        self.send(
            "agents/spawn",
            {"caller": caller, "child_id": child, "label": "load", "prompt": token, "mode": mode},
            token=token,
            target=child,
            must_succeed=caller == self.root,
        )

    def one_action(self) -> None:
        rng = self.rng
        children = self.live_children
        running = [a for a in self.open_turns.values() if a in self.ledger.parent_of]
        weights = {
            "spawn": 1.0 if len(self.all_children) < 6 else 0.1,
            "spawn_grandchild": 0.3 if children and len(self.all_children) < 12 else 0.0,
            "send": 5.0 if children else 0.0,
            "followup": 0.5 if children else 0.0,
            "report": 2.0 if running else 0.0,
            "interrupt": 0.4 if children else 0.0,
            "end": 1.5 if self.open_turns else 0.0,
        }
        action = rng.choices(list(weights), list(weights.values()))[0]
        if action == "spawn":
            self.spawn(self.root)
        elif action == "spawn_grandchild":
            self.spawn(rng.choice(children))
        elif action == "send":
            target, token = rng.choice(children), self.token("send")
            self.send(
                "send_message",
                {"caller": self.root, "subagent_id": target, "message": token},
                token=token,
                target=target,
                must_succeed=True,
            )
        elif action == "followup":
            target, token = rng.choice(children), self.token("followup")
            self.send(
                "agents/followup",
                {"agent_id": target, "message": token},
                token=token,
                target=target,
                must_succeed=True,
            )
        elif action == "report":
            caller, token = rng.choice(running), self.token("report")
            self.send(
                "report",
                {"caller": caller, "output": token},
                token=token,
                target=self.ledger.parent_of[caller],
            )
        elif action == "interrupt":
            self.send(
                "interrupt_agent",
                {"caller": self.root, "agent_id": rng.choice(children)},
                must_succeed=True,
            )
        else:
            interrupted = [t for t in self.open_turns if t in self.interrupted]
            self.end_turn(rng.choice(interrupted or list(self.open_turns)))


# --- the database, read directly ---------------------------------------------------------


@dataclass
class Snapshot:
    sessions: dict[str, dict[str, Any]]
    descriptors: dict[str, Any]
    inbox: list[dict[str, Any]]  # by position
    events: list[dict[str, Any]]  # turn_start and turn_end events, by seq

    @property
    def max_position(self) -> int:
        return self.inbox[-1]["position"] if self.inbox else 0

    def inbox_of(self, session_id: str) -> list[dict[str, Any]]:
        if not hasattr(self, "_inboxes"):
            self._inboxes: dict[str, list[dict[str, Any]]] = {}
            for row in self.inbox:
                self._inboxes.setdefault(row["session_id"], []).append(row)
        return self._inboxes.get(session_id, [])

    def turn_ends(self) -> dict[str, list[dict[str, Any]]]:
        ends: dict[str, list[dict[str, Any]]] = {}
        for event in self.events:
            if event["type"] == "turn_end":
                ends.setdefault(event["data"]["turn_id"], []).append(event)
        return ends


def snapshot(db: str, *, settled: bool = False) -> Snapshot:
    """Every table as of one moment. On PostgreSQL that takes one REPEATABLE READ transaction
    (separate statements would each see the commits made between them), and with `settled`
    (no subagentd serving) it first waits for the server processes of a killed one to end: one
    that received its COMMIT before the kill still commits it after."""
    if is_postgres(db):
        conn: Any = psycopg.connect(db, row_factory=dict_row, autocommit=True)
        if settled:
            deadline = time.monotonic() + WAIT
            while (
                time.monotonic() < deadline
                and conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()["n"]
            ):
                time.sleep(0.02)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    else:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=WAIT)
        conn.row_factory = sqlite3.Row
    try:
        sessions = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
        descriptors = {
            r["session_id"]: r["body"] for r in conn.execute("SELECT * FROM descriptors")
        }
        inbox = []
        for r in conn.execute("SELECT * FROM inbox ORDER BY position"):
            row = dict(r)
            row["content"] = json.loads(row["content"])
            row["source"] = json.loads(row["source"])
            inbox.append(row)
        events = []
        for r in conn.execute(
            "SELECT * FROM events WHERE type IN ('turn_start', 'turn_end') ORDER BY seq"
        ):
            event = dict(r)
            event["data"] = json.loads(event["data"]) if event["data"] is not None else None
            events.append(event)
    finally:
        conn.close()
    return Snapshot(sessions, descriptors, inbox, events)


def token_of(row: dict[str, Any]) -> str:
    blocks = row["content"]
    return blocks[1]["text"] if row["source"]["kind"] == "subagent-report" else blocks[0]["text"]


# --- the checks --------------------------------------------------------------------------


def check_crash_state(ledger: Ledger, epoch: Epoch, s: Snapshot) -> None:
    """What the killed process left: acknowledged effects whole, nothing half-applied."""
    where = f"(seed {SEED}, round {epoch.number})"
    assert not epoch.errors, f"{epoch.errors} {where}"

    # Every message row comes from a request that was sent, once, whole, to the right inbox.
    rows_by_token: dict[str, dict[str, Any]] = {}
    for row in s.inbox:
        source = row["source"]
        if source["kind"] == "subagent-settled":
            sender = s.sessions.get(source["sender_session_id"])
            assert sender is not None and sender["parent_id"] == row["session_id"], (
                f"notice {row} from a session that is not a child of its inbox {where}"
            )
            continue
        token = token_of(row)
        request = ledger.by_token.get(token)
        assert request is not None, f"inbox row {row} matches no request that was sent {where}"
        assert token not in rows_by_token, f"message {token} is in the inbox twice {where}"
        rows_by_token[token] = row
        assert row["session_id"] == request.target, f"{row} went to the wrong inbox {where}"
        assert not request.refused, f"refused {request} left {row} behind {where}"

    # Every acknowledged message is there with its id; per inbox, in acknowledged order.
    last_position: dict[str, tuple[int, tuple[int, int]]] = {}
    for request in ledger.requests:
        if request.method not in INBOX_METHODS or not request.acked:
            continue
        stored = rows_by_token.get(request.token or "")
        assert stored is not None, f"acknowledged {request} is missing from the inbox {where}"
        assert stored["message_id"] == request.result["message_id"], f"{stored} {where}"
        previous = last_position.get(stored["session_id"])
        assert previous is None or previous[0] < stored["position"], (
            f"inbox of {stored['session_id']}: acknowledged {request.order} sits at position "
            f"{stored['position']}, before the earlier acknowledged {previous[1]} {where}"
        )
        last_position[stored["session_id"]] = (stored["position"], request.order)

    # Spawns are whole: session, descriptor, first inbox message; refused spawns left nothing.
    for session_id, session in s.sessions.items():
        if session["kind"] != "subagent":
            continue
        assert session_id in s.descriptors, f"subagent {session_id} has no descriptor {where}"
        descriptor = json.loads(s.descriptors[session_id])
        assert descriptor["mode"] == ledger.mode_of[session_id], f"{descriptor} {where}"
        assert session["parent_id"] == ledger.parent_of[session_id], f"{session} {where}"
        first = s.inbox_of(session_id)
        assert first and first[0]["source"]["form"] == "spawn", (
            f"spawned {session_id} has no first message {where}"
        )
        spawn = ledger.by_token[token_of(first[0])]
        assert spawn.params["child_id"] == session_id, f"{first[0]} {where}"
    assert set(s.descriptors) <= set(s.sessions), f"descriptor without a session {where}"
    for request in ledger.requests:
        if request.method == "agents/spawn" and request.refused:
            assert request.params["child_id"] not in s.sessions, f"{request} {where}"
        if request.method == "agents/spawn" and request.acked:
            assert request.params["child_id"] in s.sessions, f"{request} {where}"

    # Turns: claims match turn starts, at most one open turn per session, ends are single.
    starts: dict[str, dict[str, Any]] = {}
    by_id = {row["message_id"]: row for row in s.inbox}
    for event in s.events:
        if event["type"] == "turn_start":
            starts[event["data"]["turn_id"]] = event
            for message_id in event["data"]["message_ids"]:
                claimed = by_id.get(message_id)
                assert claimed is not None and claimed["state"] == "claimed", (
                    f"{event} {claimed} {where}"
                )
                assert claimed["turn_id"] == event["data"]["turn_id"], f"{event} {claimed} {where}"
    for row in s.inbox:
        if row["state"] == "claimed" and row["turn_id"] is not None:
            assert row["turn_id"] in starts, f"{row} claimed by no turn {where}"
    ends = s.turn_ends()
    for turn_id, ended in ends.items():
        assert len(ended) == 1 and turn_id in starts, f"turn {turn_id} ended {ended} {where}"
    for turn_id, start in starts.items():
        session = s.sessions[start["session_id"]]
        is_open = turn_id not in ends
        assert is_open == (session["open_turn_id"] == turn_id), (
            f"turn {turn_id} of {session['id']}: open={is_open}, "
            f"open_turn_id={session['open_turn_id']} {where}"
        )
    # The host saw it, so it was committed; the host's acknowledged ends are recorded as sent.
    for turn_id in epoch.seen_turns:
        assert turn_id in starts, f"turn/start {turn_id} was seen but is not stored {where}"
    for request in ledger.requests:
        if request.epoch == epoch.number and request.method == "turns/end" and request.acked:
            [end_event] = ends[request.params["turn_id"]]
            assert end_event["data"]["reason"] == request.params["reason"], f"{end_event} {where}"
            ledger.stats["acknowledged_turn_ends_checked"] += 1


def check_recovery(ledger: Ledger, epoch: Epoch, before: Snapshot, after: Snapshot) -> int:
    """The restarted process ended every open turn as a crash and told continuable parents."""
    where = f"(seed {SEED}, round {epoch.number})"
    ends = after.turn_ends()
    recovered = 0
    for session_id, session in before.sessions.items():
        turn_id = session["open_turn_id"]
        assert after.sessions[session_id]["open_turn_id"] is None, f"{session_id} {where}"
        if turn_id is None:
            continue
        recovered += 1
        [end_event] = ends[turn_id]
        assert end_event["data"] == {"turn_id": turn_id, "reason": "error", "cause": "crash"}, (
            f"{end_event} {where}"
        )
        if session["kind"] == "subagent" and ledger.mode_of[session_id] == "continuable":
            expected = f"Background subagent {session_id} failed before it finished."
            notices = [
                row
                for row in after.inbox_of(session["parent_id"])
                if row["position"] > before.max_position
                and row["source"]["kind"] == "subagent-settled"
                and row["source"]["sender_session_id"] == session_id
            ]
            assert [n["content"][0]["text"] for n in notices] == [expected], (
                f"crash notice of {session_id}: {notices} {where}"
            )
            ledger.stats["crash_notices_checked"] += 1
    for turn_id, ended in ends.items():
        assert len(ended) == 1, f"turn {turn_id} ended {ended} {where}"
    starts = {e["data"]["turn_id"] for e in after.events if e["type"] == "turn_start"}
    assert starts == set(ends), f"turns never ended after recovery {starts - set(ends)} {where}"
    # Only notices were added by recovery; nothing else changed in the inboxes, except that a
    # crash notice is a waking input: it unparks its parent's parked messages (SEMANTICS.md 1).
    woken = {row["session_id"] for row in after.inbox[len(before.inbox) :]}
    unparked = [
        {**row, "state": "queued"}
        if row["state"] == "parked" and row["session_id"] in woken
        else row
        for row in before.inbox
    ]
    assert after.inbox[: len(before.inbox)] == unparked, f"recovery rewrote inboxes {where}"
    for session_id in woken:
        assert not after.sessions[session_id]["parked"], f"{session_id} still parked {where}"
    return recovered


def check_over_the_wire(ledger: Ledger, epoch: Epoch, restarted: Epoch, after: Snapshot) -> None:
    """messages/get, transcript/read and agents/get on the restarted process."""
    where = f"(seed {SEED}, round {epoch.number})"
    acked = [r for r in ledger.requests if r.epoch == epoch.number and r.method in INBOX_METHODS]
    sent = [
        restarted.send("messages/get", {"message_id": r.result["message_id"]})
        for r in acked
        if r.acked
    ]
    for get, request in zip(sent, [r for r in acked if r.acked], strict=True):
        assert get is not None
        while get.reply is None:
            restarted.read_one(WAIT)
        info = get.reply.get("result")
        assert info is not None, f"acknowledged {request}: {get.reply} {where}"
        assert info["agent_id"] == request.target, f"{info} {request} {where}"
        ledger.stats["acknowledged_messages_checked"] += 1
    # A turn the host saw start and never ended: its session's last turn_end is the crash one.
    reads = {
        turn_id: restarted.send("transcript/read", {"agent_id": agent})
        for turn_id, agent in epoch.open_turns.items()
    }
    for turn_id, agent in epoch.open_turns.items():
        events = read_transcript(restarted, agent, reads[turn_id])
        last = [e for e in events if e["type"] == "turn_end"][-1]
        assert last["data"] == {"turn_id": turn_id, "reason": "error", "cause": "crash"}, (
            f"open turn {turn_id} of {agent}: last turn_end {last} {where}"
        )
        ledger.stats["host_open_turns_recovered"] += 1
    for session_id in [epoch.root, *epoch.all_children]:
        info = restarted.result("agents/get", {"agent_id": session_id})
        queued = [r for r in after.inbox_of(session_id) if r["state"] == "queued"]
        parked = [r for r in after.inbox_of(session_id) if r["state"] == "parked"]
        assert (info["status"], info["queued"], info["parked"]) == (
            "ready",
            len(queued),
            len(parked),
        ), f"{info} {where}"


def read_transcript(epoch: Epoch, agent: str, first: Request | None) -> list[dict[str, Any]]:
    """The whole transcript, starting from an already sent first page request."""
    assert first is not None
    while first.reply is None:
        epoch.read_one(WAIT)
    page = first.reply["result"]
    events: list[dict[str, Any]] = []
    while True:
        events += page["events"]
        if page.get("next") is None:
            return events
        page = epoch.result("transcript/read", {"agent_id": agent, "after": page["next"]})


def check_resume_order(ledger: Ledger, epoch: Epoch, restarted: Epoch, after: Snapshot) -> None:
    """Reopen the root; the child with the longest waiting queue runs it in order, one per turn."""
    where = f"(seed {SEED}, round {epoch.number})"
    waiting = {
        child: [r for r in after.inbox_of(child) if r["state"] in ("queued", "parked")]
        for child in epoch.live_children
    }
    child = max(waiting, key=lambda c: len(waiting[c]), default=None)
    restarted.root = epoch.root
    restarted.result("agents/open", {"agent_id": epoch.root})
    if child is None or not waiting[child]:
        return
    token = restarted.token("resume")
    sent = restarted.result(
        "send_message",
        {"caller": epoch.root, "subagent_id": child, "message": token},
        token=token,
        target=child,
    )
    expected = [r["message_id"] for r in waiting[child]] + [sent["message_id"]]
    got: list[str] = []
    turns: list[str] = []
    deadline = time.monotonic() + 4 * WAIT
    while len(got) < len(expected):
        assert time.monotonic() < deadline, f"resume of {child} stalled at {got} {where}"
        restarted.read_available(0.01)
        for turn_id, agent in list(restarted.open_turns.items()):
            if agent == child:
                turns.append(turn_id)
                start_ids = restarted.turn_messages[turn_id]
                assert len(start_ids) == 1, f"turn {turn_id} of {child} took {start_ids} {where}"
                got += start_ids
            restarted.end_turn(turn_id, "completed")
    assert got == expected, f"{child} ran {got}, expected queue order {expected} {where}"
    resumed = [t in restarted.cold_resumes for t in turns]
    assert resumed == [True] + [False] * (len(turns) - 1), f"resume flags {resumed} {where}"
    ledger.stats["resumed_queues_checked"] += 1
    ledger.stats["resumed_messages_in_order"] += len(expected)


def start(db: str) -> ServerProcess:
    proc = ServerProcess("--durability", "normal", db=db)
    try:
        proc.host.initialize()
        # initialize may be answered before the database is open (start-up fast path); the
        # first request that needs state is served only after crash recovery committed
        proc.host.response(proc.host.start("agents/get", {"agent_id": "-"}))  # any answer will do
    except ConnectionClosed:
        try:  # how it ended (a signal's number is negative) says as much as what it logged
            code: int | str = proc.wait(WAIT)
        except Exception as exc:  # still running with its stdout closed
            code = repr(exc)
        raise AssertionError(
            f"subagentd did not start (seed {SEED}, exit status {code}): {proc.stderr_text()}"
        ) from None
    return proc


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def crash_db(request, tmp_path):
    """The database the rounds share: a SQLite file, or a PostgreSQL database's URL (direct, or
    through PgBouncer in session pooling mode: PROTOCOL.md section 7, "Behind a pooler")."""
    if request.param == "sqlite":
        return str(tmp_path / "crash.db")
    stores = request.getfixturevalue("pg_stores")
    url = stores.url("crash")
    if request.param == "postgres":
        return url
    return request.getfixturevalue("pgbouncers")["session"].url(stores.databases["crash"])


@pytest.mark.timeout(max(300, int(BUDGET) * 5))
def test_acknowledged_work_survives_kill_nine_under_pipelined_load(crash_db, record_property):
    rng = random.Random(SEED)
    db = crash_db
    ledger = Ledger()
    started = time.monotonic()
    proc = start(db)
    epoch = Epoch(0, proc, ledger, rng)
    try:
        for number in range(ROUNDS):
            if number >= MIN_ROUNDS and time.monotonic() - started > BUDGET:
                break
            epoch.load(f"root{number}", kill_after=rng.uniform(0.05, 0.45))
            epoch.proc.stop()
            before = snapshot(db, settled=True)
            check_crash_state(ledger, epoch, before)

            proc = start(db)
            restarted = Epoch(number + 1, proc, ledger, rng)
            after = snapshot(db)
            ledger.stats["open_turns_recovered"] += check_recovery(ledger, epoch, before, after)
            check_over_the_wire(ledger, epoch, restarted, after)
            check_resume_order(ledger, epoch, restarted, after)
            ledger.stats["rounds"] += 1
            epoch = restarted
    except BaseException:  # what the newest process logged says why, whatever failed
        print(f"\nstderr of the newest subagentd (seed {SEED}):\n{proc.stderr_text()[-8000:]}")
        raise
    finally:
        for each in {id(p): p for p in (epoch.proc, proc)}.values():
            each.proc.kill()
            each.stop()
    summary = {"seed": SEED, **ledger.stats, "seconds": round(time.monotonic() - started, 1)}
    for key, value in summary.items():
        record_property(key, value)
    print(f"\ncrash harness: {json.dumps(summary)}")
    assert ledger.stats["rounds"] >= MIN_ROUNDS, summary
    assert ledger.stats["acknowledged_messages_checked"] > 0, summary


def test_spent_budgets_survive_kill_nine(crash_db):
    """Budgets are charged in the request's transaction: a restart resets nothing. A tree that
    spent its spawns and its tokens before a SIGKILL is still refused after it, with the same
    figures, and what its turns reported is still summed."""
    proc = start(crash_db)
    host = proc.host
    host.open("root", budget={"max_spawns": 2, "max_tokens": 100})
    for child in ("c1", "c2"):
        started = host.spawn("root", child)
        host.call(
            "turns/end",
            {
                "agent_id": child,
                "turn_id": started["turn_id"],
                "reason": "completed",
                "usage": {"input_tokens": 40, "output_tokens": 20, "cost": 0.125},
            },
        )
    proc.proc.kill()  # SIGKILL: no shutdown path runs
    proc.stop()
    proc = start(crash_db)
    try:
        host = proc.host
        info = host.call("agents/get", {"agent_id": "root"})
        assert info["tree_usage"] == {
            "turns": info["tree_usage"]["turns"],
            "spawns": 2,
            "input_tokens": 80,
            "output_tokens": 40,
            "cost": 0.25,
        }
        assert info["budget"]["max_spawns"] == 2
        host.open("root")
        with pytest.raises(RpcError) as refused:
            host.call("agents/spawn", {"caller": "root", "label": "t", "prompt": "go"})
        assert refused.value.code == 1011
        assert (refused.value.data["budget"], refused.value.data["spent"]) == ("spawns", 2)
        host.call("agents/budget", {"agent_id": "root", "remove": ["spawns"]})
        with pytest.raises(RpcError) as refused:
            host.call("agents/spawn", {"caller": "root", "label": "t", "prompt": "go"})
        assert (refused.value.data["budget"], refused.value.data["spent"]) == ("tokens", 120)
    finally:
        proc.stop()
