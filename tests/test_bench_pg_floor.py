"""The benchmark's PostgreSQL write floor (benchmarks/peers/pg_floor.py) writes exactly what the
server writes for a send_message, on the server's session settings: otherwise it is no floor."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

from subagentd.storage.postgres.store import PostgresStore
from tests.spawned import ServerProcess
from tests.test_bench_floor import STAMP, UUID4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "peers"))
import pg_floor  # noqa: E402


def snapshot(url: str) -> dict[str, set[tuple]]:
    """Every row of every table of the database, by table."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        ]
        return {t: {tuple(row) for row in conn.execute(f"SELECT * FROM {t}")} for t in tables}


def added_rows(before: dict[str, set[tuple]], after: dict[str, set[tuple]]) -> dict[str, set]:
    """Rows each table gained (or had changed), by table; tables left alone are left out."""
    assert set(before) == set(after)
    return {t: after[t] - before[t] for t in after if after[t] != before[t]}


def inbox_columns(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [
            name
            for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'inbox' ORDER BY ordinal_position"
            )
        ]


def normalized(row: tuple, columns: list[str], first_position: int) -> dict[str, object]:
    """The inbox row with its random id and clock time checked for form and then blanked."""
    values = dict(zip(columns, row, strict=True))
    assert UUID4.fullmatch(values["message_id"]), values
    assert STAMP.fullmatch(values["created_at"]), values
    values["message_id"] = values["created_at"] = "*"
    values["position"] = values["position"] - first_position
    return values


def max_position(snap: dict[str, set[tuple]], columns: list[str]) -> int:
    at = columns.index("position")
    return max((row[at] for row in snap["inbox"]), default=0)


def schema_only(url: str) -> None:
    """The database as run.py hands it to the floor: migrated by the server, no rows written."""
    server = ServerProcess("--log-level", "warning", db=url)
    try:
        server.host.initialize()
    finally:
        server.stop()


def test_pg_floor_inserts_exactly_the_row_one_send_message_writes(pg_stores):
    server_db, floor_db = pg_stores.url(), pg_stores.url()
    server = ServerProcess("--log-level", "warning", db=server_db)
    try:
        host = server.host
        host.initialize()
        host.open("root")
        host.spawn("root", "c0")  # a continuable child whose first turn stays running
        before = snapshot(server_db)
        sent = host.tool("send_message", "root", subagent_id="c0", message="follow-up 1")
        host.call("ping", {})
        after = snapshot(server_db)
    finally:
        server.stop()
    server_added = added_rows(before, after)

    schema_only(floor_db)
    floor_before = snapshot(floor_db)
    conn = pg_floor.connect(floor_db, "normal")
    pg_floor.insert_burst(conn, "root", "c0", ["follow-up 1"], group=1)
    conn.close()
    floor_added = added_rows(floor_before, snapshot(floor_db))

    # one inbox row; no event: the message waits for its turn
    assert set(server_added) == set(floor_added) == {"inbox"}
    assert len(server_added["inbox"]) == len(floor_added["inbox"]) == 1
    columns = inbox_columns(server_db)
    assert inbox_columns(floor_db) == columns
    (server_row,) = server_added["inbox"]
    (floor_row,) = floor_added["inbox"]
    assert server_row[columns.index("message_id")] == sent["message_id"]
    server_values = normalized(server_row, columns, max_position(before, columns))
    floor_values = normalized(floor_row, columns, max_position(floor_before, columns))
    assert floor_values == server_values
    assert server_values == {
        "position": 1,
        "message_id": "*",
        "session_id": "c0",
        "content": '[{"type":"text","text":"follow-up 1"}]',
        "source": '{"kind":"coordinator","form":"relay","sender_session_id":"root"}',
        "state": "queued",
        "turn_id": None,
        "created_at": "*",
    }


SETTINGS = ("synchronous_commit", "jit", "transaction_isolation", "lock_timeout")


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_pg_floor_connection_has_the_servers_session_settings(pg_stores, pg_server, durability):
    url = pg_stores.url("settings")
    # a database whose default is off: only --durability full's SET turns it on
    pg_server.execute(
        f"ALTER DATABASE {pg_stores.databases['settings']} SET synchronous_commit = off"
    )
    store = PostgresStore(url, durability=durability)
    floor = pg_floor.connect(url, durability)
    try:
        theirs = {s: store.conn.raw.execute(f"SHOW {s}").fetchone()[0] for s in SETTINGS}
        ours = {s: floor.execute(f"SHOW {s}").fetchone()[0] for s in SETTINGS}
        assert floor.autocommit and store.conn.raw.autocommit
    finally:
        store.close()
        floor.close()
    assert ours == theirs
    assert ours["jit"] == "off"
    assert ours["synchronous_commit"] == {"normal": "off", "full": "on"}[durability]


def test_pg_floor_commits_in_groups_and_keeps_fifo_order(pg_stores):
    db = pg_stores.url()
    schema_only(db)
    conn = pg_floor.connect(db, "full")
    pg_floor.insert_burst(conn, "root", "c0", [f"m{i}" for i in range(5)], group=2)
    rows = conn.execute("SELECT xmin::text, content FROM inbox ORDER BY position").fetchall()
    conn.close()
    transactions = [xmin for xmin, _ in rows]
    assert [transactions.count(x) for x in dict.fromkeys(transactions)] == [2, 2, 1]  # 3 commits
    assert [content for _, content in rows] == [
        f'[{{"type":"text","text":"m{i}"}}]' for i in range(5)
    ]
