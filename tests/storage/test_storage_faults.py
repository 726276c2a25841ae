"""Storage faults: no acknowledged write is ever lost on a storage error, a failed
COMMIT does not end the server, memory agrees with storage after a lost group, a locked database
answers busy at once, and duplicate waiting request ids are refused.

A full disk is played by RLIMIT_FSIZE on the real server (set with prlimit from here, so it can be
lifted again: "space returns"); in-process tests use a connection whose statements fail on demand.
`SUBAGENTD_FAULT_ROUNDS` raises the number of rounds, `SUBAGENTD_FAULT_SEED` picks the seed.
"""

from __future__ import annotations

import collections
import json
import os
import random
import resource
import signal
import sqlite3
import threading
import time
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import invariant

from subagentd.core.registry import LiveAgent
from subagentd.errors import StorageBusyError, StorageFailedError
from subagentd.schema.host_methods import OpenParams
from subagentd.schema.records import LiveRecord
from subagentd.storage.database import SqliteStore
from subagentd.wire.ledger import Deferred, Ledger, Owed, Pending
from tests.core_host import CoreHost
from tests.properties.test_state_machine import PROFILE, SchedulingMachine
from tests.spawned import TIMEOUT, Host, InProcessServer, ServerProcess

ROUNDS = int(os.environ.get("SUBAGENTD_FAULT_ROUNDS", "4"))
SEED = int(os.environ.get("SUBAGENTD_FAULT_SEED", "10"))
WAIT = 60.0


# --- a full disk for the real server ------------------------------------------------------


def ignore_sigxfsz() -> None:
    """In the child: writing past RLIMIT_FSIZE then fails with EFBIG instead of killing it."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def limit_file_size(pid: int, size: int | None) -> None:
    """Lower (or, with None, lift) the child's soft file-size limit; the hard one is kept."""
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard if size is None else size, hard))


def file_sizes(db: str) -> int:
    return max(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


def start_server(db: str) -> ServerProcess:
    # thousands of messages queue for one child: the per-inbox quota (SECURITY.md) is lifted
    proc = ServerProcess("--max-queued=0", db=db, preexec_fn=ignore_sigxfsz)
    proc.host.initialize()
    return proc


def replies_by_id(host: Host) -> collections.Counter:
    """How many replies each request id got, over every frame read so far."""
    counts: collections.Counter = collections.Counter()
    for line in host.raw:
        message = json.loads(line)
        for reply in message if isinstance(message, list) else [message]:
            if "id" in reply and "method" not in reply:
                counts[reply["id"]] += 1
    return counts


def stored_messages(db: str, agent_id: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT message_id FROM inbox WHERE session_id = ? ORDER BY position", (agent_id,)
            )
        ]
    finally:
        conn.close()


def send_message_frames(number: int, start: int, count: int, rng: random.Random, size: int):
    """send_message requests (every 50th a ping) with messages of up to `size` characters."""
    return [
        {
            "jsonrpc": "2.0",
            "id": f"r{number}-{i}",
            "method": "send_message" if i % 50 else "ping",
            "params": {
                "caller": "root",
                "subagent_id": "c1",
                "message": f"m{i} " + "x" * rng.randint(0, size),
            }
            if i % 50
            else {},
        }
        for i in range(start, start + count)
    ]


