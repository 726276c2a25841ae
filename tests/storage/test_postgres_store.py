"""PostgresStore's own promises, where they differ in mechanism from SQLite's: the writer advisory
lock (busy refusal), a failed statement abandoning its group, BEGIN-time fencing (its read failing
as a failed write does), a commit-time renewal that never waits for the renewal thread's row lock,
and the LISTEN/NOTIFY doorbell that rings only once the sender's group committed, and the round
trips a group's requests and signals take.

Longer than ~300 lines on purpose: one module for PostgresStore's mechanisms, each test driving a
real server; split by mechanism they would repeat the same two-store setups."""

from __future__ import annotations

import select

import psycopg
import pytest

from subagentd.errors import LeaseLostError, StorageBusyError, StorageFailedError
from subagentd.schema.records import InboxCounts, InboxRecord, SessionRecord, SignalRow
from subagentd.storage.postgres.doorbell import Listener, channel_of
from subagentd.storage.postgres.group import WRITER_LOCK
from tests.core_host import FakeClock


def session(session_id: str) -> SessionRecord:
    return SessionRecord(
        id=session_id,
        parent_id=None,
        kind="root",
        label=None,
        created_at="2026-01-01T00:00:00Z",
        depth=0,
        parked=False,
        open_turn_id=None,
        last_reason=None,
        last_output=None,
    )


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def owner_and_sender(pg_stores):
    """Two processes' stores on one database, each holding its owner row; the owner's doorbell
    drained, and its fd."""
    owner, sender = pg_stores("shared"), pg_stores("shared")
    owner.hold("owner", 60.0, lambda: None)
    sender.hold("sender", 60.0, lambda: None)
    owner.drain_doorbell()
    fd = owner.doorbell()
    assert fd is not None
    return owner, sender, fd


def test_a_group_waits_for_another_writer_past_the_limit_as_a_busy_refusal(pg_stores):
    store = pg_stores(None)
    store.limit_lock_wait(50)
    with psycopg.connect(pg_stores.url(next(iter(pg_stores.databases)))) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITER_LOCK,))  # a group in progress
        for _ in range(2):  # the second attempt does not wait at all
            with pytest.raises(StorageBusyError):
                with store.atomic():
                    store.insert_session(session("a"))
            assert not store.dirty
        other.rollback()
    with store.atomic():
        store.insert_session(session("a"))
    store.commit()
    assert store.get_session("a") == session("a")


def test_a_failed_statement_abandons_the_whole_group(pg_stores):
    store = pg_stores(None)
    with store.atomic():
        store.insert_session(session("first"))  # another request's write in the same group
    with pytest.raises(StorageFailedError) as failed:
        with store.atomic():
            store.insert_session(session("first"))  # a duplicate key
    assert failed.value.data == {"reason": "error"}
    store.commit()  # nothing left to commit
    assert store.get_session("first") is None


def test_a_fenced_owner_writes_nothing_more_and_lets_go(pg_stores):
    clock, lost = FakeClock(), []
    mine, theirs = pg_stores("shared", clock), pg_stores("shared", clock)
    mine.hold("mine", 10.0, lambda: lost.append(True))
    theirs.hold("theirs", 10.0, lambda: None)
    clock.advance(11.0)
    with theirs.atomic():
        assert theirs.fence("mine", theirs.clock()) is True
    theirs.commit()
    with pytest.raises(LeaseLostError):
        with mine.atomic():
            mine.insert_session(session("late"))
    assert lost == [True]
    assert theirs.get_session("late") is None
    assert dict((o, f) for o, _, f in theirs.owners()) == {"mine": 1, "theirs": 0}


def test_a_commit_renewing_while_the_renewal_thread_holds_the_owner_row_neither_waits_nor_fails(
    pg_stores,
):
    """The renewal thread's UPDATE of the owner row may be in flight when a group's commit renews
    the same row (they run at the same cadence): the commit leaves the renewal to it instead of
    waiting for its row lock, which on a loaded machine could outlast the serving lock wait and
    lose the whole group."""
    clock = FakeClock()
    store = pg_stores("shared", clock)
    store.hold("mine", 15.0, lambda: None)
    store.limit_lock_wait(50)  # serving: a group waits this long for any lock
    clock.advance(6.0)  # over a third of the TTL spent: the next commit renews
    with psycopg.connect(pg_stores.url("shared")) as renewal:  # stands for the thread's UPDATE
        renewal.execute("UPDATE owners SET expires_at = %s WHERE owner = 'mine'", (clock() + 15,))
        with store.atomic():
            store.insert_session(session("a"))
        store.commit()  # before the renewal's COMMIT
        renewal.commit()
    assert store.get_session("a") == session("a")
    [(owner, expires_at, fenced)] = store.owners()
    assert (owner, expires_at, fenced) == ("mine", clock() + 15, 0)  # the renewal's, kept
    clock.advance(6.0)
    with store.atomic():
        store.insert_session(session("b"))
    store.commit()  # nothing holds the row now: the commit renews it itself
    assert store.owners() == [("mine", clock() + 15, 0)]


