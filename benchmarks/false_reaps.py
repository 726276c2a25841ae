"""False reaps between two processes on one database: process a spawns N children
while process b idles with a running child of its own, both with a short --lease-ttl; afterwards
the database and both hosts show whether anything live was taken for crashed.

    python benchmarks/false_reaps.py --spawns 30000 --ttl 3 --shape batch
    python benchmarks/false_reaps.py --spawns 10000 --ttl 1 --shape frames

`batch`: one batch frame (one group commit: a holds the write lock throughout); `frames`: one
frame per spawn, written at once (group commits back to back, a's event loop never idle).
Without spawns, the time nobody's database answered:

    python benchmarks/false_reaps.py --ttl 1 --shape writer     # an external SQLite writer
    python benchmarks/false_reaps.py --ttl 1 --shape stall      # PostgreSQL stopped (SIGSTOP)
    python benchmarks/false_reaps.py --ttl 1 --shape namespace  # b in another PID namespace

`writer`: another connection holds SQLite's write lock for 2.5 TTLs (a long `prune`, say);
`stall`: both processes on a throwaway PostgreSQL whose processes are stopped for 2.5 TTLs;
`namespace`: b runs in its own PID namespace (`unshare`, as root) with the same hostname.
Every figure printed must be 0 except the spawn count and the time a was busy.
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

STALLS = ("writer", "stall", "namespace")


def started(db: str, ttl: str, namespace: bool = False) -> ServerProcess:
    """A server whose database is open and migrated before the next one starts (in a PID
    namespace of its own with `namespace`)."""
    if namespace:
        inner = [sys.executable, "-m", "subagentd", "--db", db, "--lease-ttl", ttl]
        code = f"import os; os.execvp('unshare', {['unshare', '--pid', '--fork', '--mount-proc', *inner]!r})"
        proc = ServerProcess(argv=["-c", code])
    else:
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
    parser.add_argument("--shape", choices=["batch", "frames", *STALLS], default="batch")
    args = parser.parse_args()
    server = None
    if args.shape == "stall":
        from tests.pg import PostgresServer

        server = PostgresServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "shared.db")
            if server is not None:
                db = server.url(server.new_database(), tcp=True)
            run(args, db, server)
    finally:
        if server is not None:
            server.stop()


def stall(shape: str, db: str, server: object, seconds: float) -> None:
    """Nobody's database answers for `seconds`: an external writer, or PostgreSQL stopped."""
    if shape == "writer":
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE sessions SET label = label WHERE id = 'root'")
        time.sleep(seconds)
        writer.execute("COMMIT")
        writer.close()
        return
    import signal

    postmaster = int((Path(server.data) / "postmaster.pid").read_text().split()[0])  # type: ignore[attr-defined]
    pids = [postmaster] + [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and _parent(entry) == postmaster
    ]
    _signalled(pids, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        _signalled(pids, signal.SIGCONT)


def _signalled(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # a server process that ended meanwhile
            pass


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def figures(db: str) -> tuple[int, int, int]:
    """Crash ends, failure notices and fenced owners in the database."""
    if db.startswith("postgresql://"):
        import psycopg

        conn = psycopg.connect(db)
    else:
        conn = sqlite3.connect(db, timeout=60)  # type: ignore[assignment]
    try:
        crash_ends = conn.execute(
            "SELECT count(*) FROM events WHERE type = 'turn_end' AND data LIKE '%\"crash\"%'"
        ).fetchone()[0]
        notices = conn.execute(
            "SELECT count(*) FROM inbox WHERE source LIKE '%subagent-settled%'"
        ).fetchone()[0]
        fenced = conn.execute("SELECT count(*) FROM owners WHERE fenced = 1").fetchone()[0]
    finally:
        conn.close()
    return crash_ends, notices, fenced


def run(args: argparse.Namespace, db: str, server: object) -> None:
    """One run: a and b serving, the shape applied, the figures printed."""
    if args.shape in STALLS:
        args.spawns = 0
    a = started(db, args.ttl)
    b = started(db, args.ttl, namespace=args.shape == "namespace")
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
        if args.shape in STALLS:
            if args.shape != "namespace":
                stall(args.shape, db, server, 2.5 * float(args.ttl))
        elif args.shape == "batch":
            a.host.send(spawns)
            while not isinstance(a.host.read_any(3600), list):
                pass
        else:
            a.host.send_bytes(b"".join(json.dumps(s).encode() + b"\n" for s in spawns))
            a.host.response(args.spawns - 1, 3600)
        busy = time.monotonic() - began
        b.host.settle_quietly(3 * float(args.ttl))  # several heartbeats of both
        a.host.settle_quietly(0.1)
        crash_ends, notices, fenced = figures(db)
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
