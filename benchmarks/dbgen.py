"""Build large subagentd databases by direct inserts, shaped like what the server writes.

The schema comes from the server itself (it is started once on the empty file so its migrations
run); rows then go in with plain sqlite3 `executemany`, mimicking storage/sessions.py and
core/host_api.py spawn(): kind "subagent", descriptor `{"version":1,"mode":"continuable","label":…}`,
ISO `created_at` strings, the sortable path of storage/paths.py, a fan-out-10 tree below one
ordinary root. `build_tree_postgres` writes the same rows into a PostgreSQL database.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from datetime import UTC, datetime, timedelta

from harness import PYTHON, Server

from subagentd.storage.paths import child_path, segment

ROOT_ID = "root"
FANOUT = 10
_BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(offset_us: int) -> str:
    """`_BASE` plus offset_us as the server writes times (strftime once per second: 10M rows)."""
    seconds, micro = divmod(offset_us, 1_000_000)
    return f"{_second(seconds)}.{micro:06d}Z"


@functools.cache
def _second(seconds: int) -> str:
    return (_BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def _uuid(n: int) -> str:
    """str(uuid.UUID(int=n)) without building the UUID (~5x faster; 10M events)."""
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def create_schema(path: str, env: dict[str, str] | None = None) -> None:
    """The server's own migrations on a new database (only --db: any revision takes it)."""
    server = Server([PYTHON, "-m", "subagentd", "--db", path], env=env)
    try:
        server.initialize()
        server.close()
    finally:
        server.kill()


def child_id(k: int) -> str:
    return f"agent-{k:07d}"


def parent_of(k: int) -> str:
    """Breadth-first fan-out tree: nodes 0..9 hang off the root, node k off node k//10 - 1."""
    return ROOT_ID if k < FANOUT else child_id(k // FANOUT - 1)


def _tree_rows(sessions: int, open_turns: int) -> tuple[list[tuple], list[tuple], int]:
    """The session rows (columns SESSION_COLUMNS), descriptor rows and the deepest depth."""
    depths = {ROOT_ID: 0}
    paths = {ROOT_ID: segment(_iso(0), ROOT_ID)}
    session_rows = [
        (
            ROOT_ID,
            None,
            "ordinary",
            "bench root",
            _iso(0),
            0,
            0,
            None,
            paths[ROOT_ID],
            None,
            ROOT_ID,
        )
    ]
    descriptor_rows = []
    max_depth = 0
    for k in range(sessions):
        cid = child_id(k)
        parent = parent_of(k)
        depth = depths[parent] + 1
        depths[cid] = depth
        max_depth = max(max_depth, depth)
        label = f"task {k}"
        open_turn = _uuid(k + 1) if k < open_turns else None
        paths[cid] = child_path(paths[parent], _iso(k + 1), cid)
        session_rows.append(
            (
                cid,
                parent,
                "subagent",
                label,
                _iso(k + 1),
                depth,
                0,
                open_turn,
                paths[cid],
                "continuable",
                ROOT_ID,
            )
        )
        descriptor_rows.append(
            (
                cid,
                json.dumps(
                    {"version": 1, "mode": "continuable", "label": label}, separators=(",", ":")
                ),
            )
        )
    return session_rows, descriptor_rows, max_depth


SESSION_COLUMNS = (
    "id, parent_id, kind, label, created_at, depth, parked, open_turn_id, path, mode, root_id"
)


def build_tree(
    path: str,
    sessions: int,
    events: int = 0,
    open_turns: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, int]:
    """A root plus `sessions` subagent sessions; `events` event rows spread over them."""
    create_schema(path, env)
    conn = sqlite3.connect(path, isolation_level=None)
    # as fast as SQLite writes: no journal, no syncs, a big page cache, one transaction; the
    # indexes of the filled tables are dropped and built again after the rows (a sort, not
    # a B-tree insert per row), from the server's own SQL, so the file ends as the server's
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")  # 256 MiB
    columns_now = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    filled = ("sessions", "descriptors", "events")
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        f" AND tbl_name IN ({','.join('?' * len(filled))})",
        filled,
    ).fetchall()
    conn.execute("BEGIN")
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    session_rows, descriptor_rows, max_depth = _tree_rows(sessions, open_turns)
    names = SESSION_COLUMNS
    keep = [i for i, name in enumerate(names.split(", ")) if name in columns_now]  # for --at
    columns = ", ".join(names.split(", ")[i] for i in keep)
    session_rows = [tuple(row[i] for i in keep) for row in session_rows]
    marks = ",".join("?" * len(keep))
    # descriptors first, as the server writes them: their insert trigger clears a session's mode
    # every row in the one tree: its root id where the schema has the column (not for --at)
    tree = ("root_id, ", f"'{ROOT_ID}', ") if "root_id" in columns_now else ("", "")
    conn.executemany(
        f"INSERT INTO descriptors ({tree[0]}session_id, body) VALUES ({tree[1]}?, ?)",
        descriptor_rows,
    )
    conn.executemany(f"INSERT INTO sessions ({columns}) VALUES ({marks})", session_rows)
    del session_rows, descriptor_rows
    if events:
        conn.executemany(
            f"INSERT INTO events ({tree[0]}session_id, turn_id, type, data, at)"
            f" VALUES ({tree[1]}?,?,?,?,?)",
            _events(sessions, events),
        )
    for _, sql in indexes:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode = WAL")  # as the server left it
    conn.close()
    return {"sessions": sessions + 1, "events": events, "max_depth": max_depth}


def build_tree_postgres(
    url: str, sessions: int, env: dict[str, str] | None = None
) -> dict[str, int]:
    """The same tree in a PostgreSQL database (the server migrates it first): the same rows,
    the path as bytea, written with COPY in one transaction, then ANALYZE (as autovacuum would
    soon after such a load) so the planner sees the table as it is."""
    import psycopg

    create_schema(url, env)
    session_rows, descriptor_rows, max_depth = _tree_rows(sessions, 0)
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            # descriptors first, as the server writes them: their trigger clears a session's mode
            with cur.copy("COPY descriptors (root_id, session_id, body) FROM STDIN") as copy:
                for row in descriptor_rows:
                    copy.write_row((ROOT_ID, *row))
            with cur.copy(f"COPY sessions ({SESSION_COLUMNS}) FROM STDIN") as copy:
                for row in session_rows:
                    copy.write_row(row)
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE sessions")
        conn.execute("ANALYZE descriptors")
    return {"sessions": sessions + 1, "events": 0, "max_depth": max_depth}


def _events(sessions: int, count: int):
    """A realistic cycle per session: descriptor, activated, message, turn_start, turn_end."""
    cycle = ("descriptor", "activated", "message", "turn_start", "turn_end", "settled")
    for n in range(count):
        k = n % sessions
        kind = cycle[(n // sessions) % len(cycle)]
        turn = _uuid(n + 1) if kind in ("message", "turn_start", "turn_end") else None
        if kind == "message":
            data = (
                f'{{"message_id":"{_uuid(n + 7)}","content":[{{"type":"text",'
                f'"text":"work item {n}: look into it and report back"}}],"source":'
                f'{{"kind":"coordinator","form":"spawn","sender_session_id":"{parent_of(k)}"}}}}'
            )
        elif kind == "descriptor":
            data = f'{{"version":1,"mode":"continuable","label":"task {k}"}}'
        elif kind == "turn_end":
            data = f'{{"turn_id":"{turn}","reason":"completed"}}'
        else:
            data = f'{{"activation_id":"{_uuid(n + 3)}","resume":false}}'
        yield (child_id(k), turn, kind, data, _iso(n))
