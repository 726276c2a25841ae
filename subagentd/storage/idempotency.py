"""Idempotency keys: a request's first result, kept per (caller, key) for the retention window."""

from __future__ import annotations

from subagentd.schema.records import IdempotencyRecord
from subagentd.storage.table_access import Connected


class IdempotencyKeys:
    """The `idempotency` table."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def get_idempotent(self, caller: str, key: str) -> IdempotencyRecord | None:
        row = self._db.conn.execute(
            "SELECT method, fingerprint, result FROM idempotency WHERE caller = ? AND key = ?",
            (caller, key),
        ).fetchone()
        return IdempotencyRecord(method=row[0], fingerprint=row[1], result=row[2]) if row else None

    def put_idempotent(self, caller: str, key: str, record: IdempotencyRecord, at: str) -> None:
        db = self._db
        db.begin()
        db.conn.execute(
            "INSERT INTO idempotency (caller, key, method, fingerprint, result, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (caller, key, record.method, record.fingerprint, record.result, at),
        )

    def prune_idempotent(self, before: str) -> None:
        """Forget keys recorded before `before` (the documented retention)."""
        db = self._db
        if db.conn.execute(
            "SELECT 1 FROM idempotency WHERE created_at < ? LIMIT 1", (before,)
        ).fetchone():
            db.begin()
            db.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (before,))
