"""Every table a tree's rows live in carries the tree's root id (migration m014 / p007): rows of
a database made by the previous schema get it from the session lineage at open, and every row
the store writes carries it (storage/roots.py)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from subagentd.storage.database import SqliteStore
from subagentd.storage.migrations import migrations, sqlite_utils_database
from subagentd.storage.roots import Roots, pick, rooted
from tests.core_host import CoreHost

STAMP = "2026-01-01T00:00:00.000000Z"

# (table, the rows of the previous schema): a tree r > c > g, a session whose parent is gone (o,
# the top of its own tree), a parent cycle (x, y: each its own root), the host's key (caller "")
OLD_ROWS: dict[str, list[tuple[object, ...]]] = {
    "sessions (id, parent_id, kind, label, created_at, depth, open_turn_id)": [
        ("r", None, "ordinary", None, STAMP, 0, None),
        ("c", "r", "subagent", "c", STAMP, 1, "t-open"),
        ("g", "c", "subagent", "g", STAMP, 2, None),
        ("o", "gone", "subagent", "o", STAMP, 1, None),
        ("x", "y", "subagent", "x", STAMP, 1, None),
        ("y", "x", "subagent", "y", STAMP, 1, None),
    ],
    "descriptors (session_id, body)": [("c", "{}"), ("o", "{}")],
    "events (session_id, turn_id, type, data, at)": [
        ("g", "t-done", "turn_start", "{}", STAMP),
        ("x", None, "note", "{}", STAMP),
    ],
    "inbox (message_id, session_id, content, source, state, created_at)": [
        ("m1", "g", "[]", "{}", "claimed", STAMP),
    ],
    "leases (session_id, owner, status, expires_at)": [("c", "p1", "running", 0.0)],
    "signals (owner, session_id, kind)": [("p1", "g", "interrupt")],
    "spending (session_id, own_turns)": [("g", 1), ("r", 1)],
    "idempotency (caller, key, method, fingerprint, result, created_at)": [
        ("c", "k1", "spawn_agent", "f", "{}", STAMP),
        ("", "k2", "agents/followup", "f", "{}", STAMP),
    ],
    "tasks (task_id, owner_id, agent_id, tool, status, created_at, updated_at, output)": [
        ("k", "c", "g", "spawn_agent", "working", STAMP, STAMP, "{}"),
        ("k-refused", "g", "@x", "spawn_agent", "failed", STAMP, STAMP, "{}"),  # no child
    ],
    "trace_context (key, traceparent, at)": [
        ("s:c", "tp", 0.0),
        ("m:m1", "tp", 0.0),
        ("t:t-open", "tp", 0.0),  # an open turn: its session's
        ("t:t-done", "tp", 0.0),  # a turn of the transcript
        ("s:gone", "tp", 0.0),  # no such session: none
    ],
}

# (table, key column) -> the root id each row gets
EXPECTED = {
    ("sessions", "id"): {"r": "r", "c": "r", "g": "r", "o": "o", "x": "x", "y": "y"},
    ("descriptors", "session_id"): {"c": "r", "o": "o"},
    ("events", "session_id"): {"g": "r", "x": "x"},
    ("inbox", "message_id"): {"m1": "r"},
    ("leases", "session_id"): {"c": "r"},
    ("signals", "session_id"): {"g": "r"},
    ("spending", "session_id"): {"g": "r", "r": "r"},
    ("idempotency", "key"): {"k1": "r", "k2": ""},
    ("tasks", "task_id"): {"k": "r", "k-refused": "r"},
    ("trace_context", "key"): {
        "s:c": "r",
        "m:m1": "r",
        "t:t-open": "r",
        "t:t-done": "r",
        "s:gone": None,
    },
}


def insert_old_rows(conn, mark: str) -> None:
    for table, rows in OLD_ROWS.items():
        marks = ",".join([mark] * len(rows[0]))
        for row in rows:
            conn.execute(f"INSERT INTO {table} VALUES ({marks})", row)


def root_ids(conn) -> dict[tuple[str, str], dict[str, str | None]]:
    return {
        (table, key): dict(conn.execute(f"SELECT {key}, root_id FROM {table}").fetchall())
        for table, key in EXPECTED
    }


def test_upgrading_a_sqlite_database_gives_every_row_its_tree_root(tmp_path):
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path, isolation_level=None)
    migrations.apply(sqlite_utils_database(conn), stop_before="m014_root_ids")
    assert "root_id" not in {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    insert_old_rows(conn, "?")
    conn.close()
    store = SqliteStore(path)  # applies m014
    try:
        assert root_ids(store.conn) == EXPECTED
        plan = store.conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE root_id = 'r'"
        ).fetchall()
        assert "sessions_by_root" in plan[0][3]
    finally:
        store.close()


def test_upgrading_a_postgres_database_gives_every_row_its_tree_root(pg_stores):
    from subagentd.storage.postgres import migrations as pg_migrations
    from subagentd.storage.postgres.store import PostgresStore

    url = pg_stores.older("before-p007", len(pg_migrations.MIGRATIONS) - 1)
    with psycopg.connect(url) as conn:
        assert "p007_root_ids" not in pg_migrations.applied(conn)
        insert_old_rows(conn, "%s")
        conn.commit()
    store = PostgresStore(url)
    try:
        with psycopg.connect(url) as conn:
            assert root_ids(conn) == EXPECTED
            assert pg_migrations.applied(conn) == set(pg_migrations.NAMES)
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_every_row_the_store_writes_carries_its_tree_root(backend):
    core = CoreHost()
    for root in ("t0", "t1"):
        core.open(root)
        core.spawn(root, f"{root}-a")
        core.spawn(f"{root}-a", f"{root}-b")
        core.send(root, f"{root}-a", "more")
    conn = core.store.conn
    for table, column in (
        ("sessions", "id"),
        ("descriptors", "session_id"),
        ("events", "session_id"),
        ("inbox", "session_id"),
        ("leases", "session_id"),
        ("spending", "session_id"),
    ):
        rows = conn.execute(f"SELECT {column}, root_id FROM {table}").fetchall()
        assert {row[0].split("-")[0] for row in rows} == {"t0", "t1"}, table
        assert [row for row in rows if row[0].split("-")[0] != row[1]] == [], table


def test_a_session_s_tree_is_known_from_its_parent_links_and_never_guessed():
    roots = Roots()
    roots.learn("g", "c")  # read bottom-up: unknown until the top is reached
    assert roots.root("g") is None
    roots.learn("c", "r")
    roots.learn("r", None)
    assert (roots.root("g"), roots.root("c"), roots.root("r")) == ("r", "r", "r")
    roots.learn("x", "y")  # a parent cycle in corrupt data: never a root
    roots.learn("y", "x")
    assert roots.root("x") is None
    roots.tie("m:m1", "g")
    assert (roots.root_of("m:m1"), roots.root_of("m:m2")) == ("r", None)
    roots.lineage(("k", "q", "top"))  # itself first, its root last
    assert roots.root("k") == "top"
    # ids of one tree: the root of any known among them (a new child's is not yet)
    assert roots.common(["new", "g", "c"]) == "r"
    assert roots.common(["new"]) is None
    assert roots.common(["g", "k"]) is None  # two trees: by key alone
    assert rooted("SELECT body FROM descriptors WHERE {root}session_id = ?") == (
        "SELECT body FROM descriptors WHERE root_id = ? AND session_id = ?",
        "SELECT body FROM descriptors WHERE session_id = ?",
        0,
    )
    texts = rooted("UPDATE sessions SET open_turn_id = ? WHERE {root}id = ?")
    assert pick(texts, "r", ("t1", "c")) == (texts.named, ("t1", "r", "c"))
    assert pick(texts, None, ("t1", "c")) == (texts.bare, ("t1", "c"))
