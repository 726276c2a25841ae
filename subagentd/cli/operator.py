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
            "a PostgreSQL URL needs psycopg: pip install 'subagentd[postgres]'"
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


def run_prune(path: str, older_than: float) -> int:
    """Prune the settled trees untouched for `older_than` seconds; say what was freed."""
    from subagentd.storage.prune import SqliteTarget, prune

    try:
        if is_postgres(path):
            from subagentd.storage.postgres.reading import PgTarget

            pg = _connect_postgres(path, read_only=False)
            try:
                done = prune(PgTarget(pg, BUSY_WAIT_MS), older_than)
            finally:
                pg.close()
        else:
            conn = _connect(path, read_only=False)
            try:
                done = prune(SqliteTarget(conn), older_than)
            finally:
                conn.close()
    except DatabaseMissingError as exc:
        print(f"subagentd prune: {exc}", file=sys.stderr)
        return 1
    except _failures() as exc:
        print(f"subagentd prune: cannot prune {_shown(path)}: {exc}", file=sys.stderr)
        return 1
    counted = (
        f"pruned {done.trees} settled tree(s): {done.events} event(s), {done.messages} message(s);"
    )
    if is_postgres(path):
        print(
            f"{counted} {done.row_bytes} bytes of rows deleted from {_shown(path)}"
            " (reused by later writes once VACUUM, or autovacuum, has run)"
        )
    else:
        print(f"{counted} {done.freed_bytes} bytes freed inside {path} (reused by later writes)")
    return 0
