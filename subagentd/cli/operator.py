"""`subagentd stats` and `subagentd prune`: an operator's view of a database, and its retention,
on a SQLite file or a PostgreSQL URL."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from typing import Any
from urllib.parse import quote

import msgspec

from subagentd.extras import missing
from subagentd.storage.postgres import is_postgres

BUSY_WAIT_MS = 10_000  # prune waits this long for a serving process's write lock (each batch)


class DatabaseMissingError(Exception):
    """No database file at the path given, or a PostgreSQL database that cannot be read."""


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


def _connect_postgres(url: str, *, read_only: bool) -> Any:
    """An operator's connection to a PostgreSQL database (postgres/reading.py)."""
    try:
        from subagentd.storage.postgres.reading import PgOperatorError, connect
    except ImportError:
        raise DatabaseMissingError(
            missing("postgres", "a PostgreSQL URL") or "a PostgreSQL URL needs psycopg"
        ) from None
    try:
        return connect(url, read_only=read_only)
    except PgOperatorError as exc:
        raise DatabaseMissingError(str(exc)) from None


def _failures() -> tuple[type[Exception], ...]:
    """What a failed read or write raises, on either backend."""
    failures: tuple[type[Exception], ...] = (sqlite3.Error,)
    if "psycopg" in sys.modules:
        failures += (sys.modules["psycopg"].Error,)
    return failures


def _shown(path: str) -> str:
    if is_postgres(path):
        from subagentd.storage.postgres.store import shown

        return shown(path)
    return path


def print_stats(path: str) -> int:
    """Print the database's figures as one JSON object (the live-only figures absent)."""
    try:
        if is_postgres(path):
            from subagentd.storage.postgres.stats import read_stats as read_pg_stats

            pg = _connect_postgres(path, read_only=True)
            try:
                figures = read_pg_stats(pg, time.time())
            finally:
                pg.close()
        else:
            from subagentd.storage.stats import read_stats

            conn = _connect(path, read_only=True)
            try:
                figures = read_stats(conn)
            finally:
                conn.close()
    except DatabaseMissingError as exc:
        print(f"subagentd stats: {exc}", file=sys.stderr)
        return 1
    except _failures() as exc:
        print(f"subagentd stats: cannot read {_shown(path)}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(figures)) + b"\n")
    sys.stdout.flush()
    return 0


def run_prune(path: str, older_than: float, dry_run: bool = False) -> int:
    """Prune the settled trees untouched for `older_than` seconds; say what was freed (with
    `dry_run`, each tree that would go and what would be freed; nothing is deleted)."""
    from subagentd.storage.prune import SqliteTarget, prune

    try:
        if is_postgres(path):
            from subagentd.storage.postgres.reading import PgTarget

            pg = _connect_postgres(path, read_only=False)
            try:
                done = prune(PgTarget(pg, BUSY_WAIT_MS), older_than, dry_run=dry_run)
            finally:
                pg.close()
        else:
            conn = _connect(path, read_only=False)
            try:
                done = prune(SqliteTarget(conn), older_than, dry_run=dry_run)
            finally:
                conn.close()
    except DatabaseMissingError as exc:
        print(f"subagentd prune: {exc}", file=sys.stderr)
        return 1
    except _failures() as exc:
        print(f"subagentd prune: cannot prune {_shown(path)}: {exc}", file=sys.stderr)
        return 1
    age = _age(older_than)
    for tree in done.each:
        print(
            f"would prune tree {tree.root} ({tree.sessions} session(s)): {tree.events} event(s),"
            f" {tree.messages} message(s)"
        )
    verb = "would prune" if dry_run else "pruned"
    counted = (
        f"{verb} {done.trees} settled tree(s) untouched for {age}: {done.events} event(s),"
        f" {done.messages} message(s);"
    )
    would = " would be" if dry_run else ""
    after = " (--dry-run: nothing was deleted)" if dry_run else " (reused by later writes)"
    if is_postgres(path):
        print(
            f"{counted} {done.row_bytes} bytes of rows{would or ''} deleted from {_shown(path)}"
            + (
                after
                if dry_run
                else " (reused by later writes once VACUUM, or autovacuum, has run)"
            )
        )
    else:
        print(f"{counted} {done.freed_bytes} bytes{would} freed inside {path}{after}")
    if done.tasks:
        print(f"{verb} {done.tasks} expired MCP task(s)")
    return 0


def _age(seconds: float) -> str:
    """A duration as the largest unit that divides it: 30d, 12h, 90m, 45s."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