def test_a_fencing_check_the_database_fails_loses_the_group_as_a_storage_failure(pg_stores):
    """The owner row read before a group's first write (a lease not known to be valid) is a
    write like any other: failed by the database, the group is abandoned, refused 1012."""
    clock = FakeClock()
    store = pg_stores("shared", clock)
    store.hold("mine", 60.0, lambda: None)
    store.limit_lock_wait(50)
    clock.advance(61.0)  # expired as far as this process knows: the row is read under the lock
    with psycopg.connect(pg_stores.url("shared")) as other:
        other.execute("LOCK TABLE owners IN ACCESS EXCLUSIVE MODE")  # the read waits past 50 ms
        with pytest.raises(StorageFailedError) as failed:
            with store.atomic():
                store.insert_session(session("a"))
        assert failed.value.data == {"reason": "error"}
        assert not store.dirty
    with store.atomic():  # the row is read again, and the write applied
        store.insert_session(session("a"))
    store.commit()
    assert store.get_session("a") == session("a")


def test_the_doorbell_rings_at_the_senders_commit_and_drains(pg_stores):
    owner, sender, fd = owner_and_sender(pg_stores)
    with sender.atomic():
        sender.put_signal("owner", "root", "input", None)
    assert not readable(fd, 0.3)  # NOTIFY is delivered at commit, not before
    sender.commit()
    assert readable(fd, 30.0)
    assert owner.drain_doorbell() == ["root"]  # the ring names the session signalled
    assert not readable(fd, 0.1)
    assert owner.drain_doorbell() == []
    with owner.atomic():
        assert owner.take_signals("owner") == [SignalRow("root", "input", None)]
    owner.commit()
    assert owner.take_signals("owner") == []


def test_a_doorbell_rung_after_it_was_closed_is_quiet(pg_stores):
    """A wake-up that arrives while the store closes drains nothing and raises nothing."""
    owner, sender, _ = owner_and_sender(pg_stores)
    with sender.atomic():
        sender.put_signal("owner", "root", "input", None)
    sender.commit()
    bell = Listener(pg_stores.url(next(iter(pg_stores.databases))))
    bell.close()
    assert bell.drain() == []
    bell.revive()
    assert bell.fileno() == -1


def test_signals_are_taken_in_order_in_one_group_and_a_rolled_back_take_keeps_them(pg_stores):
    """A signal's row and its ring are one statement, taking them inside a group one more: they
    come back in the order sent, a rolled-back take leaves them, and a signal for an owner
    without a row (nobody listens) is stored without a ring."""
    owner, sender, fd = owner_and_sender(pg_stores)
    with sender.atomic():
        for i in range(3):
            sender.put_signal("owner", f"s{i}", "inbox", None)
        sender.put_signal("nobody", "s9", "inbox", "x")
    sender.commit()
    assert readable(fd, 30.0)
    assert owner.drain_doorbell() == ["s0", "s1", "s2"]
    sent = [SignalRow(f"s{i}", "inbox", None) for i in range(3)]
    with owner.atomic():
        assert owner.take_signals("owner") == sent
    owner.rollback()
    with owner.atomic():  # those of the sessions named only (a ring's, under their tree's lock)
        assert owner.take_signals("owner", ["s2", "s0", "s9"]) == [sent[0], sent[2]]
    owner.rollback()
    assert not owner.dirty
    assert owner.take_signals("owner") == sent  # outside a group: read first, then deleted
    owner.commit()
    assert owner.take_signals("owner") == []
    assert not owner.dirty  # none found outside a group: nothing written
    with owner.atomic():
        assert owner.take_signals("owner") == []
        assert owner.take_signals("nobody") == [SignalRow("s9", "inbox", "x")]
    owner.commit()


