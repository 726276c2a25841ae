"""Signals between processes sharing one database: a durable row for each input whose target
another process holds live, and a doorbell that wakes that process to take its rows.

The rows are the truth (written in the sender's write transaction, with the input itself); the
ring is only a hint sent after the commit, a UDP datagram to the owner's address on this host
(`owners.wake`). A lost or forged ring costs one indexed read; a lost one delays the pickup to
the owner's next heartbeat, never loses the input.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from subagentd.schema.records import SignalRow
from subagentd.storage.roots import inserting, pick_insert

if TYPE_CHECKING:
    from subagentd.storage.table_access import Connected

log = logging.getLogger("subagentd")

_PREFIX = "udp:"
_PUT_SQL = inserting(
    "INSERT INTO signals (root_id, owner, session_id, kind, by) VALUES ({root}, ?, ?, ?, ?)"
)


def taken(db: Connected, rows: list[tuple[Any, ...]]) -> list[SignalRow]:
    """Signal rows (seq, session_id, kind, by, root_id) as taken, in order: each session's
    tree known from then on."""
    for row in rows:
        if row[4] is not None:
            db.roots.place(row[1], row[4])
    return [SignalRow(row[1], row[2], row[3]) for row in sorted(rows)]


class Doorbell:
    """This process's doorbell: a non-blocking UDP socket on the loopback address."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setblocking(False)
        self.socket.bind(("127.0.0.1", 0))
        host, port = self.socket.getsockname()
        self.address = f"{_PREFIX}{host}:{port}"

    def fileno(self) -> int:
        return self.socket.fileno()

    def drain(self) -> list[str]:
        """Read every ring waiting: one "" each (they name no session: the owner looks at all
        its signals, one writer at a time on a file anyway)."""
        rung: list[str] = []
        while True:
            try:
                self.socket.recv(64)
            except (BlockingIOError, InterruptedError):
                return rung
            except OSError:  # e.g. ECONNREFUSED reported for an earlier send: nothing to read
                return rung
            rung.append("")

    def close(self) -> None:
        self.socket.close()


def ring(address: str) -> None:
    """Wake the process listening at `address` (best effort: its rows are already committed)."""
    if not address.startswith(_PREFIX):
        return
    host, _, port = address[len(_PREFIX) :].rpartition(":")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.setblocking(False)
        sender.sendto(b"!", (host, int(port)))
    except (OSError, ValueError) as exc:
        log.debug("could not ring %s: %s", address, exc)
    finally:
        sender.close()


class Signals:
    """The `signals` table: inputs waiting for the process that holds their session live."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def put_signal(self, owner: str, session_id: str, kind: str, by: str | None) -> None:
        """Queue a signal for `owner` in the caller's write transaction; its doorbell rings
        after the commit."""
        db = self._db
        db.begin()
        root = db.roots.root(session_id)
        db.conn.execute(*pick_insert(_PUT_SQL, root, session_id, (owner, session_id, kind, by)))
        row = db.conn.execute("SELECT wake FROM owners WHERE owner = ?", (owner,)).fetchone()
        if row is not None and row[0]:
            db.ring_after_commit(row[0])

    def has_signals(self, owner: str) -> bool:
        """Whether a signal for `owner` waits (one indexed read, nothing taken)."""
        row = self._db.conn.execute("SELECT 1 FROM signals WHERE owner = ? LIMIT 1", (owner,))
        return row.fetchone() is not None

    def take_signals(self, owner: str, sessions: Collection[str] | None = None) -> list[SignalRow]:
        """Every signal for `owner` (of `sessions` only, when given), in order, deleted in the
        caller's write transaction (one indexed read when there are none)."""
        db = self._db
        rows = db.conn.execute(
            "SELECT seq, session_id, kind, by, root_id FROM signals WHERE owner = ? ORDER BY seq",
            (owner,),
        ).fetchall()
        if sessions is not None:
            rows = [row for row in rows if row[1] in sessions]
        if not rows:
            return []
        db.begin()
        if sessions is None:
            db.conn.execute(
                "DELETE FROM signals WHERE owner = ? AND seq <= ?", (owner, rows[-1][0])
            )
        else:
            db.conn.executemany("DELETE FROM signals WHERE seq = ?", [(row[0],) for row in rows])
        return taken(db, rows)
