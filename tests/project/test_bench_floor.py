"""The benchmark's write floor (benchmarks/peers/sqlite_floor.py) writes exactly what the server
writes for a send_message, with the server's PRAGMAs: otherwise its floor would not be one."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from subagentd.storage.opening import open_database
from tests.spawned import ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import sqlite_floor  # noqa: E402

UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def snapshot(path: str) -> dict[str, set[tuple]]:
    conn = sqlite3.connect(path)
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: set(conn.execute(f"SELECT * FROM {t}")) for t in tables}
    finally:
        conn.close()


def added_rows(before: dict[str, set[tuple]], after: dict[str, set[tuple]]) -> dict[str, set]:
    """Rows each table gained (or had changed), by table; tables left alone are left out."""
    assert set(before) == set(after)
    return {t: after[t] - before[t] for t in after if after[t] != before[t]}


def inbox_columns(path: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[1] for row in conn.execute("PRAGMA table_info(inbox)")]
    finally:
        conn.close()


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


def schema_only(db: str) -> None:
    """The database as run.py hands it to a floor: made by the server, no rows written."""
    server = ServerProcess("--log-level", "warning", db=db)
    try:
        server.host.initialize()
    finally:
        server.stop()


def check_the_floor_writes_the_servers_row(
    server_db: str,
    floor_db: str,
    snapshot: Callable[[str], dict[str, set[tuple]]],
    inbox_columns: Callable[[str], list[str]],
    floor: Any,
    tables: set[str],
) -> None:
    """One send_message to a busy child through the server, one row through `floor` (a floor
    module: connect, insert_burst): the same tables gain rows, and the same inbox row."""
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
    # the lease heartbeat renews this process's `owners` row on its own clock (every
    # --lease-ttl/3): on a loaded machine it can fall inside the window; it is no part of the send
    server_added.pop("owners", None)

    schema_only(floor_db)
    floor_before = snapshot(floor_db)
    conn = floor.connect(floor_db, "normal")
    floor.insert_burst(conn, "root", "c0", ["follow-up 1"], group=1)
    conn.close()
    floor_added = added_rows(floor_before, snapshot(floor_db))

    assert set(server_added) == set(floor_added) == tables
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
        "root_id": "root",
    }


def test_floor_inserts_exactly_the_rows_one_send_message_writes(tmp_path):
    # one inbox row (and AUTOINCREMENT's counter); no event: the message waits for its turn
    check_the_floor_writes_the_servers_row(
        str(tmp_path / "server.db"),
        str(tmp_path / "floor.db"),
        snapshot,
        inbox_columns,
        sqlite_floor,
        {"inbox", "sqlite_sequence"},
    )


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_floor_connection_has_the_servers_pragmas(tmp_path, durability):
    pragmas = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
    opened = open_database(str(tmp_path / "server.db"), durability=durability)
    floor = sqlite_floor.connect(str(tmp_path / "floor.db"), durability)
    try:
        theirs = {p: opened.conn.execute(f"PRAGMA {p}").fetchone()[0] for p in pragmas}
        ours = {p: floor.execute(f"PRAGMA {p}").fetchone()[0] for p in pragmas}
    finally:
        opened.conn.close()
        floor.close()
    assert ours == theirs
    assert ours["synchronous"] == {"normal": 1, "full": 2}[durability]


def test_floor_commits_in_groups_and_keeps_fifo_order(tmp_path):
    db = tmp_path / "floor.db"
    schema_only(str(db))
    conn = sqlite_floor.connect(str(db), "full")
    commits = []
    conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    sqlite_floor.insert_burst(conn, "root", "c0", [f"m{i}" for i in range(5)], group=2)
    texts = [content for (content,) in conn.execute("SELECT content FROM inbox ORDER BY position")]
    conn.close()
    assert len(commits) == 3  # 2 + 2 + 1
    assert texts == [f'[{{"type":"text","text":"m{i}"}}]' for i in range(5)]
