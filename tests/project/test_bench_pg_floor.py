"""The benchmark's PostgreSQL write floor (benchmarks/peers/pg_floor.py) writes exactly what the
server writes for a send_message, on the server's session settings: otherwise it is no floor."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

from subagentd.storage.postgres.store import PostgresStore
from tests.project.test_bench_floor import check_the_floor_writes_the_servers_row, schema_only

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
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


def inbox_columns(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [
            name
            for (name,) in conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'inbox' ORDER BY ordinal_position"
            )
        ]


def test_pg_floor_inserts_exactly_the_row_one_send_message_writes(pg_stores):
    # one inbox row; no event: the message waits for its turn
    check_the_floor_writes_the_servers_row(
        pg_stores.url(), pg_stores.url(), snapshot, inbox_columns, pg_floor, {"inbox"}
    )


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