def test_a_rings_take_of_one_signal_reads_its_sessions_inbox_in_the_same_statement(pg_stores):
    """The one signal a ring's take finds comes with its session's inbox as read in the same
    statement: the queued and parked counts and the next queued message (the owner then reads
    nothing more to start the turn); two or more come without (acting on one changes what the
    next would read)."""
    owner, sender, _ = owner_and_sender(pg_stores)
    with sender.atomic():
        for sid in ("a", "b"):
            sender.insert_session(session(sid))
        for message_id, state in (("m1", "parked"), ("m2", "queued"), ("m3", "queued")):
            sender.insert_message(message_id, "a", "[]", "{}", state, "t")
        sender.put_signal("owner", "a", "inbox", None)
        sender.put_signal("owner", "b", "inbox", None)
    sender.commit()
    with owner.atomic():
        (taken,) = owner.take_signals("owner", ["a"])
    assert taken[:4] == ("a", "inbox", None, InboxCounts(queued=2, parked=1))
    assert taken.first == InboxRecord(
        position=taken.first.position,
        message_id="m2",
        session_id="a",
        content="[]",
        source="{}",
        state="queued",
    )
    with owner.atomic():
        assert owner.take_signals("owner", ["b"]) == [
            SignalRow("b", "inbox", None, InboxCounts(0, 0), None)
        ]
    owner.rollback()
    with owner.atomic():  # two at once: no inbox read with them
        assert owner.take_signals("owner", ["a", "b"]) == [
            SignalRow("a", "inbox", None),
            SignalRow("b", "inbox", None),
        ]
    owner.commit()


def round_trips(store, monkeypatch) -> list[tuple[object, ...]]:
    """The round trips `store`'s connection makes from now on: each one's first statement."""
    trips: list[tuple[object, ...]] = []
    timed = type(store.conn).timed

    def recorded(conn, call, *args):
        trips.append(args[:1])
        return timed(conn, call, *args)

    monkeypatch.setattr(type(store.conn), "timed", recorded)
    return trips


def test_a_signal_and_its_ring_are_one_round_trip_and_so_is_taking_them(pg_stores, monkeypatch):
    owner, sender = pg_stores("shared"), pg_stores("shared")
    owner.hold("owner", 60.0, lambda: None)
    sender.hold("sender", 60.0, lambda: None)
    statements = round_trips(sender, monkeypatch)
    with sender.atomic():
        sender.insert_session(session("a"))  # the group open and its fencing checked
        statements.clear()
        sender.put_signal("owner", "root", "inbox", None)
        assert len(statements) == 1 and "pg_notify" in str(statements[0][0])
    sender.commit()
    with owner.atomic():
        owner.insert_session(session("b"))
        statements.clear()
        assert owner.take_signals("owner") == [SignalRow("root", "inbox", None)]
        assert len(statements) == 1 and str(statements[0][0]).startswith("DELETE FROM signals")
    owner.commit()


def test_a_later_request_of_a_group_is_one_round_trip_and_a_failed_one_still_rolls_back_alone(
    pg_stores, monkeypatch
):
    """A request's savepoint, the rows held before its read, the previous request's RELEASE and
    the read itself go in one round trip (libpq's pipeline mode); a request that fails after its
    read is rolled back to its savepoint alone, and the COMMIT goes by itself."""
    store = pg_stores(None)
    statements = round_trips(store, monkeypatch)
    with store.atomic():
        store.insert_session(session("a"))
    for i in range(3):
        statements.clear()
        with store.atomic():
            store.insert_message(f"m{i}", "a", "[]", "{}", "queued", "t")
            assert store.get_session("a") == session("a")
        assert len(statements) == 1  # SAVEPOINT, INSERT, (RELEASE before,) SELECT: one trip
    with pytest.raises(ValueError):
        with store.atomic():
            store.insert_message("bad", "a", "[]", "{}", "queued", "t")
            assert store.get_session("a") == session("a")
            raise ValueError("the rule refused it")
    statements.clear()
    store.commit()
    assert statements == [("COMMIT",)]
    assert [store.get_message(f"m{i}") is not None for i in range(3)] == [True] * 3
    assert store.get_message("bad") is None
    assert not store.dirty


