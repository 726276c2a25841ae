"""The PostgreSQL backend (`--db postgresql://...`): one package, the same Store as SQLite.

Only this module is imported to tell the backends apart (psycopg loads with postgres/store.py).
"""

from __future__ import annotations

URL_PREFIXES = ("postgresql://", "postgres://")


def is_postgres(db: str) -> bool:
    """Whether `--db` names a PostgreSQL database (a libpq URL) rather than a SQLite file."""
    return db.startswith(URL_PREFIXES)


def sqlite_only(command: str) -> str:
    """The refusal of an operator command that reads SQLite files only."""
    return (
        f"subagentd {command}: --db names a PostgreSQL database; `subagentd {command}` reads SQLite"
        " files only (a running server answers server/stats on PostgreSQL too)"
    )
