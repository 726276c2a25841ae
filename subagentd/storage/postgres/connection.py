"""A psycopg 3 connection speaking the table objects' SQL: `?` and `:name` placeholders.

The SQLite tables (storage/sessions.py, inbox.py, ...) are shared by both backends where their SQL
is standard; this adapter only rewrites their placeholders to psycopg's (`%s`, `%(name)s`), once
per statement text. Dialect differences are not rewritten here: postgres/tables.py overrides the
few methods whose SQL differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq

from subagentd.storage.deferred import Deferred, Row

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_ACTIVE = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


def to_psycopg(sql: str) -> str:
    """`?` → `%s`, `:name` → `%(name)s` (a literal `%` doubled); the SQL never quotes either."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%").replace("?", "%s"))


class PgConnection:
    """The autocommit psycopg connection every table reads and writes through; transactions are
    begun and ended explicitly by the group commit (postgres/group.py)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn
        self._sql: dict[str, str] = {}
        self.held = Deferred()  # rows the open group holds back (postgres/group.py `defer`)
        self.unheld = _Unheld(self)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """The psycopg cursor of the statement (typed loosely, as sqlite3's rows are); the rows
        held back run first, so every statement sees every write."""
        if self.held:
            self.held.run(self.unheld)
        return self.raw.execute(self.text(sql), params)

    def text(self, sql: str) -> str:
        """The statement with psycopg's placeholders (converted once per text)."""
        text = self._sql.get(sql)
        if text is None:
            text = self._sql[sql] = to_psycopg(sql)
        return text

    def cursor(self) -> psycopg.Cursor[Any]:
        return self.raw.cursor()

    @property
    def in_transaction(self) -> bool:
        """True from BEGIN to COMMIT/ROLLBACK, also once a failed statement aborted it."""
        return self.raw.info.transaction_status in _ACTIVE

    @property
    def failed(self) -> bool:
        """The open transaction was aborted by a failed statement (COMMIT would roll it back)."""
        return self.raw.info.transaction_status == pq.TransactionStatus.INERROR

    @property
    def lost(self) -> bool:
        """The server dropped the connection (a restart, a failover, a network failure)."""
        return self.raw.closed or self.raw.pgconn.status == pq.ConnStatus.BAD

    def close(self) -> None:
        self.raw.close()


class _Unheld:
    """The connection's statements without running the held rows first (they are being run)."""

    def __init__(self, conn: PgConnection) -> None:
        self.conn = conn

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, /) -> object:
        return self.conn.raw.execute(self.conn.text(sql))

    def executemany(self, sql: str, rows: list[Row], /) -> object:
        with self.conn.raw.cursor() as cursor:
            cursor.executemany(self.conn.text(sql), rows)
        return None
