"""A psycopg 3 connection speaking the table objects' SQL: `?` and `:name` placeholders.

The SQLite tables (storage/sessions.py, inbox.py, ...) are shared by both backends where their SQL
is standard; this adapter only rewrites their placeholders to psycopg's (`%s`, `%(name)s`), once
per statement text. Dialect differences are not rewritten here: postgres/tables.py overrides the
few methods whose SQL differs.

Longer than ~300 lines on purpose: the placeholder rewriting, the held statements sent in one
pipelined round trip, and the lending of the connection to a lock wait all act on the one
psycopg connection and its transaction state; split, each half would reach into the other's.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Loader
from psycopg.types.string import StrDumperUnknown

from subagentd.errors import DRIVER_ERRORS
from subagentd.storage.deferred import DeferredWrites, Row

log = logging.getLogger("subagentd")

if psycopg.Error not in DRIVER_ERRORS:  # a failed read is answered 1012 (wire/boundary.py)
    DRIVER_ERRORS.append(psycopg.Error)

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_ACTIVE = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


# PostgreSQL text cannot hold U+0000, SQLite's can: on the way in it is written as ESC "0" (and
# ESC itself as ESC ESC), on the way out read back, so every string round-trips unchanged and
# both backends give the same answers. ESC is a noncharacter no text is expected to hold.
ESC = "\U0010fffe"
_ESCAPED = re.compile(ESC + "(.)", re.S)


def _unescape(match: re.Match[str]) -> str:
    return "\x00" if match.group(1) == "0" else match.group(1)


class _NulSafeDumper(StrDumperUnknown):
    def dump(self, obj: str) -> bytes:
        if "\x00" in obj or ESC in obj:
            obj = obj.replace(ESC, ESC + ESC).replace("\x00", ESC + "0")
        return obj.encode()


class _NulSafeLoader(Loader):
    def load(self, data: Any) -> str:
        text = str(data, "utf-8")
        return _ESCAPED.sub(_unescape, text) if ESC in text else text


def nul_safe(conn: psycopg.Connection[Any]) -> None:
    """Strings with U+0000 are written and read back through `conn` unchanged (see ESC)."""
    conn.adapters.register_dumper(str, _NulSafeDumper)
    conn.adapters.register_loader("text", _NulSafeLoader)


def to_psycopg(sql: str) -> str:
    """`?` → `%s`, `:name` → `%(name)s` (a literal `%` doubled); the SQL never quotes either."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%").replace("?", "%s"))


@dataclass(frozen=True)
class Timeouts:
    """How long a PostgreSQL connection may wait for the server (`serve --db-*-timeout`).

    `connect`: libpq's connect_timeout (whole seconds, at least 2), for every connection.
    `statement`: the server's statement_timeout on the main connection; the same time (plus a
    second) bounds each statement on this side too, where a server that does not answer at all
    (stopped, black-holed) cannot: the socket is shut and the connection counts as lost.
    `keepalive`: TCP keepalives (idle this long, then 3 probes a third of it apart) and
    tcp_user_timeout (unacknowledged data for twice as long), so a dead peer is noticed."""

    connect: float = 5.0
    statement: float = 10.0
    keepalive: float = 10.0

    def libpq(self) -> dict[str, Any]:
        """The connection parameters they make (added to the URL's; TCP only ones are ignored
        by libpq over a unix socket)."""
        idle = max(1, math.ceil(self.keepalive))
        return {
            "connect_timeout": max(2, math.ceil(self.connect)),
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": max(1, math.ceil(idle / 3)),
            "keepalives_count": 3,
            "tcp_user_timeout": int(idle * 2000),
        }


