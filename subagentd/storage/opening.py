"""Opening the database file: created private, checked at start, refused in one line if unusable.

Everything here is cheap (os, sqlite3, no sqlite-utils), so start-up runs it before the host's
handshake is answered: a database subagentd cannot use fails before `initialize` gets a reply.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time

import msgspec

from subagentd.storage.migrations import migrations

log = logging.getLogger("subagentd")

MIGRATIONS_TABLE = "_sqlite_migrations"  # where sqlite-utils records applied migrations


class DatabaseRefusedError(Exception):
    """The database cannot be used as it is; the message is the line start-up prints."""


class OpenedDatabase(msgspec.Struct):
    """A checked connection, handed from the start-up thread to the store."""

    conn: sqlite3.Connection
    path: str
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened
    applied: set[str] = msgspec.field(default_factory=set)  # migrations found applied


def open_database(
    path: str, *, durability: str = "normal", busy_timeout_ms: int = 5000
) -> OpenedDatabase:
    """Open `path` (or `:memory:`) and prove it usable: writable, and no newer than this build."""
    on_disk = path != ":memory:"
    if on_disk:
        _create_privately(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise DatabaseRefusedError(_describe(path, exc)) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if on_disk:
            _use_wal(conn, busy_timeout_ms / 1000)
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = OFF")
        opened = OpenedDatabase(conn, path, applied=applied_migrations(conn))
        refuse_unknown(path, opened.applied)
        if on_disk:
            _probe_write(conn)
            st = os.stat(path)
            opened.identity = (st.st_dev, st.st_ino)
    except sqlite3.Error as exc:
        conn.close()
        raise DatabaseRefusedError(_describe(path, exc)) from None
    except BaseException:
        conn.close()
        raise
    return opened


def applied_migrations(conn: sqlite3.Connection) -> set[str]:
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone():
        return set()
    return {
        name
        for (name,) in conn.execute(
            f"SELECT name FROM {MIGRATIONS_TABLE} WHERE migration_set = ?", (migrations.name,)
        )
    }


def refuse_unknown(path: str, applied: set[str]) -> None:
    """A migration this build does not know means a newer subagentd wrote the database."""
    unknown = sorted(applied.difference(migrations.names))
    if unknown:
        raise DatabaseRefusedError(
            f"database {path} was written by a newer subagentd:"
            f" unknown migration {', '.join(unknown)}"
        )


def _create_privately(path: str) -> None:
    """A new file is created 0600 (SQLite gives its -wal and -shm the same mode), never through
    a symlink; an existing one open to group or others is worth a warning."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # also a symlink, dangling or not: O_EXCL never follows one
        pass
    except OSError as exc:
        raise DatabaseRefusedError(f"database {path} cannot be created: {exc.strerror}") from None
    else:
        os.close(fd)
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DatabaseRefusedError(
                f"database {path} is a symlink to a missing file ({os.readlink(path)});"
                " it is not created through the link"
            ) from None
        raise DatabaseRefusedError(f"database {path} vanished while opening it") from None
    except OSError as exc:
        raise DatabaseRefusedError(f"database {path} cannot be opened: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseRefusedError(f"database {path} is not a regular file")
    if st.st_mode & 0o066:
        log.warning(
            "database %s is open to group or others (mode %04o): chmod 600 it to keep its"
            " sessions private",
            path,
            stat.S_IMODE(st.st_mode),
        )


def _use_wal(conn: sqlite3.Connection, patience: float) -> None:
    """Switch to WAL. Processes switching a new file at the same moment get SQLITE_BUSY at once
    (SQLite does not call the busy handler for it: 27 of 600 in a test), so retry a while."""
    deadline = time.monotonic() + patience
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _error_name(exc).startswith("SQLITE_BUSY") or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _probe_write(conn: sqlite3.Connection) -> None:
    """A write that changes nothing, rolled back: a read-only file, directory or mount, or an
    immutable file, fails here rather than at the first request (BEGIN alone does not)."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if _error_name(exc).startswith("SQLITE_BUSY"):
            return  # another process is writing: the file is writable, and our writes will wait
        raise
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _error_name(exc: sqlite3.Error) -> str:
    return getattr(exc, "sqlite_errorname", None) or ""


def _describe(path: str, exc: sqlite3.Error) -> str:
    name = _error_name(exc)
    if name == "SQLITE_READONLY_DIRECTORY":
        return (
            f"database {path} is read-only: its directory is not writable"
            " (SQLite keeps its -wal and -shm files beside it)"
        )
    if name.startswith("SQLITE_READONLY"):
        return (
            f"database {path} is read-only: the file cannot be written"
            " (its mode or owner, an immutable flag, or a read-only mount)"
        )
    if name == "SQLITE_NOTADB":
        return f"{path} is not a SQLite database"
    return f"database {path} cannot be opened: {exc}"