def test_a_groups_budget_reads_take_no_round_trip_after_the_first_and_changes_are_read_again(
    pg_stores, monkeypatch
):
    """A burst of sends checks the same budget rows: inside a group they are read once, so a
    later request that only holds its row and checks them sends nothing; a charge, a failed
    request's undone charge and another process's write before the next group are read anew."""
    store = pg_stores(None)
    statements = round_trips(store, monkeypatch)
    with store.atomic():
        store.insert_session(session("a"))
        store.set_limits("a", 5, None, None, None, None)
    store.commit()
    with store.atomic():
        store.insert_message("m0", "a", "[]", "{}", "queued", "t")
        assert store.spending_rows(["a", "b"])["a"].max_turns == 5
    for i in range(1, 4):
        statements.clear()
        with store.atomic():
            store.insert_message(f"m{i}", "a", "[]", "{}", "queued", "t")
            assert list(store.spending_rows(["a", "b"])) == ["a"]
        assert statements == []  # its row held, the budget known: nothing sent
    with store.atomic():
        store.charge(["a"], 1, 0, 0, 0, 0)
        assert store.spending_rows(["a"])["a"].own_turns == 1
    with pytest.raises(ValueError):
        with store.atomic():
            store.charge(["a"], 1, 0, 0, 0, 0)
            assert store.spending_rows(["a"])["a"].own_turns == 2
            raise ValueError("the rule refused it")
    statements.clear()
    with store.atomic():
        assert store.spending_rows(["a"])["a"].own_turns == 1  # the failed charge undone
    assert len(statements) == 1
    store.commit()
    with psycopg.connect(pg_stores.url(next(iter(pg_stores.databases))), autocommit=True) as other:
        other.execute("UPDATE spending SET max_turns = 9 WHERE session_id = 'a'")
    with store.atomic():
        store.insert_message("m4", "a", "[]", "{}", "queued", "t")
        assert store.spending_rows(["a"])["a"].max_turns == 9
    store.commit()
    assert [store.get_message(f"m{i}") is not None for i in range(5)] == [True] * 5


def test_a_groups_lease_and_owner_reads_are_one_round_trip_until_it_writes_them(
    pg_stores, monkeypatch
):
    """Inside a group a lease is read with its owner's row, in one round trip, and neither is
    read again (a followup asks who holds its target twice) until this process writes them: its
    own lease write, or a fence, which every later read of the group sees."""
    owner, sender, _ = owner_and_sender(pg_stores)
    with owner.atomic():
        owner.insert_session(session("a"))
        owner.put_lease("a", "owner", "idle", 0.0)
    owner.commit()
    statements = round_trips(sender, monkeypatch)
    with sender.atomic():
        sender.insert_session(session("b"))  # the group open and its fencing checked
        statements.clear()
        for _ in range(2):
            assert sender.get_lease("a") == ("owner", "idle", 0.0)
            assert sender.owner_state("owner") == (pytest.approx(owner.group._holding.expires), 0)
        assert sender.get_lease("nothing") is None and sender.get_lease("nothing") is None
        assert len(statements) == 2  # one for each session
        statements.clear()
        assert sender.fence("owner", None) is True
        assert sender.owner_state("owner")[1] == 1 and sender.get_lease("a") is None
        sender.put_lease("b", "sender", "idle", 0.0)
        assert sender.get_lease("b") == ("sender", "idle", 0.0)
    sender.commit()
    with sender.atomic():
        assert sender.owner_state("owner")[1] == 1 and sender.get_lease("a") is None
    sender.rollback()


def test_writes_nobody_reads_the_answer_of_wait_for_the_next_statement_or_go_before_the_commit(
    pg_stores, monkeypatch
):
    """A turn's start writes four rows nothing reads the answer of: they are held, in order, and
    sent in the round trip of the group's next statement (which sees them), or together just
    before the COMMIT, which still goes alone; a failed request's held writes are dropped."""
    store = pg_stores(None)
    with store.atomic():
        store.insert_session(session("a"))
        store.insert_message("m0", "a", "[]", "{}", "queued", "t")
        store.put_lease("a", "me", "idle", 0.0)
    store.commit()
    statements = round_trips(store, monkeypatch)
    with store.atomic():
        store.claim_message("m0", "t1")
        store.set_open_turn("a", "t1")
        store.charge(["a"], 1, 0, 0, 0, 0)
        store.set_lease_status("a", "me", "running")
        assert len(statements) == 1  # the group's BEGIN: the writes are held
        assert store.get_session("a").open_turn_id == "t1"
        assert store.spending_rows(["a"])["a"].own_turns == 1
        assert len(statements) == 3
    with pytest.raises(ValueError):
        with store.atomic():
            store.set_open_turn("a", "t2")
            raise ValueError("the rule refused it")
    with store.atomic():
        store.set_lease_status("a", "me", "idle")
        store.claim_message("m0", None)
    statements.clear()
    store.commit()
    assert len(statements) == 2 and statements[1] == ("COMMIT",)
    assert store.get_session("a").open_turn_id == "t1"
    assert store.get_lease("a") == ("me", "idle", 0.0)
    assert store.get_message("m0").turn_id is None


