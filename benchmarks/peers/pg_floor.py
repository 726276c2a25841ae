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
coordinate processes and the floor is one. tests/test_bench_pg_floor.py compares the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import psycopg
from sqlite_floor import message_rows  # the rows, built exactly as for the SQLite floor

from subagentd.storage.postgres.store import connect

_INSERT = (
    "INSERT INTO inbox (message_id, session_id, content, source, state, created_at)"
    " VALUES (%s,%s,%s,%s,%s,%s)"
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a database subagentd's migrations created")
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--group", type=int, required=True, help="rows per commit")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--caller", default="r0")
    parser.add_argument("--target", default="k0")
    parser.add_argument("--prefix", default="m", help="message i's text is PREFIX + i")
    args = parser.parse_args(argv)
    conn = connect(args.db, args.durability)
    insert_burst(conn, args.caller, args.target, ["warm-up"] * 100, 1)  # as sqlite_floor.py
    trials = []
    for trial in range(args.trials):
        texts = [f"{args.prefix}{trial * args.messages + i}" for i in range(args.messages)]
        trials.append(insert_burst(conn, args.caller, args.target, texts, args.group))
    conn.close()
    seconds = sorted(trials)[len(trials) // 2]
    result = {
        "requests": args.messages,
        "group": args.group,
        "seconds": seconds,
        "per_s": args.messages / seconds,
        "samples_s": trials,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
