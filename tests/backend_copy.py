"""One history on both backends: every row of a SQLite database copied into a fresh, migrated
PostgreSQL database (generated keys kept), so the operator commands can be compared on it."""

from __future__ import annotations

import sqlite3

import psycopg

# descriptors before sessions: PostgreSQL's descriptor trigger clears the session's stored mode
TABLES = (
    "descriptors",
    "sessions",
    "events",
    "inbox",
    "idempotency",
    "owners",
    "leases",
    "signals",
    "spending",
    "trace_context",
)


def copy_into_postgres(sqlite_path: str, url: str) -> None:
    source = sqlite3.connect(sqlite_path)
    try:
        with psycopg.connect(url) as target:
            for table in TABLES:
                names = [
                    row[0]
                    for row in target.execute(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_name = %s ORDER BY ordinal_position",
                        (table,),
                    )
                ]
                rows = source.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall()
                if not rows:
                    continue
                marks = ", ".join(["%s"] * len(names))
                with target.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO {table} ({', '.join(names)}) OVERRIDING SYSTEM VALUE"
                        f" VALUES ({marks})",
                        rows,
                    )
            for table, key in (("events", "seq"), ("inbox", "position"), ("signals", "seq")):
                target.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', '{key}'),"
                    f" (SELECT coalesce(max({key}), 0) + 1 FROM {table}), false)"
                )
    finally:
        source.close()
