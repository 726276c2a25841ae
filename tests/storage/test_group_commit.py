"""Group commit: concurrent writes share transactions, and no reply leaves before its commit."""

import json
import sqlite3
from typing import Any

import pytest

from subagentd.storage.database import SqliteStore
from tests.spawned import InProcessServer


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
def test_durability_option_sets_the_sqlite_sync_level_in_wal_mode(
    tmp_path, durability, synchronous
):
    store = SqliteStore(str(tmp_path / "d.db"), durability=durability)
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_pipelined_writes_share_commits_and_every_reply_follows_its_commit(tmp_path):
    path = str(tmp_path / "group.db")
    store = SqliteStore(path)
    commits = []
    real_commit = store.commit

    def counting_commit():
        if store.conn.in_transaction:
            commits.append(1)
        real_commit()

    store.commit = counting_commit
    server = InProcessServer(store=store)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    checked = []
    writer = server.connection.writer
    real_write, real_write_now = writer.write, writer.write_now

    skip = [0]  # bytes at the start of the next write that were checked already

    def check(data: bytes) -> None:
        # what is about to reach the host must already be visible to another connection
        data, skip[0] = bytes(data)[skip[0] :], 0
        for line in data.splitlines():
            reply = json.loads(line)
            message_id = (
                (reply.get("result") or {}).get("message_id") if isinstance(reply, dict) else None
            )
            if message_id:
                row = reader.execute(
                    "SELECT 1 FROM inbox WHERE message_id = ?", (message_id,)
                ).fetchone()
                assert row is not None, f"reply for {message_id} written before its commit"
                checked.append(message_id)

    async def write_after_checking(data: bytes) -> None:
        check(data)
        await real_write(data)

    def write_now_after_checking(data: bytes) -> int:
        check(data)
        written = real_write_now(data)
        skip[0] = len(data) - written  # the rest comes first in the flusher's next write
        return written

    writer.write, writer.write_now = write_after_checking, write_now_after_checking
    host = server.host
    try:
        host.initialize()
        host.open("root")
        host.spawn("root", "c1")
        before = len(commits)
        checked.clear()  # the spawn's reply was checked too
        frames = [
            {
                "jsonrpc": "2.0",
                "id": 1000 + i,
                "method": "send_message",
                "params": {"caller": "root", "subagent_id": "c1", "message": f"m{i}"},
            }
            for i in range(300)
        ]
        host.send_bytes(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        for frame in frames:
            assert "result" in host.response(frame["id"])
        assert len(checked) == 300
        assert len(commits) - before < 300 / 4  # many writes per commit
    finally:
        server.stop()
        reader.close()


# --- deferred inbox rows and lazily opened request savepoints (storage/transactions.py) -----


def stored_ids(store: Any) -> list[str]:
    return [r[0] for r in store.conn.execute("SELECT message_id FROM inbox ORDER BY position")]


def traced(store: Any) -> list[str]:
    """The statements the store's connection runs from now on (SQL text, as sent)."""
    statements: list[str] = []
    if isinstance(store, SqliteStore):
        store.conn.set_trace_callback(statements.append)
    else:  # PostgreSQL: what goes through the psycopg connection, rows run by executemany too
        store.conn.raw = Traced(store.conn.raw, statements)
    return statements


class Traced:
    """A psycopg connection that records each statement's text (executemany: once per row)."""

    def __init__(self, raw: Any, statements: list[str]) -> None:
        self._raw, self._statements = raw, statements

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def execute(self, query: str, params: Any = None) -> Any:
        self._statements.extend(part.strip() for part in query.split(";") if part.strip())
        return self._raw.execute(query, params)

    def cursor(self) -> Any:
        cursor = self._raw.cursor()
        statements = self._statements

        class Recording:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                cursor.close()

            def executemany(self, query: str, rows: Any) -> None:
                rows = list(rows)
                statements.extend([query] * len(rows))
                cursor.executemany(query, rows)

        return Recording()


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path):
    """A fresh store on each backend (the held-back rows are both groups' own)."""
    if request.param == "sqlite":
        made: list[SqliteStore] = []

        def make() -> SqliteStore:
            made.append(SqliteStore(str(tmp_path / "d.db")))
            return made[-1]

        return make
    stores = request.getfixturevalue("pg_stores")
    return lambda: stores(None)


def test_requests_that_only_queue_messages_share_one_insert_and_open_no_savepoint(new_store):
    store = new_store()
    statements = traced(store)
    for i in range(5):  # five requests of one group, each queueing one message
        with store.atomic():
            store.insert_message(f"m{i}", "a", "[]", "{}", "queued", "t")
    assert not any("INSERT" in s or "SAVEPOINT" in s for s in statements), statements
    assert statements[0].startswith("BEGIN")  # the group's lock; the rows wait for the commit
    store.commit()
    assert not any(s.startswith(("SAVEPOINT", "RELEASE")) for s in statements), statements
    assert statements[-1] == "COMMIT"
    assert sum(s.startswith("INSERT INTO inbox") for s in statements) == 5
    assert stored_ids(store) == [f"m{i}" for i in range(5)]
    store.close()


def test_a_failed_request_drops_only_its_own_deferred_rows(new_store):
    store = new_store()
    with store.atomic():
        store.insert_message("first", "a", "[]", "{}", "queued", "t")
    with pytest.raises(ValueError), store.atomic():
        store.insert_message("refused", "a", "[]", "{}", "queued", "t")
        store.insert_message("refused too", "a", "[]", "{}", "queued", "t")
        raise ValueError("a rule refused the request after its writes")
    with store.atomic():
        store.insert_message("later", "a", "[]", "{}", "queued", "t")
    store.commit()
    assert stored_ids(store) == ["first", "later"]
    store.close()


def test_a_failed_request_that_also_wrote_directly_is_rolled_back_whole(new_store):
    store = new_store()
    with store.atomic():
        store.insert_message("first", "a", "[]", "{}", "queued", "t")
    with pytest.raises(ValueError), store.atomic():
        store.insert_message("mine", "a", "[]", "{}", "queued", "t")
        store.claim_message("first", "turn-1")  # a statement: the savepoint opens before it
        assert store.get_message("mine") is not None  # a request reads its own rows
        raise ValueError("refused")
    store.commit()
    assert stored_ids(store) == ["first"]
    first = store.get_message("first")
    assert first is not None and (first.state, first.turn_id) == ("queued", None)
    store.close()


def test_nested_requests_keep_their_rows_apart(new_store):
    store = new_store()
    with store.atomic():
        store.insert_message("group", "a", "[]", "{}", "queued", "t")
    with store.atomic():
        store.insert_message("outer", "a", "[]", "{}", "queued", "t")
        with pytest.raises(ValueError), store.atomic():
            store.insert_message("inner", "a", "[]", "{}", "queued", "t")
            raise ValueError("refused")
        with store.atomic():
            store.insert_message("inner kept", "a", "[]", "{}", "queued", "t")
            assert store.get_message("outer") is not None  # a read runs what is deferred
        with pytest.raises(ValueError), store.atomic():  # its savepoint opens inside the outer's
            store.insert_message("inner refused", "a", "[]", "{}", "queued", "t")
            store.cancel_message("outer")
            raise ValueError("refused")
    with pytest.raises(ValueError), store.atomic():  # a whole request with a nested one
        with store.atomic():
            store.insert_message("nested", "a", "[]", "{}", "queued", "t")
        store.cancel_message("group")
        raise ValueError("refused")
    store.commit()
    assert stored_ids(store) == ["group", "outer", "inner kept"]
    assert {store.get_message(m).state for m in stored_ids(store)} == {"queued"}
    store.close()
