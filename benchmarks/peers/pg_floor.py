"""The PostgreSQL floor for durable writes: the rows a pipelined send_message burst writes,
inserted straight through psycopg (no server, no pipes, no JSON-RPC), with the server's session
settings and groups.

    python benchmarks/peers/pg_floor.py --db URL --messages 5000 --group 600

URL must be a database subagentd's migrations created (run.py lets the server create it). The row
is the one PgInbox.insert_message (storage/postgres/tables.py) writes for a send_message to a busy
child, built by sqlite_floor.py's message_rows (the same columns and encodings); the connection
is the server's own (storage/postgres/store.py connect: autocommit, jit off, synchronous_commit
on for --durability full). Each group is one BEGIN, executemany, COMMIT: without the writer's
advisory lock and fencing check the server's group commit adds (postgres/group.py), since those
coordinate processes and the floor is one. tests/project/test_bench_pg_floor.py compares the rows.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import psycopg
from sqlite_floor import (  # the rows built exactly as for the SQLite floor, the same runs
    arguments,
    measure,
    message_rows,
)

from subagentd.storage.postgres.store import connect

_INSERT = (
    "INSERT INTO inbox (root_id, message_id, session_id, content, source, state, created_at)"
    " VALUES (%s,%s,%s,%s,%s,%s,%s)"
)


def insert_burst(
    conn: psycopg.Connection[Any], caller: str, target: str, texts: list[str], group: int
) -> float:
    """Insert one row per text, `group` rows per BEGIN … COMMIT; seconds taken."""
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        for start in range(0, len(texts), group):
            cur.execute("BEGIN")
            cur.executemany(_INSERT, message_rows(caller, target, texts[start : start + group]))
            cur.execute("COMMIT")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__ or "", "a database subagentd's migrations created", "r0", "k0")
    parser.add_argument("--prefix", default="m", help="message i's text is PREFIX + i")
    args = parser.parse_args(argv)
    return measure(connect(args.db, args.durability), insert_burst, args, args.prefix)


if __name__ == "__main__":
    sys.exit(main())