def load_round(tmp_path, rng: random.Random, number: int, mode: str) -> dict[str, int]:
    """The disk fills while pipelined send_message (one big batch of them, or pipelined to a
    host that stops reading for a while) is under way; then every acknowledged message must be
    stored, and nothing of a refused one."""
    db = str(tmp_path / f"full{number}.db")
    proc = start_server(db)
    host = proc.host
    try:
        host.open("root")
        host.spawn("root", "c1")  # c1 runs its first turn: every message queues
        if mode == "slow reader":  # writes wait for the host: many chunks share a group
            frames = send_message_frames(number, 0, rng.randint(1000, 3000), rng, 600)
            host.reading.clear()
            limit_file_size(proc.proc.pid, file_sizes(db) + rng.randint(0, 1_000_000))
            writer = threading.Thread(
                target=host.send_bytes,
                args=(b"".join(json.dumps(f).encode() + b"\n" for f in frames),),
            )
            writer.start()
            writer.join(WAIT)
            host.reading.set()
            replies = {f["id"]: host.response(f["id"], WAIT) for f in frames}
        elif (
            mode == "batch"
        ):  # some pipelined first, then a batch big enough to spill to the WAL mid-way
            frames = send_message_frames(number, 0, rng.randint(100, 600), rng, 600)
            host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
            replies = {f["id"]: host.response(f["id"], WAIT) for f in frames}
            limit_file_size(proc.proc.pid, file_sizes(db) + rng.randint(0, 3_000_000))
            members = send_message_frames(number, len(frames), rng.randint(2000, 5000), rng, 1200)
            frames += members
            host.send_bytes(json.dumps(members).encode() + b"\n")
            got = host.read_any(WAIT)
            while not isinstance(got, list):
                got = host.read_any(WAIT)
            replies.update((r["id"], r) for r in got)
        else:  # the limit drops between two of several writes, while earlier ones are handled
            frames = send_message_frames(number, 0, rng.randint(1000, 3000), rng, 600)
            pieces = rng.randint(4, 12)
            drop_after = rng.randrange(1, pieces)
            step = -(-len(frames) // pieces)
            for piece in range(pieces):
                chunk = frames[piece * step : (piece + 1) * step]
                host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in chunk))
                if piece == drop_after:
                    limit_file_size(proc.proc.pid, file_sizes(db) + rng.randint(0, 300_000))
            replies = {f["id"]: host.response(f["id"], WAIT) for f in frames}
        acknowledged = [
            r["result"]["message_id"]
            for r in replies.values()
            if "result" in r and "message_id" in r["result"]
        ]
        errors = [r["error"] for r in replies.values() if "error" in r]
        assert all(e["code"] == 1012 and e["data"]["reason"] in ("io", "full") for e in errors), {
            e["code"] for e in errors
        }
        assert all("result" in replies[f["id"]] for f in frames if f["method"] == "ping")
        # memory agrees with disk: the live inbox count is what was acknowledged
        assert host.call("agents/get", {"agent_id": "c1"})["queued"] == len(acknowledged)
        # space returns: writes work again
        limit_file_size(proc.proc.pid, None)
        after = host.tool("send_message", "root", subagent_id="c1", message="after")["message_id"]
        assert host.call("agents/get", {"agent_id": "c1"})["queued"] == len(acknowledged) + 1
    finally:
        code = proc.stop()
    assert code == 0, proc
    counts = replies_by_id(host)
    assert all(counts[f["id"]] == 1 for f in frames), "a request got no reply, or two"
    stored = stored_messages(db, "c1")
    lost = [m for m in acknowledged if m not in stored]
    # nothing of a refused request stayed: the prompt, the acknowledged ones, and `after`
    assert len(stored) == 1 + len(acknowledged) + 1 and after in stored
    return {
        "requests": len(frames),
        "acknowledged": len(acknowledged),
        "refused": len(errors),
        "lost": len(lost),
    }


MODES = ("pipelined", "batch", "slow reader")


@pytest.mark.timeout(60 + 30 * ROUNDS)
def test_no_acknowledged_send_message_is_lost_when_the_disk_fills_under_pipelined_load(
    tmp_path, record_property
):
    rng = random.Random(SEED)
    totals: collections.Counter = collections.Counter()
    for number in range(ROUNDS):
        figures = load_round(tmp_path, rng, number, MODES[number % len(MODES)])
        totals.update(figures)
        totals["rounds"] += 1
        totals["rounds_with_refusals"] += figures["refused"] > 0
    summary = {"seed": SEED, **totals}
    for key, value in summary.items():
        record_property(key, value)
    print(f"\nstorage faults: {json.dumps(summary)}")
    assert totals["lost"] == 0, summary
    assert totals["acknowledged"] > 0 and totals["rounds_with_refusals"] > 0, summary


