"""The PostgreSQL backend (`--db postgresql://...`): one package, the same Store as SQLite.

Only this module is imported to tell the backends apart (psycopg loads with postgres/store.py).
"""

from __future__ import annotations

URL_PREFIXES = ("postgresql://", "postgres://")


def is_postgres(db: str) -> bool:
    """Whether `--db` names a PostgreSQL database (a libpq URL) rather than a SQLite file."""
    return db.startswith(URL_PREFIXES)
