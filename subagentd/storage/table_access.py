"""What every table object needs of the database (GroupCommit provides it; tables never import it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable
from typing import Any, Protocol

from subagentd.storage.roots import Roots


class Connected(Protocol):
    """What a table needs of the database: the connection, and a write transaction on demand."""

    conn: sqlite3.Connection
    roots: Roots  # each row's tree, as this process knows it

    def begin(self) -> None: ...
    def defer(self, sql: str, row: tuple[object, ...]) -> None: ...
    def ring_after_commit(self, address: str) -> None: ...
    def reads(self) -> dict[Hashable, Any] | None: ...