def test_a_failed_commit_answers_its_group_and_the_server_keeps_serving(tmp_path):
    db = str(tmp_path / "commit.db")
    proc = start_server(db)
    host = proc.host
    try:
        host.open("root")
        t1 = host.spawn("root", "c1")["turn_id"]
        m1 = host.tool("send_message", "root", subagent_id="c1", message="m1")["message_id"]
        host.open("root2")
        d_turn = host.spawn("root2", "d")["turn_id"]
        close2 = host.start("agents/close", {"agent_id": "root2"})  # waits for d's turn
        host.notification("turn/interrupt", agent_id="d")
        host.call("ping")  # the close was admitted and committed
        host.drain_notifications()

        limit_file_size(proc.proc.pid, file_sizes(db))  # any growth now fails: the COMMIT fails
        ids = [
            host.start(
                "turns/end", {"agent_id": "c1", "turn_id": t1, "reason": "completed"}
            ),  # would start m1's turn
            host.start("send_message", {"caller": "root", "subagent_id": "c1", "message": "m2"}),
            host.start("ping"),
            host.start(
                "turns/end", {"agent_id": "d", "turn_id": d_turn, "reason": "completed"}
            ),  # would complete root2's close
            host.start("agents/close", {"agent_id": "root"}),
        ]
        replies = [host.response(i) for i in ids]
        assert replies[2]["result"] == {}
        for reply in replies[:2] + replies[3:]:
            assert reply["error"]["code"] == 1012, reply
            assert reply["error"]["data"] == {"reason": "io"}
            assert reply["error"]["message"] == (
                "storage failed (io); the request was not applied, retry it"
            )
        # reads keep working, and show what is committed
        c1 = host.call("agents/get", {"agent_id": "c1"})
        assert (c1["status"], c1["queued"]) == ("running", 1)
        assert host.call("messages/get", {"message_id": m1})["state"] == "queued"
        assert host.call("agents/get", {"agent_id": "d"})["status"] == "running"
        host.settle_quietly()
        assert not host.notifications, "notifications of the lost group reached the host"
        assert close2 not in host.responses, "a waiting close admitted earlier was answered"

        limit_file_size(proc.proc.pid, None)  # space returns
        host.end_turn("c1", t1)
        assert host.notification("turn/start", agent_id="c1")["messages"][0]["message_id"] == m1
        host.tool("send_message", "root", subagent_id="c1", message="m2")
        host.end_turn("d", d_turn)
        assert host.response(close2)["result"] == {}
        # the close of root was refused, not half-admitted: admissions below it are open
        host.call("agents/spawn", {"caller": "root", "child_id": "c2", "label": "x", "prompt": "p"})
        proc.close_stdin()
        code = proc.wait()
        stderr = proc.stderr_text()
    finally:
        proc.stop()
    assert code == 0
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr
    assert "storage failed (io): the commit group was rolled back" in stderr


# --- memory agrees with storage -----------------------------------------------------------


def live_view(agents: list[LiveAgent]) -> list[tuple]:
    return sorted(
        (
            a.agent_id,
            a.parent_id,
            a.kind,
            a.depth,
            a.activation_id,
            a.ancestry,
            (a.turn.turn_id, a.turn.interrupted) if a.turn else None,
            a.parked,
            a.pending,
            a.disposing,
            a.resume,
            a.last_reason,
            a.last_output,
        )
        for a in agents
    )


def stored_view(rows: list[LiveRecord]) -> list[tuple]:
    return sorted(
        (
            r.agent_id,
            r.parent_id,
            r.kind,
            r.depth,
            r.activation_id,
            tuple(r.ancestry.split(" ")),
            (r.open_turn_id, r.interrupted) if r.open_turn_id else None,
            r.parked,
            r.pending,
            r.disposing,
            r.resume,
            r.last_reason,
            r.last_output,
        )
        for r in rows
    )


class RebuildableMachine(SchedulingMachine):
    """The scheduling state machine, checking after every step that storage holds the registry."""

    @invariant()
    def storage_holds_everything_the_registry_knows(self) -> None:
        svc = self.core.svc
        assert live_view(list(svc.agents.registry)) == stored_view(
            svc.store.live_agents(svc.agents.owner)
        )

    @invariant()
    def a_rebuild_of_a_committed_state_changes_nothing(self) -> None:
        """What is not stored but derived (owner after an adoption, tool filter, held) too."""
        svc = self.core.svc
        svc.commit()

        def full() -> list[tuple]:
            extra = {a.agent_id: (a.owner_id, a.tools, a.held) for a in svc.agents.registry}
            return [(*row, extra[row[0]]) for row in live_view(list(svc.agents.registry))]

        before = full()
        svc.recovery.rebuild()
        assert full() == before


