"""Waiting for PostgreSQL's writer lock in its own lock queue (storage/postgres/lockqueue.py,
wire/lockwait.py): a waiter is served before the holder's next group, the event loop serves
on meanwhile, and the connection lent to the wait comes back clean whatever ends the wait (its
patience, a cancelled waiter, a statement the loop needs, a lost connection); a group that
held the lock long lets it go before its next frame, and a process's tasks wait in it once.

Real stores on a real PostgreSQL 15; the order of acquisition is read from a table the groups
write, never from timings.
"""

from __future__ import annotations

import threading
import time

import anyio
import psycopg
import pytest

from subagentd.errors import StorageBusyError, StorageFailedError
from subagentd.storage.postgres import group as group_module
from subagentd.storage.postgres.group import WRITER_LOCK
from subagentd.storage.postgres.store import PostgresStore
from subagentd.wire.lockwait import LOCK_WAITS, wait_for_lock

WAITING = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s"
    " AND objid = %s"
)


@pytest.fixture
def shared(pg_stores):
    """Two processes' stores on one database with a table their groups append to, and a third
    connection that watches (autocommit)."""
    mine, theirs = pg_stores("shared"), pg_stores("shared")
    watcher = psycopg.connect(pg_stores.url("shared"), autocommit=True)
    watcher.execute("CREATE TABLE lock_order (id bigserial PRIMARY KEY, who text NOT NULL)")
    yield mine, theirs, watcher
    watcher.close()


def append(store: PostgresStore, who: str) -> None:
    """One group of `store` that writes one row, committed (the lock taken ahead, or not)."""
    with store.atomic():
        store.conn.execute("INSERT INTO lock_order (who) VALUES (?)", (who,))
    store.commit()


def order(watcher: psycopg.Connection) -> list[str]:
    return [who for (who,) in watcher.execute("SELECT who FROM lock_order ORDER BY id")]


def waiting(watcher: psycopg.Connection, store: PostgresStore, pid: int) -> bool:
    return watcher.execute(WAITING, (pid, WRITER_LOCK)).fetchone() == (1,)


async def queued(watcher: psycopg.Connection, store: PostgresStore, pid: int) -> None:
    """Until `store`'s connection (server process `pid`) waits in the writer lock's queue."""
    with anyio.fail_after(30):
        while not waiting(watcher, store, pid):
            await anyio.sleep(0.001)


class BackToBack(threading.Thread):
    """Another process writing groups back to back: each takes the lock ahead without waiting
    (as a serving process does), writes a row and commits, then at once the next one. Its first
    group holds the lock until `go` is set."""

    def __init__(self, store: PostgresStore, groups: int) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.groups = groups
        self.held = threading.Event()  # its first group holds the lock
        self.go = threading.Event()

    def run(self) -> None:
        store = self.store
        assert store.take_lock()
        with store.atomic():
            store.conn.execute("INSERT INTO lock_order (who) VALUES ('theirs')")
        self.held.set()
        self.go.wait()
        store.commit()
        for _ in range(self.groups - 1):
            while not store.take_lock():
                pass
            append(store, "theirs")


def test_a_waiter_is_served_before_the_holders_next_group(shared):
    mine, theirs, watcher = shared
    pid = mine.conn.raw.info.backend_pid
    holder = BackToBack(theirs, 200)
    holder.start()
    assert holder.held.wait(30)

    async def scenario() -> None:
        async def release() -> None:  # on the loop, while mine waits: the loop is free
            with anyio.move_on_after(2.0):  # (waiting by polling, mine never shows in pg_locks)
                while not waiting(watcher, mine, pid):
                    await anyio.sleep(0.001)
            holder.go.set()  # theirs commits and writes its next groups back to back

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            await wait_for_lock(mine, 30.0)
        assert mine.dirty  # the wait opened the group: the lock is held
        append(mine, "mine")

    try:
        anyio.run(scenario)
    finally:
        holder.go.set()
        holder.join(60)
    rows = order(watcher)
    assert rows.index("mine") == 1, rows[:10]  # served right after the group it queued behind
    assert len(rows) == 201


def test_a_wait_past_its_patience_is_given_up_and_the_next_write_is_refused_at_once(shared):
    mine, _, watcher = shared
    before = LOCK_WAITS.figures()
    with psycopg.connect(watcher.info.dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
        anyio.run(wait_for_lock, mine, 0.2)
        after = LOCK_WAITS.figures()
        assert (after.count - before.count, after.gave_up - before.gave_up) == (1, 1)
        assert after.max_ms >= 200
        assert not mine.conn.in_transaction  # the lent connection is back, nothing open
        assert mine.take_lock() is True  # given up: the write that follows is refused, not waited
        with pytest.raises(StorageBusyError):
            append(mine, "mine")
        other.rollback()
    append(mine, "mine")
    assert order(watcher) == ["mine"]


def test_a_cancelled_waiter_lets_the_lock_go(shared):
    mine, theirs, watcher = shared
    pid = mine.conn.raw.info.backend_pid
    with psycopg.connect(watcher.info.dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))

        async def scenario() -> None:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait_for_lock, mine, 30.0)
                    await queued(watcher, mine, pid)
                    scope.cancel()  # shutdown, say, while it waits in the queue

        anyio.run(scenario)
        assert not waiting(watcher, mine, pid)
        assert not mine.conn.in_transaction
        other.rollback()
    assert theirs.take_lock() is True  # nothing of mine holds the lock
    append(theirs, "theirs")
    append(mine, "mine")
    assert order(watcher) == ["theirs", "mine"]