class PgConnection:
    """The autocommit psycopg connection every table reads and writes through; transactions are
    begun and ended explicitly by the group commit (postgres/group.py).

    Each statement is timed: one slower than `slow` seconds, or failing for the connection's
    sake, calls `stalled` (time the database did not answer counts against no lease,
    GroupCommitBase.lapse_seen), and a Watchdog may shut the socket of one that runs too long."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn
        self._sql: dict[str, str] = {}
        self.held = DeferredWrites()  # rows the open group holds back (postgres/group.py `defer`)
        self.ahead: list[str] = []  # statements (RELEASE SAVEPOINT) sent with the next one
        self.pipelined = psycopg.Pipeline.is_supported()  # libpq ≥ 14
        self.unheld = _Unheld(self)
        self.since: float | None = None  # time.monotonic() when the statement in flight began
        self.slow = math.inf
        self.stalled: Callable[[], None] = lambda: None
        self.reclaim: Callable[[], None] | None = None  # a lock wait has it (postgres/lockqueue.py)
        self.round_trips = 0  # waits for the server's answer so far (server/stats `traffic`)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """The psycopg cursor of the statement (typed loosely, as sqlite3's rows are); the writes
        held back and a request's released savepoint run first, in the same round trip, so every
        statement sees every write (`_batched`). A RELEASE SAVEPOINT is held too: it goes with
        the next statement, or is dropped by the COMMIT (which releases every savepoint)."""
        if sql.startswith("RELEASE SAVEPOINT ") and self.pipelined and self.in_transaction:
            self.ahead.append(sql)
            return None
        if sql == "COMMIT":  # it ends every savepoint: none needs releasing first
            self.ahead.clear()  # and it goes alone, a simple query (its answer may be lost)
            if self.held and self.pipelined:  # the held writes before it, in one round trip
                self.timed(self._send_held)
        elif self.ahead or (self.held and self.pipelined):
            return self.timed(self._batched, self.text(sql), params)
        if self.held:
            self.held.run(self.unheld)
        return self.timed(self.raw.execute, self.text(sql), params)

    def _batched(self, text: str, params: Sequence[Any] | Mapping[str, Any] | None) -> Any:
        """The statements held ahead of `text`, the held rows and `text` sent together in
        libpq's pipeline mode: one round trip, in order; the first failure among them is
        raised (the transaction is aborted then, as by a failing statement)."""
        if not self.pipelined:  # a libpq without pipeline mode: one statement at a time
            self._run_ahead(self.raw.execute)
            self.held.run(_Direct(self))
            return self.raw.execute(text, params)
        self._run_ahead(None)  # nothing ahead is left outside a transaction
        with self.raw.pipeline():
            self._run_ahead(self.raw.execute)
            if self.held:
                self.held.run(_Direct(self))
            cursor = self.raw.execute(text, params)
        return cursor

    def _send_held(self) -> None:  # the held writes alone, in one round trip (pipeline mode)
        with self.raw.pipeline():
            self.held.run(_Direct(self))

    def _run_ahead(self, run: Callable[[str], Any] | None) -> None:
        """Send the statements held ahead (`run` None: only drop them once the transaction they
        belonged to is gone, e.g. with a lost connection)."""
        if run is None:
            if not self.in_transaction:
                self.ahead.clear()
            return
        ahead, self.ahead = self.ahead, []
        for sql in ahead:
            run(sql)

    def timed(self, call: Callable[..., Any], *args: Any) -> Any:
        """One statement's round trip, watched (see the class); a lock wait lent it is ended first."""
        if self.reclaim is not None:
            self.reclaim()
        self.round_trips += 1
        self.since = began = time.monotonic()
        try:
            return call(*args)
        except psycopg.OperationalError:
            self.stalled()
            raise
        finally:
            self.since = None
            if time.monotonic() - began > self.slow:
                self.stalled()

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
        """True from BEGIN to COMMIT/ROLLBACK, also once a failed statement aborted it; not while
        a lock wait has the connection (the transaction it opens is its waiter's)."""
        return self.reclaim is None and self.raw.info.transaction_status in _ACTIVE

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
        """A savepoint or rollback statement: after what is held ahead of it, in its round trip
        (a ROLLBACK drops that instead: the transaction may be aborted, and it ends it anyway)."""
        conn = self.conn
        if sql == "ROLLBACK":
            conn.ahead.clear()
        elif conn.ahead:
            return conn.timed(conn._batched, conn.text(sql), None)
        return conn.timed(conn.raw.execute, conn.text(sql))

    def executemany(self, sql: str, rows: list[Row], /) -> object:
        conn = self.conn
        if conn.ahead:
            conn._run_ahead(None)
            conn.timed(conn._run_ahead, conn.raw.execute)
        with conn.raw.cursor() as cursor:
            conn.timed(cursor.executemany, conn.text(sql), rows)
        return None


class _Direct:
    """The held rows' statements on the raw connection, inside a round trip already timed."""

    def __init__(self, conn: PgConnection) -> None:
        self.conn = conn

    def execute(self, sql: str, /) -> object:
        return self.conn.raw.execute(self.conn.text(sql))

    def executemany(self, sql: str, rows: list[Row], /) -> object:
        with self.conn.raw.cursor() as cursor:
            cursor.executemany(self.conn.text(sql), rows)
        return None


class Watchdog(threading.Thread):
    """Bounds every statement of the main connection on this side: one in flight longer than
    `limit` seconds (or past a shutdown's deadline) gets its socket shut, so libpq's wait on
    the event loop's thread returns at once with a lost connection (postgres/group.py then
    reconnects). It looks four times a second; nothing is done per statement but two clock
    readings (PgConnection.timed)."""

    TICK = 0.25

    def __init__(self, conn: PgConnection, limit: float) -> None:
        super().__init__(name="subagentd-statement-watchdog", daemon=True)
        self.conn = conn
        self.limit = limit
        self.deadline = math.inf  # time.monotonic() past which no statement may wait (shutdown)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.TICK):
            since = self.conn.since
            if since is None:
                continue
            now = time.monotonic()
            if now - since > self.limit or now > self.deadline:
                self.cut(since)

    def cut(self, since: float) -> None:
        """Shut the socket of the statement begun at `since` (if it is still that one)."""
        raw = self.conn.raw
        try:
            fd = raw.pgconn.socket
        except psycopg.Error:  # closed meanwhile
            return
        if self.conn.since != since:
            return
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return
        log.warning(
            "the database did not answer a statement for %.1f s; its connection is dropped",
            time.monotonic() - since,
        )
