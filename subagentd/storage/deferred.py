"""Writes a group holds back: inbox rows run as one executemany, request savepoints opened late.

A burst of sends writes one row each; run one statement at a time, each request would also need
its own SAVEPOINT and RELEASE. Held here instead, the rows run together just before the
connection's next statement (or the COMMIT), and a request's savepoint is opened only when it
runs a statement of its own, at the place in the rows where the request began
(storage/transactions.py `GroupCommit` and postgres/group.py `PgGroupCommit` own the transaction
and its failures).
"""

from __future__ import annotations

from typing import Protocol

Row = tuple[object, ...]
Pending = tuple[str, int]  # a request's savepoint name, and how many rows came before it


class BatchConnection(Protocol):
    """What running the rows needs of a connection (sqlite3's, or postgres/connection.py's)."""

    def execute(self, sql: str, /) -> object: ...
    def executemany(self, sql: str, rows: list[Row], /) -> object: ...


class DeferredWrites:
    """The rows of one INSERT not yet run, and the savepoints of requests not yet opened."""

    __slots__ = ("sql", "rows", "unopened")

    def __init__(self) -> None:
        self.sql = ""
        self.rows: list[Row] = []
        self.unopened: list[Pending] = []

    def __bool__(self) -> bool:
        return bool(self.rows or self.unopened)

    def add(self, conn: BatchConnection, sql: str, row: Row) -> None:
        """Hold one row of `sql`; rows of another statement held before it run first."""
        if sql != self.sql:
            if self.rows:
                self.run(conn)
            self.sql = sql
        self.rows.append(row)

    def run(self, conn: BatchConnection) -> None:
        """Run the held rows, opening the pending savepoints between them where they began (each
        request's rows inside its own). On a failure (the driver's error) nothing stays held (the caller abandons the
        group: earlier requests' rows were in it)."""
        rows = self.rows
        try:
            done = 0
            for name, mark in self.unopened:
                if mark > done:
                    conn.executemany(self.sql, rows[done:mark])
                    done = mark
                conn.execute(f"SAVEPOINT {name}")
            if len(rows) > done:
                conn.executemany(self.sql, rows[done:] if done else rows)
        finally:
            self.clear()

    def clear(self) -> None:
        self.rows.clear()
        self.unopened.clear()

    def begin_request(self, name: str) -> Pending:
        """A later request of the group begins: its savepoint, opened at its first statement."""
        pending = (name, len(self.rows))
        self.unopened.append(pending)
        return pending

    def end_request(self, pending: Pending, failed: bool) -> bool:
        """The request ended; True when it never ran a statement (its savepoint was never opened):
        on failure its rows are dropped, on success they stay held, in the group. False: its
        savepoint is open, and the caller releases or rolls back to it (after a failure, every
        held row came after that savepoint opened, so none is kept)."""
        unopened = self.unopened
        if unopened and unopened[-1] is pending:
            unopened.pop()
            if failed:
                del self.rows[pending[1] :]
            return True
        if failed:
            self.rows.clear()
        return False
