"""False reaps between two processes on one database: process a spawns N children
while process b idles with a running child of its own, both with a short --lease-ttl; afterwards
the database and both hosts show whether anything live was taken for crashed.

    python benchmarks/false_reaps.py --spawns 30000 --ttl 3 --shape batch
    python benchmarks/false_reaps.py --spawns 10000 --ttl 1 --shape frames

`batch`: one batch frame (one group commit: a holds the write lock throughout); `frames`: one
frame per spawn, written at once (group commits back to back, a's event loop never idle). Every
figure printed must be 0 except the spawn count and the time a was busy.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.spawned import RpcError, ServerProcess  # noqa: E402


def started(db: str, ttl: str) -> ServerProcess:
    """A server whose database is open and migrated before the next one starts."""
    proc = ServerProcess("--lease-ttl", ttl, db=db)
    proc.host.initialize()
    try:
        proc.host.call("agents/get", {"agent_id": "-"})  # waits for the database
    except RpcError:
        pass
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=30000)
    parser.add_argument("--ttl", default="3")
    parser.add_argument("--shape", choices=["batch", "frames"], default="batch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "shared.db")
        a = started(db, args.ttl)
        b = started(db, args.ttl)
        try:
            b.host.open("broot")
            b.host.spawn("broot", "bchild")
            a.host.open("root")
            a.host.spawn("root", "c0")
            spawns = [
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "agents/spawn",
                    "params": {"caller": "root", "child_id": f"k{i}", "label": "w", "prompt": "go"},
                }
                for i in range(args.spawns)
            ]
            began = time.monotonic()
            if args.shape == "batch":
                a.host.send(spawns)
                while not isinstance(a.host.read_any(3600), list):
                    pass
            else:
                a.host.send_bytes(b"".join(json.dumps(s).encode() + b"\n" for s in spawns))
                a.host.response(args.spawns - 1, 3600)
            busy = time.monotonic() - began
            b.host.settle_quietly(3 * float(args.ttl))  # several heartbeats of both
            a.host.settle_quietly(0.1)
            conn = sqlite3.connect(db, timeout=60)
            crash_ends = conn.execute(
                "SELECT count(*) FROM events WHERE type = 'turn_end' AND data LIKE '%\"crash\"%'"
            ).fetchone()[0]
            notices = conn.execute(
                "SELECT count(*) FROM inbox WHERE source LIKE '%subagent-settled%'"
            ).fetchone()[0]
            fenced = conn.execute("SELECT count(*) FROM owners WHERE fenced = 1").fetchone()[0]
            conn.close()
            settled = sum(
                1
                for host in (a.host, b.host)
                for note in host.notifications
                if note["method"] == "agent/settled"
            )
            print(
                f"shape={args.shape} spawns={args.spawns} ttl={args.ttl}s busy={busy:.1f}s"
                f" crash_ends={crash_ends} failed_notices={notices} fenced_owners={fenced}"
                f" agent_settled={settled}"
            )
        finally:
            for proc in (a, b):
                proc.proc.kill()
                proc.stop()


if __name__ == "__main__":
    main()
