"""The physical floor for durable writes: the rows a pipelined send_message burst writes, inserted
straight through sqlite3 (no server, no pipes, no JSON-RPC), with the server's PRAGMAs and groups.

    python benchmarks/peers/sqlite_floor.py --db DB --durability normal --messages 5000 --group 526

DB must already have subagentd's schema (run.py lets the server create it). What one
send_message to a busy continuable child writes is one `inbox` row (storage/inbox.py
insert_message, called by core/engine.py accept): no event, since the message only gets its
`message` event when its turn starts. tests/project/test_bench_floor.py compares the rows of both.
The server commits once per chunk of input it reads (server/connection.py), so a pipelined burst
commits in groups of what one pipe buffer holds; run.py passes that size (README: "floor").
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from subagentd.core.stamps import mint  # the ids the server mints, the same way

_encode = msgspec.json.Encoder().encode
# one burst: (connection, caller, target, texts, rows per commit) -> seconds taken
Burst = Callable[[Any, str, str, list[str], int], float]
_INSERT = (
    "INSERT INTO inbox (root_id, message_id, session_id, content, source, state, created_at)"
    " VALUES (?,?,?,?,?,?,?)"
)


def connect(path: str, durability: str) -> sqlite3.Connection:
    """A connection set up as storage/opening.py sets the server's for this --durability."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
    conn.execute("PRAGMA foreign_keys = OFF")
    return conn


_second = [-1, ""]  # the last whole second formatted, reused as core/stamps.py does


def now() -> str:
    """UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the form (and the cost) of core/stamps.py now()."""
    t = time.time()
    whole = int(t)
    if whole != _second[0]:
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{_second[1]}.{int((t - whole) * 1_000_000):06d}Z"


def message_rows(
    caller: str, target: str, texts: list[str]
) -> Iterator[tuple[str, str, str, str, str, str, str]]:
    """The inbox row of each send_message {caller, subagent_id: target, message: text}; the
    caller is the tree's root (root_id), as in the benchmarks' trees."""
    source = _encode({"kind": "coordinator", "form": "relay", "sender_session_id": caller}).decode()
    for text in texts:
        content = _encode([{"type": "text", "text": text}]).decode()
        yield (caller, mint(), target, content, source, "queued", now())


def insert_burst(
    conn: sqlite3.Connection, caller: str, target: str, texts: list[str], group: int
) -> float:
    """Insert one row per text, `group` rows per BEGIN IMMEDIATE … COMMIT; seconds taken."""
    t0 = time.perf_counter()
    for start in range(0, len(texts), group):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT, message_rows(caller, target, texts[start : start + group]))
        conn.execute("COMMIT")
    return time.perf_counter() - t0


def arguments(doc: str, db_help: str, caller: str, target: str) -> argparse.ArgumentParser:
    """The command line both floors take (this one and pg_floor.py)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--db", required=True, help=db_help)
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--group", type=int, required=True, help="rows per commit")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--caller", default=caller)
    parser.add_argument("--target", default=target)
    return parser


def measure(conn: Any, burst: Burst, args: argparse.Namespace, prefix: str) -> int:
    """100 single-row commits (as run.py's 100 round trips warm the server up), then the trials;
    prints the median and the samples as one JSON line and closes the connection."""
    burst(conn, args.caller, args.target, ["warm-up"] * 100, 1)
    trials = []
    for trial in range(args.trials):
        texts = [f"{prefix}{trial * args.messages + i}" for i in range(args.messages)]
        trials.append(burst(conn, args.caller, args.target, texts, args.group))
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


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__ or "", "a database with subagentd's schema", "root", "c0")
    args = parser.parse_args(argv)
    return measure(connect(args.db, args.durability), insert_burst, args, "follow-up ")


if __name__ == "__main__":
    sys.exit(main())
