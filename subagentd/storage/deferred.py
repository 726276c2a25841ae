"""Writes a group holds back: statements nothing reads the answer of, run together later, request
savepoints opened late.

A burst of sends writes one row each, and a turn's start updates a few rows; run one statement at
a time, each would also be a round trip to PostgreSQL and each request would need its own
SAVEPOINT and RELEASE. Held here instead, they run in order just before the connection's next
statement (or the COMMIT), the consecutive rows of one statement in one executemany, and a
request's savepoint is opened only when it runs a statement of its own, at the place in the held
writes where the request began (storage/transactions.py `GroupCommit` and postgres/group.py
`PgGroupCommit` own the transaction and its failures).
"""

from __future__ import annotations

from typing import Protocol

Row = tuple[object, ...]
Pending = tuple[str, int]  # a request's savepoint name, and how many writes came before it


class BatchConnection(Protocol):
    """What running the rows needs of a connection (sqlite3's, or postgres/connection.py's)."""

    def execute(self, sql: str, /) -> object: ...
    def executemany(self, sql: str, rows: list[Row], /) -> object: ...


class DeferredWrites:
    """The writes not yet run, each a statement and its parameters, and the savepoints of
    requests not yet opened."""

    __slots__ = ("writes", "unopened")

    def __init__(self) -> None:
        self.writes: list[tuple[str, Row]] = []
        self.unopened: list[Pending] = []

    def __bool__(self) -> bool:
        return bool(self.writes or self.unopened)

    def add(self, sql: str, row: Row) -> None:
        """Hold one write: `sql` with the parameters `row`."""
        self.writes.append((sql, row))

    def run(self, conn: BatchConnection) -> None:
        """Run the held writes in order, opening the pending savepoints between them where they
        began (each request's writes inside its own). On a failure (the driver's error) nothing
        stays held (the caller abandons the group: earlier requests' writes were in it)."""
        writes = self.writes
        try:
            done = 0
            for name, mark in self.unopened:
                _run_writes(conn, writes, done, mark)
                done = mark
                conn.execute(f"SAVEPOINT {name}")
            _run_writes(conn, writes, done, len(writes))
        finally:
            self.clear()

    def clear(self) -> None:
        self.writes.clear()
        self.unopened.clear()

    def begin_request(self, name: str) -> Pending:
        """A later request of the group begins: its savepoint, opened at its first statement."""
        pending = (name, len(self.writes))
        self.unopened.append(pending)
        return pending

    def end_request(self, pending: Pending, failed: bool) -> bool:
        """The request ended; True when it never ran a statement (its savepoint was never opened):
        on failure its writes are dropped, on success they stay held, in the group. False: its
        savepoint is open, and the caller releases or rolls back to it (after a failure, every
        held write came after that savepoint opened, so none is kept)."""
        unopened = self.unopened
        if unopened and unopened[-1] is pending:
            unopened.pop()
            if failed:
                del self.writes[pending[1] :]
            return True
        if failed:
            self.writes.clear()
        return False


def _run_writes(conn: BatchConnection, writes: list[tuple[str, Row]], start: int, end: int) -> None:
    """writes[start:end], each run of one statement's consecutive rows as one executemany."""
    while start < end:
        sql = writes[start][0]
        stop = start + 1
        while stop < end and writes[stop][0] == sql:
            stop += 1
        conn.executemany(sql, [row for _, row in writes[start:stop]])
        start = stop
