"""`prune` in short batches on both backends: a big history goes one bounded write transaction at
a time, with the writer lock free in between (measured by a concurrent writer's wait, counted in
rows deleted while it waited); a tree that wakes up between batches keeps the rest of its rows;
and beside two busy servers nothing live, queued or parked is deleted.

Longer than ~300 lines on purpose: the three checks share one helper for both backends' plain
connections and lock probes, kept beside them."""

from __future__ import annotations

import sqlite3
import threading
import time

import psycopg
import pytest

from subagentd.storage.postgres.connection import to_psycopg
from subagentd.storage.postgres.group import WRITER_LOCK
from subagentd.storage.prune import SqliteTarget, prune
from tests.spawned import TIMEOUT, ServerProcess

OLD = "2020-01-01T00:00:00.000000Z"


class Db:
    """One database of either backend, reached with plain connections of its own."""

    def __init__(self, kind: str, where: str) -> None:
        self.kind, self.where = kind, where

    def connect(self):
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.where, isolation_level=None, timeout=30)
            return conn
        return psycopg.connect(self.where, autocommit=True)

    def run(self, sql: str, params=(), *, many: bool = False) -> list[tuple]:
        conn = self.connect()
        try:
            text = sql if self.kind == "sqlite" else to_psycopg(sql)
            if many:
                if self.kind == "sqlite":
                    with conn:
                        conn.executemany(text, params)
                else:
                    with conn.transaction(), conn.cursor() as cursor:
                        cursor.executemany(text, params)
                return []
            cursor = conn.execute(text, params)
            return cursor.fetchall() if cursor.description else []
        finally:
            conn.close()

    def try_lock(self, conn) -> bool:
        """Take the writer lock without waiting (as a serving process does); False when held."""
        if self.kind == "sqlite":
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return False
            return True
        conn.execute("BEGIN")
        if conn.execute(f"SELECT pg_try_advisory_xact_lock({WRITER_LOCK})").fetchone()[0]:
            return True
        conn.execute("ROLLBACK")
        return False

    def target(self):
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.where, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 10000")
            return SqliteTarget(conn)
        from subagentd.storage.postgres.reading import PgTarget, connect

        return PgTarget(connect(self.where, read_only=False), 10_000)

    def counts(self, ids: list[str]) -> tuple[int, int]:
        marks = ",".join("?" * len(ids))
        events = self.run(f"SELECT count(*) FROM events WHERE session_id IN ({marks})", ids)
        inbox = self.run(f"SELECT count(*) FROM inbox WHERE session_id IN ({marks})", ids)
        return int(events[0][0]), int(inbox[0][0])


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path) -> Db:
    """A new, migrated database of each backend."""
    if request.param == "sqlite":
        from subagentd.storage.database import SqliteStore

        path = str(tmp_path / "big.db")
        SqliteStore(path).close()
        return Db("sqlite", path)
    return Db("postgres", request.getfixturevalue("pg_stores").url())


def old_tree(db: Db, root: str, events: int, messages: int) -> None:
    """A settled root written in 2020, with `events` events and `messages` delivered messages."""
    db.run(
        "INSERT INTO sessions (root_id, id, parent_id, kind, label, created_at, depth, parked)"
        " VALUES (?, ?, NULL, 'ordinary', NULL, ?, 0, 0)",
        (root, root, OLD),
    )
    db.run(
        "INSERT INTO events (root_id, session_id, turn_id, type, data, at)"
        " VALUES (?, ?, NULL, 'note', ?, ?)",
        [(root, root, '{"text": "' + "x" * 100 + '"}', OLD)] * events,
        many=True,
    )
    db.run(
        "INSERT INTO inbox (root_id, message_id, session_id, content, source, state, turn_id,"
        " created_at) VALUES (?, ?, ?, '[]', '{}', 'claimed', NULL, ?)",
        [(root, f"{root}-m{i}", root, OLD) for i in range(messages)],
        many=True,
    )


