"""Idempotency keys: a request's first result, kept per (caller, key) for the retention window."""

from __future__ import annotations

from subagentd.schema.records import IdempotencyRecord
from subagentd.storage.roots import inserting, pick, pick_insert, rooted
from subagentd.storage.table_access import Connected

_GET_SQL = rooted(
    "SELECT method, fingerprint, result FROM idempotency WHERE {root}caller = ? AND key = ?"
)
_PUT_SQL = inserting(
    "INSERT INTO idempotency (root_id, caller, key, method, fingerprint, result, created_at)"
    " VALUES ({root},?,?,?,?,?,?)"
)


class IdempotencyKeys:
    """The `idempotency` table."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def get_idempotent(self, caller: str, key: str) -> IdempotencyRecord | None:
        root = self._root(caller)
        row = self._db.conn.execute(*pick(_GET_SQL, root, (caller, key))).fetchone()
        return IdempotencyRecord(method=row[0], fingerprint=row[1], result=row[2]) if row else None

    def put_idempotent(self, caller: str, key: str, record: IdempotencyRecord, at: str) -> None:
        db = self._db
        db.begin()
        row = (caller, key, record.method, record.fingerprint, record.result, at)
        db.conn.execute(*pick_insert(_PUT_SQL, self._root(caller), caller, row))

    def _root(self, caller: str) -> str | None:
        """The caller's tree: the host's keys (caller "") are the tree "" of their own."""
        return "" if caller == "" else self._db.roots.root(caller)

    def prune_idempotent(self, before: str) -> None:
        """Forget keys recorded before `before` (the documented retention)."""
        db = self._db
        if db.conn.execute(
            "SELECT 1 FROM idempotency WHERE created_at < ? LIMIT 1", (before,)
        ).fetchone():
            db.begin()
            db.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (before,))