def test_a_lost_connection_is_opened_anew_at_the_heartbeat_and_the_doorbell_goes_quiet(pg_stores):
    """The server dropped every connection of the store (a restart, a failover): the doorbell's
    number neither stays readable nor closes, the lost group fails, and the next heartbeat
    (check_file) connects again, so writes work; the renewal thread connects again too."""
    store = pg_stores(None)
    store.hold("me", 60.0, lambda: None)
    fd = store.doorbell()
    with psycopg.connect(pg_stores.url(next(iter(pg_stores.databases)))) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert readable(fd, 30.0)  # the server's goodbye, then the end of file
    for _ in range(2):  # as the server's doorbell loop would: at most two rounds
        store.drain_doorbell()
        if not readable(fd, 0.2):
            break
    assert not readable(fd, 0.5)  # quiet now: the server's wait sleeps
    with pytest.raises(StorageFailedError):
        with store.atomic():
            store.insert_session(session("a"))
    assert store.check_file() is True  # the heartbeat
    with store.atomic():
        store.insert_session(session("a"))
    store.commit()
    assert store.get_session("a") == session("a")
    # the heartbeat opened the doorbell again, under the same number: a ring is heard
    with psycopg.connect(pg_stores.url(next(iter(pg_stores.databases))), autocommit=True) as other:
        other.execute("SELECT pg_notify(%s, '')", (channel_of("me"),))
    assert readable(fd, 30.0) and store.group.doorbell.drain() == [""]


SESSION_ID_COLUMNS = {
    ("sessions", "id"),
    ("sessions", "parent_id"),
    ("descriptors", "session_id"),
    ("events", "session_id"),
    ("inbox", "session_id"),
    ("leases", "session_id"),
    ("signals", "session_id"),
    ("spending", "session_id"),
}


def collations(url: str) -> dict[tuple[str, str], str]:
    """The collation of each session id column, by name ("default" unless one is declared)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.attname, l.collname FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_collation l ON l.oid = a.attcollation"
            " WHERE n.nspname = 'public' AND c.relkind = 'r' AND (a.attname = 'session_id' OR"
            " (c.relname = 'sessions' AND a.attname IN ('id', 'parent_id')))"
        ).fetchall()
    return {(table, column): collation for table, column, collation in rows}


def test_every_session_id_column_collates_as_sessions_id_so_its_index_serves_the_join(pg_stores):
    """p003: a listing reads each session's descriptor by `d.session_id = sessions.id`; across
    two collations PostgreSQL cannot use descriptors' primary key for it and scans the table
    once per listed session (the plan shows a Seq Scan even with sequential scans disabled)."""
    pg_stores("collate")
    url = pg_stores.url("collate")
    assert collations(url) == {column: "C" for column in SESSION_ID_COLUMNS}
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")
        for table, index in (("descriptors", "descriptors_pkey"), ("leases", "leases_pkey")):
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    f"EXPLAIN SELECT (SELECT 1 FROM {table} x WHERE x.session_id = s.id)"
                    " FROM sessions s"
                )
            )
            assert (
                f"Index Only Scan using {index}" in plan or f"Index Scan using {index}" in plan
            ), plan


def test_a_database_made_before_p003_keeps_its_rows_and_is_migrated_at_open(pg_stores):
    from subagentd.storage.postgres import migrations
    from subagentd.storage.postgres.store import PostgresStore

    url = pg_stores.older("before-p003", 2)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO descriptors (session_id, body) VALUES ('s1', '{}')")
        conn.execute(
            "INSERT INTO events (session_id, type, at) VALUES ('s1', 'descriptor', '2026')"
        )
        conn.commit()
    assert collations(url)[("descriptors", "session_id")] == "default"
    store = PostgresStore(url)
    try:
        assert collations(url) == {column: "C" for column in SESSION_ID_COLUMNS}
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT session_id, body FROM descriptors").fetchall() == [
                ("s1", "{}")
            ]
            assert conn.execute(
                "SELECT count(*) FROM events WHERE session_id = 's1'"
            ).fetchone() == (1,)
            names = {name for (name,) in conn.execute("SELECT name FROM subagentd_migrations")}
        assert names == set(migrations.NAMES)
    finally:
        store.close()