def test_a_big_prune_holds_the_writer_lock_one_batch_at_a_time(db):
    old_tree(db, "big", 3000, 400)
    old_tree(db, "second", 500, 100)
    total = 3000 + 400 + 500 + 100
    waits: list[
        tuple[int, int]
    ] = []  # (rows left when the writer began to wait, rows deleted meanwhile)
    done_flag = threading.Event()
    failures: list[BaseException] = []

    def left(conn) -> int:
        sql = "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM inbox)"
        return int(conn.execute(sql).fetchone()[0])

    def writer() -> None:
        """A serving process's writes: the lock tried every 2 ms, one short write, again."""
        conn = db.connect()
        try:
            n = 0
            while not done_flag.is_set():
                before = left(conn)
                while not db.try_lock(conn):
                    time.sleep(0.002)
                waits.append((before, before - left(conn)))
                n += 1
                conn.execute(
                    to_psycopg(_KEY_SQL) if db.kind == "postgres" else _KEY_SQL, (f"k{n}", OLD)
                )
                conn.execute("COMMIT")
                time.sleep(0.001)
        except BaseException as exc:  # reported by the test
            failures.append(exc)
        finally:
            conn.close()

    target = db.target()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        done = prune(target, 86400, batch_rows=200)
    finally:
        done_flag.set()
        thread.join(TIMEOUT)
        target.conn.close()
    assert not failures, failures
    assert (done.trees, done.events, done.messages) == (2, 3500, 500)
    during = [(before, deleted) for before, deleted in waits if 0 < before < total]
    assert len(during) >= 3, waits  # the writer wrote while the prune ran
    # no write waited through more than a batch or two (the rows are counted from before its
    # first try, so a scheduler's delay of the writer thread adds one); one transaction per tree
    # made a write wait through 3,400 rows here
    assert max(deleted for _, deleted in waits) <= 3 * 200, waits
    # full batches, then the one that found the rest (or nothing: a last batch exactly full)
    assert done.batches == (3400 // 200 + 1) + (600 // 200 + 1) == 22
    assert db.counts(["big", "second"]) == (0, 0)


def test_the_writer_lock_is_free_after_every_batch_commits(db):
    old_tree(db, "big", 450, 0)
    probe = db.connect()
    free: list[bool] = []

    def after_batch(n: int) -> None:  # taken at once, without waiting, by another connection
        got = db.try_lock(probe)
        free.append(got)
        if got:
            probe.execute("ROLLBACK")

    target = db.target()
    try:
        done = prune(target, 86400, batch_rows=100, after_batch=after_batch)
    finally:
        target.conn.close()
        probe.close()
    assert (done.events, done.batches) == (450, 5)
    assert free == [True] * 5


_KEY_SQL = (
    "INSERT INTO idempotency (caller, key, method, fingerprint, result, created_at)"
    " VALUES ('writer', ?, 'm', 'f', 'r', ?)"
)


def test_a_tree_that_wakes_between_batches_keeps_the_rest_of_its_rows(db):
    old_tree(db, "big", 1000, 0)
    srv = ServerProcess(db=db.where)
    try:
        host = srv.host
        host.initialize()
        target = db.target()
        woke: list[int] = []

        def after_batch(n: int) -> None:
            if n == 1:
                host.open("big")  # a server activates the tree between two batches
                woke.append(n)

        try:
            done = prune(target, 86400, batch_rows=100, after_batch=after_batch)
        finally:
            target.conn.close()
        assert woke == [1]
        assert (done.trees, done.events, done.messages, done.batches) == (1, 100, 0, 2)
        events, _ = db.counts(["big"])
        assert events >= 900  # the 900 it did not reach, and what the activation wrote
        assert host.call("agents/get", {"agent_id": "big"})["status"] == "idle"
    finally:
        assert srv.stop() == 0


def test_prune_beside_two_busy_servers_keeps_what_is_live_queued_or_parked(db):
    trees = {
        "old": ["old", "old-c"],
        "queued": ["queued"],
        "parked": ["parked", "parked-c"],
        "live": ["live"],
        "busy": ["busy"],
    }
    first = ServerProcess(db=db.where)
    try:
        host = first.host
        host.initialize()
        host.open("old")
        spawned = host.spawn("old", "old-c", mode="one-shot")
        host.end_turn("old-c", spawned["turn_id"], "completed", "done")
        host.notification("agent/settled", agent_id="old-c")
        host.call("agents/close", {"agent_id": "old"})
        host.open("queued")
        host.call("agents/close", {"agent_id": "queued"})
        host.call("agents/followup", {"agent_id": "queued", "message": "for later"})
        host.open("parked")
        host.spawn("parked", "parked-c", prompt="wait")
        for text in ("first", "second"):
            host.tool("send_message", "parked", subagent_id="parked-c", message=text)
        host.tool("interrupt_agent", "parked", agent_id="parked-c")
        stop = host.notification("turn/interrupt", agent_id="parked-c")
        host.end_turn("parked-c", stop["turn_id"], "aborted")
        host.open("live")
    finally:
        assert first.stop() == 0
    every = [i for ids in trees.values() for i in ids if i != "busy"]
    marks = ",".join("?" * len(every))
    for sql in (
        f"UPDATE sessions SET created_at = ? WHERE id IN ({marks})",
        f"UPDATE events SET at = ? WHERE session_id IN ({marks})",
        f"UPDATE inbox SET created_at = ? WHERE session_id IN ({marks})",
    ):
        db.run(sql, (OLD, *every))
    assert db.run("SELECT count(*) FROM inbox WHERE state = 'parked'")[0][0] == 2

    holder, busy = ServerProcess(db=db.where), ServerProcess(db=db.where)
    stop_busy = threading.Event()
    written: list[int] = []
    try:
        holder.host.initialize()
        busy.host.initialize()
        holder.host.open("live")  # live again, its rows aged again below
        db.run(f"UPDATE events SET at = ? WHERE session_id IN ({marks})", (OLD, *every))
        busy.host.open("busy")
        before = {root: db.counts(ids) for root, ids in trees.items()}

        def keep_writing() -> None:
            n = 0
            while not stop_busy.is_set():
                n += 1
                busy.host.call(
                    "transcript/append", {"agent_id": "busy", "events": [{"type": "note", "n": n}]}
                )
                holder.host.call(
                    "transcript/append", {"agent_id": "live", "events": [{"type": "note"}]}
                )
            written.append(n)

        thread = threading.Thread(target=keep_writing)
        thread.start()
        try:
            target = db.target()
            try:
                done = prune(target, 30 * 86400, batch_rows=2)  # many batches among the writes
            finally:
                target.conn.close()
        finally:
            stop_busy.set()
            thread.join(TIMEOUT)
        assert written and written[0] > 0
        assert done.trees == 1 and done.batches > 3
        after = {root: db.counts(ids) for root, ids in trees.items()}
        assert after["old"] == (0, 0) and before["old"][0] > 0
        assert after["queued"] == before["queued"] and after["queued"][1] == 1
        assert after["parked"] == before["parked"]
        assert after["live"][0] >= before["live"][0] and after["busy"][0] >= before["busy"][0]
        parked = db.run("SELECT count(*) FROM inbox WHERE state = 'parked'")[0][0]
        assert parked == 2
        assert holder.host.call("agents/get", {"agent_id": "live"})["status"] == "idle"
        assert busy.host.call("agents/get", {"agent_id": "busy"})["status"] == "idle"
    finally:
        assert holder.stop() == 0
        assert busy.stop() == 0


def test_a_prune_on_postgresql_waits_only_for_groups_writing_the_tree_it_deletes_from(pg_stores):
    """Each batch takes its tree's lock (postgres/group.py): a serving group writing another tree
    holds up no batch; one writing the pruned tree holds up that tree's batches only."""
    from subagentd.storage.postgres.group import TREE_LOCKS, tree_key
    from tests.processes.test_tree_locks import as_oid, tree_group, waiting_locks

    db = Db("postgres", pg_stores.url())
    old_tree(db, "alpha", 300, 0)
    old_tree(db, "busy", 300, 0)
    target = db.target()
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(prune(target, 86400, batch_rows=100, pause=0))
        except Exception as exc:  # the test reports it
            outcome.append(exc)

    seen: list = []
    try:
        with tree_group(db.where, "busy"):  # a group writing tree busy stays open
            pruner = threading.Thread(target=run)
            pruner.start()
            wanted = (TREE_LOCKS, as_oid(tree_key("busy")), 2)
            deadline = time.monotonic() + TIMEOUT
            while (
                wanted not in seen
            ):  # alpha's batches first (roots in order), then it waits for busy's lock
                assert time.monotonic() < deadline, "the prune never waited for tree busy"
                seen = waiting_locks(db.where)
                assert seen in ([], [wanted]), seen  # never for anything else
                time.sleep(0.01)
            assert db.counts(["alpha"]) == (0, 0)  # done while busy's group was open
            assert db.counts(["busy"]) == (300, 0)
        pruner.join(TIMEOUT)
    finally:
        target.conn.close()
    (done,) = outcome
    assert (done.trees, done.events) == (2, 600), done
    assert db.counts(["busy"]) == (0, 0)
