"""`subagentd stats` and `subagentd prune`: an operator's view of a database, and its retention."""

from __future__ import annotations

import os
import sqlite3
import sys
from urllib.parse import quote

import msgspec

BUSY_WAIT_MS = 10_000  # prune waits this long for a serving process's write lock


class DatabaseMissingError(Exception):
    """No database file at the path given."""


def _connect(path: str, *, read_only: bool) -> sqlite3.Connection:
    """Open an existing database (never create one), read-only when asked."""
    if not os.path.isfile(path):
        raise DatabaseMissingError(f"no database file at {path}")
    mode = "ro" if read_only else "rw"
    conn = sqlite3.connect(
        f"file:{quote(os.path.abspath(path))}?mode={mode}", uri=True, isolation_level=None
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_WAIT_MS}")
    return conn


def print_stats(path: str) -> int:
    """Print the database's figures as one JSON object (the live-only figures absent)."""
    from subagentd.storage.stats import read_stats

    try:
        conn = _connect(path, read_only=True)
        try:
            figures = read_stats(conn)
        finally:
            conn.close()
    except (DatabaseMissingError, sqlite3.Error) as exc:
        print(f"subagentd stats: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(figures)) + b"\n")
    sys.stdout.flush()
    return 0


def run_prune(path: str, older_than: float, dry_run: bool = False) -> int:
    """Prune the settled trees untouched for `older_than` seconds; say what was freed (with
    `dry_run`, each tree that would go and what would be freed; nothing is deleted)."""
    from subagentd.storage.prune import prune

    try:
        conn = _connect(path, read_only=False)
        try:
            done = prune(conn, older_than, dry_run=dry_run)
        finally:
            conn.close()
    except (DatabaseMissingError, sqlite3.Error) as exc:
        print(f"subagentd prune: cannot prune {path}: {exc}", file=sys.stderr)
        return 1
    age = _age(older_than)
    if not dry_run:
        print(
            f"pruned {done.trees} settled tree(s) untouched for {age}: {done.events} event(s),"
            f" {done.messages} message(s); {done.freed_bytes} bytes freed inside {path}"
            " (reused by later writes)"
        )
        return 0
    for tree in done.each:
        print(
            f"would prune tree {tree.root} ({tree.sessions} session(s)): {tree.events} event(s),"
            f" {tree.messages} message(s)"
        )
    print(
        f"would prune {done.trees} settled tree(s) untouched for {age}: {done.events} event(s),"
        f" {done.messages} message(s); {done.freed_bytes} bytes would be freed inside {path}"
        " (--dry-run: nothing was deleted)"
    )
    return 0


def _age(seconds: float) -> str:
    """A duration as the largest unit that divides it: 30d, 12h, 90m, 45s."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