def test_a_statement_the_loop_needs_meanwhile_ends_the_wait_which_queues_again(shared):
    mine, _, watcher = shared
    pid = mine.conn.raw.info.backend_pid
    with psycopg.connect(watcher.info.dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))
        read: list[object] = []

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_lock, mine, 30.0)
                await queued(watcher, mine, pid)
                read.append(mine.get_session("nobody"))  # a read on the loop: answered now
                await queued(watcher, mine, pid)  # the waiter queued again
                with pytest.raises(StorageBusyError):  # a write not taken ahead: retried later
                    append(mine, "not now")
                assert waiting(watcher, mine, pid)  # which left the wait alone
                other.rollback()

        anyio.run(scenario)
    assert read == [None]
    append(mine, "mine")  # in the group the wait opened
    assert order(watcher) == ["mine"]


def test_a_connection_lost_while_waiting_fails_the_write_and_is_made_anew(shared):
    mine, _, watcher = shared
    mine.limit_lock_wait(50)  # serving: a write not taken ahead waits 50 ms
    pid = mine.conn.raw.info.backend_pid
    with psycopg.connect(watcher.info.dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_lock, mine, 30.0)
                await queued(watcher, mine, pid)
                watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))

        anyio.run(scenario)  # the wait ends: nothing raised, the event loop goes on
        assert mine.conn.reclaim is None
        # refused: failed with the lost connection, or busy on the new one a thread made at once
        with pytest.raises((StorageFailedError, StorageBusyError)):
            append(mine, "lost")
        other.rollback()
    for _ in range(100):  # a thread makes the new connection; the heartbeat takes it
        if mine.check_file() and not mine.conn.lost:
            break
        threading.Event().wait(0.05)
    append(mine, "mine")
    assert order(watcher) == ["mine"]


def test_a_group_that_held_the_lock_past_the_hold_limit_lets_it_go_before_its_next_frame(
    shared, monkeypatch
):
    mine, _, watcher = shared
    assert mine.take_lock_for_frame() is True  # no group open: the lock is taken
    monkeypatch.setattr(group_module, "HOLD_LIMIT", 3600.0)
    assert mine.take_lock_for_frame() is True  # held briefly: the group goes on
    monkeypatch.setattr(group_module, "HOLD_LIMIT", 0.0)
    assert mine.take_lock_for_frame() is False  # held long: the connection commits first
    assert mine.dirty  # nothing was let go behind the connection's back
    append(mine, "mine")  # (the write that frame makes, in the group still open)
    assert mine.take_lock_for_frame() is True  # committed: a new group, the lock taken again
    mine.commit()
    assert order(watcher) == ["mine"]


def test_the_other_tasks_that_need_the_lock_meanwhile_wait_with_the_one_wait(shared):
    mine, _, watcher = shared
    pid = mine.conn.raw.info.backend_pid
    before = LOCK_WAITS.figures()
    took: list[str] = []
    with psycopg.connect(watcher.info.dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))

        async def task(name: str) -> None:
            await wait_for_lock(mine, 30.0)
            took.append(name)
            with mine.atomic():  # as run_work: in the group the one wait opened
                mine.conn.execute("INSERT INTO lock_order (who) VALUES (?)", (name,))

        async def scenario() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(task, "reader")
                await queued(watcher, mine, pid)
                tg.start_soon(task, "timer")
                tg.start_soon(task, "doorbell")
                await anyio.sleep(0.05)
                assert waiting(watcher, mine, pid)  # still the one wait in the queue
                other.rollback()

        anyio.run(scenario)
    mine.commit()
    assert sorted(took) == ["doorbell", "reader", "timer"]
    assert sorted(order(watcher)) == ["doorbell", "reader", "timer"]
    after = LOCK_WAITS.figures()
    assert (after.count - before.count, after.gave_up - before.gave_up) == (3, 0)


def test_a_groups_kept_reads_serve_only_the_trees_it_holds_the_lock_of(shared):
    """Per-tree writers: rows a request of tree a kept stay a's; a request of tree b, whose
    lock the group cannot take (another group writes b), commits the group and waits for b's
    lock holding none; holding every tree's lock, one set of kept reads serves all."""
    from subagentd.storage.postgres.group import TREE_LOCKS

    mine, theirs, watcher = shared
    group = mine.group
    mine.set_scope("a")
    with mine.atomic():
        kept_a = group.reads()
        kept_a["row", 1] = "a's"
    assert group.reads() is kept_a  # tree a's lock is held: its rows stay kept
    mine.set_scope("b")
    assert group.reads() is None  # b's lock is not held: nothing of b, nor of a, is served
    theirs.set_scope("b")
    with theirs.atomic():  # another process's group writes tree b
        theirs.conn.execute("INSERT INTO lock_order (who) VALUES ('theirs')")
        assert mine.dirty
        pid = mine.conn.raw.info.backend_pid
        done = threading.Event()

        def b_request() -> None:
            with mine.atomic():  # commits a's group first, then waits for b's lock
                mine.conn.execute("INSERT INTO lock_order (who) VALUES ('b')")
            done.set()

        waiter = threading.Thread(target=b_request)
        waiter.start()
        deadline = time.monotonic() + 30
        while not watcher.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted AND classid = %s",
            (pid, TREE_LOCKS),
        ).fetchone()[0]:
            assert time.monotonic() < deadline and not done.is_set()
            time.sleep(0.005)
    theirs.rollback()
    theirs.set_scope(None)
    waiter.join(30)
    assert done.is_set()
    assert group.reads() is not None and ("row", 1) not in group.reads()  # a new group
    mine.set_scope(None)
    with mine.atomic():  # every tree's lock: one set of kept reads for every request
        every = group.reads()
    mine.set_scope("b")
    assert group.reads() is every
    mine.set_scope(None)
    mine.commit()
    assert order(watcher) == ["b"]