TestRebuildable = pytest.mark.timeout(600)(RebuildableMachine.TestCase)
TestRebuildable.settings = settings(PROFILE, max_examples=max(PROFILE.max_examples // 6, 10))


class FaultyConnection:
    """A sqlite3 connection whose statements fail on demand, as SQLite fails them on a full disk:
    `plan = (mode, n)` fails the n-th next statement of that mode once."""

    MODES = ("write-rollback", "write-statement", "commit", "read-rollback")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.plan: tuple[str, int] | None = None
        self.failures = 0

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._maybe_fail(sql)
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        self._maybe_fail(sql)  # a group's deferred inbox rows: one statement, as SQLite runs it
        return self._conn.executemany(sql, rows)

    def cursor(self) -> FaultyCursor:
        return FaultyCursor(self)

    def close(self) -> None:
        self._conn.close()

    def _maybe_fail(self, sql: str) -> None:
        if self.plan is None:
            return
        mode, left = self.plan
        verb = sql.lstrip()[:6].upper()
        if mode.startswith("write"):
            hit = verb in ("INSERT", "UPDATE", "DELETE")
        elif mode == "commit":
            hit = verb == "COMMIT"
        else:
            hit = verb == "SELECT" and self._conn.in_transaction
        if not hit:
            return
        if left:
            self.plan = (mode, left - 1)
            return
        self.plan = None
        self.failures += 1
        if mode != "write-statement" and self._conn.in_transaction:
            self._conn.execute("ROLLBACK")  # SQLite rolled the whole group back by itself
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR
        raise error


class FaultyCursor:
    def __init__(self, faulty: FaultyConnection) -> None:
        self._faulty = faulty
        self._cursor = faulty._conn.cursor()

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._faulty._maybe_fail(sql)
        return self._cursor.execute(sql, params)

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid


def faulty_store(path: str) -> tuple[SqliteStore, FaultyConnection]:
    store = SqliteStore(path)
    faulty = FaultyConnection(store.conn)
    store.conn = faulty  # type: ignore[assignment]
    return store, faulty


class WireModel:
    """What a host knows from the answers it got: roots, children, open turns, acknowledged ids."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.roots: list[str] = []
        self.children: dict[str, str] = {}  # child -> parent
        self.turns: dict[str, str] = {}  # agent -> open turn id
        self.acknowledged: set[str] = set()
        self.names = 0

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def agents(self) -> list[str]:
        return self.roots + list(self.children)

    def request(self) -> tuple[str, dict[str, Any]]:
        rng, agents = self.rng, self.agents()
        if not self.roots or rng.random() < 0.04:
            return "agents/open", {"agent_id": rng.choice([*self.roots, self.fresh("root")])}
        pick = rng.random()
        if pick < 0.18:
            return "agents/spawn", {
                "caller": rng.choice(agents),
                "child_id": self.fresh("c"),
                "label": "task",
                "prompt": "go",
                "mode": "one-shot" if rng.random() < 0.2 else "continuable",
            }
        if pick < 0.40 and self.children:
            child = rng.choice(list(self.children))
            return "send_message", {
                "caller": self.children[child],
                "subagent_id": child,
                "message": "more",
            }
        if pick < 0.62 and self.turns:
            agent = rng.choice(list(self.turns))
            return "turns/end", {
                "agent_id": agent,
                "turn_id": self.turns[agent],
                "reason": rng.choice(["completed", "aborted", "error"]),
                "output": "done",
            }
        if pick < 0.70 and self.children:
            child = rng.choice(list(self.children))
            return "interrupt_agent", {"caller": self.children[child], "agent_id": child}
        if pick < 0.75:
            return "agents/interrupt", {"agent_id": rng.choice(agents)}
        if pick < 0.80:
            return "agents/followup", {"agent_id": rng.choice(agents), "message": "follow"}
        if pick < 0.86 and self.children:
            return "report", {"caller": rng.choice(list(self.children)), "output": "found"}
        if pick < 0.89:
            return "agents/close", {"agent_id": rng.choice(self.roots)}
        if pick < 0.92 and self.acknowledged:
            return "messages/cancel", {"message_id": rng.choice(sorted(self.acknowledged))}
        return rng.choice(
            [
                ("ping", {}),
                ("agents/get", {"agent_id": rng.choice(agents)}),
                ("list_agents", {"caller": rng.choice(agents), "scope": "descendants"}),
            ]
        )

    def answered(self, method: str, params: dict[str, Any], reply: dict[str, Any]) -> None:
        result = reply.get("result")
        if result is None:
            return
        if method == "agents/open" and params["agent_id"] not in self.roots:
            self.roots.append(params["agent_id"])
        elif method == "agents/spawn":
            self.children[result["child_id"]] = params["caller"]
        elif method == "turns/end":
            self.turns.pop(params["agent_id"], None)
        if isinstance(result, dict) and "message_id" in result:
            self.acknowledged.add(result["message_id"])

    def noticed(self, note: dict[str, Any]) -> None:
        params = note["params"]
        if note["method"] == "turn/start":
            self.turns[params["agent_id"]] = params["turn_id"]
        elif note["method"] == "agent/settled":
            self.turns.pop(params["agent_id"], None)


STEPS = 60 * ROUNDS


def unpack_batches(host: Host) -> None:
    """Batch answers are filed by id like single ones."""
    read = host.next_frame

    def next_frame(timeout: float = TIMEOUT) -> Any:
        message = read(timeout)
        if isinstance(message, list):
            host.responses.update((r.get("id"), r) for r in message)
        return message

    host.next_frame = next_frame  # type: ignore[method-assign]


@pytest.mark.timeout(120 + 20 * ROUNDS)
def test_memory_agrees_with_storage_after_lost_groups_randomized(tmp_path, record_property):
    rng = random.Random(SEED)
    path = str(tmp_path / "random.db")
    store, faulty = faulty_store(path)
    server = InProcessServer(store=store, interrupt_grace=600.0)
    host = server.host
    unpack_batches(host)
    host.initialize()
    committed = SqliteStore(path)  # a second connection: sees only what was committed
    service = server.service
    model = WireModel(rng)
    sent: list[Any] = []
    refused = 0
    succeeded: collections.Counter = collections.Counter()
    try:
        for _ in range(STEPS):
            if rng.random() < 0.4:
                faulty.plan = (rng.choice(FaultyConnection.MODES), rng.randrange(4))
            requests = [model.request() for _ in range(rng.randint(1, 12))]
            frames = [
                {"jsonrpc": "2.0", "id": f"q{len(sent) + i}", "method": m, "params": p}
                for i, (m, p) in enumerate(requests)
            ]
            sent += frames
            if rng.random() < 0.3 and all(f["method"] != "agents/close" for f in frames):
                host.send(frames)  # a batch (a waiting close would hold back all its answers)
            else:
                host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
            for frame in frames:
                if frame["method"] == "agents/close":
                    continue  # may wait for its drain; counted at the end
                reply = host.response(frame["id"], WAIT)
                refused += reply.get("error", {}).get("code") == 1012
                succeeded[frame["method"]] += "result" in reply
                model.answered(frame["method"], frame["params"], reply)
            host.call("ping")  # everything before it was handled and its group committed
            for note in host.drain_notifications():
                model.noticed(note)
            faulty.plan = None
            registry = list(service.agents.registry)
            assert live_view(registry) == stored_view(committed.live_agents(service.agents.owner))
            interrupted = {a.turn.turn_id for a in registry if a.turn and a.turn.interrupted}
            assert set(service.scheduler._grace) == interrupted
            assert all(
                service.agents.registry.get(root).disposing for root in service.agents.closing
            )
            stored = set(
                r[0] for r in committed.conn.execute("SELECT message_id FROM inbox").fetchall()
            )
            assert model.acknowledged <= stored, model.acknowledged - stored
    finally:
        faulty.plan = None
        server.stop()
        committed.close()
    counts = replies_by_id(host)
    assert all(counts[f["id"]] == 1 for f in sent), [f for f in sent if counts[f["id"]] != 1]
    summary = {
        "seed": SEED,
        "requests": len(sent),
        "refused": refused,
        "faults": faulty.failures,
        "succeeded": dict(succeeded),
    }
    for key, value in summary.items():
        record_property(key, value)
    print(f"\nrandomized lost groups: {json.dumps(summary)}")
    assert faulty.failures > 0 and refused > 0, summary


def test_when_the_live_state_cannot_be_read_back_the_server_stops_through_shutdown(
    tmp_path, caplog
):
    store, faulty = faulty_store(str(tmp_path / "gone.db"))
    server = InProcessServer(store=store)
    host = server.host
    host.initialize()
    host.open("root")

    def unreadable(owner: str) -> list[LiveRecord]:
        raise sqlite3.DatabaseError("database disk image is malformed")

    store.live_agents = unreadable
    faulty.plan = ("commit", 0)
    reply = host.response(host.start("agents/open", {"agent_id": "other"}))
    assert reply["error"]["code"] == 1012
    with pytest.raises(EOFError):  # the connection shut down: stdout closed
        host.read_any()
    server.thread.join(WAIT)
    assert not server.thread.is_alive()
    assert "cannot rebuild the live state from the database; shutting down" in caplog.text
    assert server.connection.exit_code == 1  # `serve` exits with it: never 0 for this stop
    server.stop()


# --- the store itself ---------------------------------------------------------------------


def test_a_failed_commit_rolls_the_group_back_and_the_store_works_again(tmp_path):
    store, faulty = faulty_store(str(tmp_path / "s.db"))
    store.insert_message("kept", "a", "[]", "{}", "queued", "t")
    store.commit()
    with store.atomic():
        store.insert_message("lost", "a", "[]", "{}", "queued", "t")
    faulty.plan = ("commit", 0)
    with pytest.raises(StorageFailedError) as failure:
        store.commit()
    assert failure.value.data == {"reason": "io"}
    assert not store.conn.in_transaction
    with store.atomic():
        store.insert_message("later", "a", "[]", "{}", "queued", "t")
    store.commit()
    assert [r[0] for r in store.conn.execute("SELECT message_id FROM inbox")] == ["kept", "later"]


def test_a_group_sqlite_rolled_back_behind_our_back_is_never_reported_committed(tmp_path):
    store, faulty = faulty_store(str(tmp_path / "s.db"))
    with store.atomic():
        store.insert_message("lost", "a", "[]", "{}", "queued", "t")
    faulty.plan = ("read-rollback", 0)
    with pytest.raises(sqlite3.OperationalError):
        store.get_message("lost")  # a read failed, and SQLite dropped the whole transaction
    with pytest.raises(StorageFailedError):  # the next writer learns it at once
        with store.atomic():
            pass
    with pytest.raises(StorageFailedError):  # and so does the commit
        store.commit()
    store.commit()  # reported once; the next group starts clean
    assert store.get_message("lost") is None


def test_deferred_rows_that_fail_to_run_lose_their_whole_group_never_only_themselves(tmp_path):
    store, faulty = faulty_store(str(tmp_path / "s.db"))
    with store.atomic():
        store.claim_message("none", None)  # a statement of the group's first request
        store.insert_message("deferred", "a", "[]", "{}", "queued", "t")
    faulty.plan = ("write-statement", 0)  # the rows fail, SQLite keeps the transaction open
    with pytest.raises(sqlite3.OperationalError):
        store.get_message("deferred")  # a read outside any request runs the deferred rows
    with pytest.raises(StorageFailedError) as failure:  # the group is never committed
        store.commit()
    assert failure.value.data == {"reason": "io"}
    with store.atomic():  # the next group starts clean
        store.insert_message("later", "a", "[]", "{}", "queued", "t")
    store.commit()
    assert [r[0] for r in store.conn.execute("SELECT message_id FROM inbox")] == ["later"]


def test_a_write_refused_for_another_process_lock_is_busy_without_waiting_again(tmp_path):
    path = str(tmp_path / "s.db")
    store = SqliteStore(path)
    store.limit_lock_wait(50)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StorageBusyError) as busy:
            with store.atomic():
                pass
        assert busy.value.data == {"reason": "busy"}
        for _ in range(20):  # after one refusal, the next attempts do not wait at all
            with pytest.raises(StorageBusyError):
                with store.atomic():
                    pass
        assert time.monotonic() - started < 2.0
        assert store.get_message("x") is None  # reads are not blocked
    finally:
        other.execute("ROLLBACK")
        other.close()
    with store.atomic():
        store.insert_message("m", "a", "[]", "{}", "queued", "t")
    store.commit()


# --- busy and duplicate waiting ids over the wire ------------------------------------------


def test_a_write_blocked_by_another_process_lock_is_answered_busy_and_other_work_goes_on(
    tmp_path,
):
    db = str(tmp_path / "busy.db")
    # a write waits up to --lock-wait-ms for the lock (tests/processes/test_lock_wait.py), then is refused
    proc = ServerProcess("--max-queued=0", "--lock-wait-ms=200", db=db, preexec_fn=ignore_sigxfsz)
    host = proc.host
    host.initialize()
    other = sqlite3.connect(db, isolation_level=None)
    try:
        host.open("root")
        host.spawn("root", "c1")
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        started = time.monotonic()
        ids = []
        for i in range(40):
            ids.append(
                host.start(
                    "send_message", {"caller": "root", "subagent_id": "c1", "message": f"m{i}"}
                )
            )
            ids.append(host.start("ping"))
            ids.append(host.start("agents/get", {"agent_id": "c1"}))
        tool = host.start(
            "tools/call",
            {
                "name": "send_message",
                "arguments": {"subagent_id": "c1", "message": "t"},
                "_meta": {"subagentd/caller": "root"},
            },
        )
        replies = [host.response(i) for i in ids]
        tool_reply = host.response(tool)
        elapsed = time.monotonic() - started
        for write, ping, get in zip(replies[::3], replies[1::3], replies[2::3], strict=True):
            assert write["error"]["code"] == 1011, write
            assert write["error"]["data"]["reason"] == "busy"
            assert ping["result"] == {}
            assert get["result"]["queued"] == 0
        assert tool_reply["error"]["code"] == 1011 and tool_reply["error"]["data"]["reason"] == (
            "busy"
        )
        # 41 refused writes, without 200 ms each: after the first wait, none waits again
        assert elapsed < 5.0, elapsed
        other.execute("ROLLBACK")
        host.tool("send_message", "root", subagent_id="c1", message="after")
        assert host.call("agents/get", {"agent_id": "c1"})["queued"] == 1
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()
        assert proc.stop() == 0


def test_a_second_waiting_close_with_the_same_id_is_refused_and_the_first_is_answered(server):
    host = server.host
    host.open("root")
    host.open("other")
    turn = host.spawn("root", "c1")["turn_id"]
    host.spawn("other", "d1")
    host.send(
        {"jsonrpc": "2.0", "id": "dup", "method": "agents/close", "params": {"agent_id": "root"}}
    )
    host.notification("turn/interrupt", agent_id="c1")
    host.send(
        {"jsonrpc": "2.0", "id": "dup", "method": "agents/close", "params": {"agent_id": "other"}}
    )
    refused = host.response("dup")
    assert refused["error"] == {
        "code": -32600,
        "message": 'Invalid Request: id "dup" is already used by a request that is still waiting',
    }
    assert host.call("agents/get", {"agent_id": "d1"})["status"] == "running"  # not closing
    # the same inside one batch: the second is refused at once, the first waits
    host.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "b",
                "method": "agents/close",
                "params": {"agent_id": "other"},
            },
            {
                "jsonrpc": "2.0",
                "id": "b",
                "method": "agents/close",
                "params": {"agent_id": "other"},
            },
        ]
    )
    host.notification("turn/interrupt", agent_id="d1")
    host.end_turn("c1", turn)
    assert host.response("dup")["result"] == {}
    host.end_turn("d1", host_turn(server, "d1"))  # the batch's answer is written before its own
    batches = [json.loads(line) for line in host.raw if line.startswith(b"[")]
    assert len(batches) == 1
    batch = batches[0]
    assert batch[0] == {"jsonrpc": "2.0", "id": "b", "result": {}}
    assert batch[1]["error"]["code"] == -32600
    host.settle_quietly()
    assert replies_by_id(host)["dup"] == 2  # the refusal and the one answer


def host_turn(server: InProcessServer, agent_id: str) -> str:
    agent = server.service.agents.registry.get(agent_id)
    assert agent is not None and agent.turn is not None
    return agent.turn.turn_id


def test_a_batch_whose_waiting_close_completes_inside_the_same_batch_is_answered(server):
    host = server.host
    host.open("root")
    turn = host.spawn("root", "c1")["turn_id"]
    host.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "close",
                "method": "agents/close",
                "params": {"agent_id": "root"},
            },
            {
                "jsonrpc": "2.0",
                "id": "end",
                "method": "turns/end",
                "params": {"agent_id": "c1", "turn_id": turn, "reason": "completed"},
            },
        ]
    )
    batch = host.read_any()
    while not isinstance(batch, list):
        batch = host.read_any()
    assert batch == [
        {"jsonrpc": "2.0", "id": "close", "result": {}},
        {"jsonrpc": "2.0", "id": "end", "result": {}},
    ]


# --- the ledger of owed replies -------------------------------------------------------------


def ledger() -> Ledger:
    return Ledger(lambda message: json.dumps(message).encode(), lambda size: None)


def lost_answer(request_id: Any) -> dict[str, Any]:
    return {"id": request_id, "error": "STORAGE_FAILED"}


def waiting_close(book: Ledger, request_id: str) -> tuple[Pending, Deferred]:
    deferred = Deferred({})
    pending = Pending(request_id, deferred, False, book.generation)
    book.pending[request_id] = pending
    book.wait(Owed([pending]))
    return pending, deferred


def test_a_close_admitted_alone_in_a_committed_group_is_not_failed_by_a_later_lost_group():
    book = ledger()
    pending, deferred = waiting_close(book, "close")
    assert book.committed() == ([], 0)  # the admission has no frame of its own
    book.reply({"jsonrpc": "2.0", "id": "x", "result": {}})
    assert book.answer_lost(lost_answer) == [{"id": "x", "error": "STORAGE_FAILED"}]
    assert book.pending == {"close": pending}
    deferred.complete()
    assert json.loads(book.frames[-1]) == {"jsonrpc": "2.0", "result": {}, "id": "close"}


def test_a_close_completed_in_a_lost_group_waits_again_and_is_answered_once_later():
    book = ledger()
    pending, deferred = waiting_close(book, "close")
    book.committed()
    deferred.complete()  # its drain completed in this group...
    book.reply({"jsonrpc": "2.0", "id": "end", "result": {}})
    assert book.answer_lost(lost_answer) == [{"id": "end", "error": "STORAGE_FAILED"}]
    assert not deferred.done and book.pending == {"close": pending}  # ...which was lost
    deferred.complete()
    frames, _ = book.committed()
    assert [json.loads(f) for f in frames] == [{"jsonrpc": "2.0", "result": {}, "id": "close"}]
    assert book.pending == {}


def test_a_close_admitted_in_a_lost_group_is_answered_storage_failed_and_forgotten():
    book = ledger()
    pending, deferred = waiting_close(book, "close")
    assert book.answer_lost(lost_answer) == [{"id": "close", "error": "STORAGE_FAILED"}]
    assert book.pending == {} and deferred.on_done is None
    deferred.complete()
    assert book.frames == []


def test_a_wait_admitted_in_a_lost_group_stops_waiting_so_it_consumes_nothing():
    book = ledger()
    pending, deferred = waiting_close(book, "wait")
    stopped: list[str] = []
    deferred.on_cancel = lambda: stopped.append("cancelled")
    assert book.answer_lost(lost_answer) == [{"id": "wait", "error": "STORAGE_FAILED"}]
    assert stopped == ["cancelled"] and book.pending == {}


def test_a_wait_answered_in_a_lost_group_is_waited_for_again():
    book = ledger()
    pending, deferred = waiting_close(book, "wait")
    book.committed()
    rearmed: list[str] = []
    deferred.on_undone = lambda: rearmed.append("again")
    deferred.complete()  # answered (what it consumed is in this group)...
    assert book.answer_lost(lost_answer) == []
    assert rearmed == ["again"] and book.pending == {"wait": pending}  # ...rolled back: again


def test_a_rebuild_keeps_what_is_derived_not_stored_adoption_tool_filter_and_held_root():
    """Owner after an adoption, a child's tool_filter and the --caller root's hold are not lease
    columns: a rebuild must derive them again, and a lost group must not keep its adoption."""
    from subagentd.schema.messages import ToolFilter

    core = CoreHost()
    core.svc.host.open(OpenParams(agent_id="root"), hold=True)
    core.spawn("root", "once", mode="one-shot")
    core.spawn("once", "late", tool_filter=ToolFilter(allow=["report"]))
    core.svc.commit()
    core.end("once", "completed", "done")  # once is disposed: late is adopted by root
    core.svc.commit()
    svc = core.svc

    def derived() -> dict[str, tuple]:
        return {a.agent_id: (a.owner_id, a.tools, a.held) for a in svc.agents.registry}

    expected = {
        "root": (None, None, True),
        "late": ("root", frozenset({"report"}), False),
    }
    assert derived() == expected
    svc.recovery.rebuild()  # a committed state: nothing may change
    assert derived() == expected
    assert svc.agents.registry.has_live_children(svc.agents.registry.get("root"))

    # a group that adopts is lost: the one-shot is back as late's owner
    core2 = CoreHost()
    core2.open("root")
    core2.spawn("root", "once", mode="one-shot")
    core2.spawn("once", "late")
    core2.svc.commit()
    core2.end("once", "completed", "done")  # not committed: the group is lost
    assert core2.svc.agents.registry.get("late").owner_id == "root"
    core2.svc.recovery.rebuild()
    assert core2.svc.agents.registry.get("once") is not None
    assert core2.svc.agents.registry.get("late").owner_id == "once"
