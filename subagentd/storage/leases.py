"""Leases: one owner id and `owners` row per process, kept renewed by a thread of its own, and
the `leases` rows saying which owner holds each live session.

Longer than ~300 lines on purpose: the owner row's renewal and the tables it guards, together."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from subagentd.schema.records import (
    ForeignLease,
    LeaseRow,
    LiveRecord,
    OpenTurn,
    OwnerRow,
    OwnerState,
)
from subagentd.storage.roots import inserting, pick, pick_insert, rooted

if TYPE_CHECKING:
    from subagentd.storage.table_access import Connected

log = logging.getLogger("subagentd")

# A renewal that took the write lock writes expires_at = now + ttl; the owner renews every third
# of the ttl, so it has two thirds of it to get the lock from busy writers.
RENEW_EVERY = 1 / 3
# A renewal or statement slower than this share of the ttl means the database stalled (or another
# writer held the lock): another owner's lapse is judged afresh from then (GroupCommitBase).
SLOW_ANSWER = 1 / 6


@dataclass(slots=True)
class Holding:
    """This process's owner row as this process knows it: who, for how long, and until when it
    was last renewed (0: not known to be valid; the next write transaction checks the row)."""

    owner: str
    ttl: float
    expires: float = 0.0
    answered_since: float = 0.0  # since when the database answered this process promptly
    renewing: float | None = None  # time.monotonic() when the renewal in flight began

    def renewal_began(self) -> None:
        self.renewing = time.monotonic()

    def lapse_seen(self, expires_at: float, clock: float) -> bool:
        """Whether another owner whose row expired at `expires_at` lapsed by `clock` through a
        stall of its own, not of the database or of another writer's lock: this process had the
        database answering it promptly (its renewals and statements) since at least two thirds
        of a TTL before that expiry (the other owner had that long to renew), or for a whole TTL
        (a row that expired before this process's answers began). Owners are expected to share
        --lease-ttl. Time nobody's database answered counts against no lease."""
        renewing = self.renewing
        if renewing is not None and time.monotonic() - renewing > self.ttl * SLOW_ANSWER:
            return False  # this process's own renewal is waiting for the database right now
        ttl = self.ttl
        return self.answered_since <= max(expires_at - ttl * (1 - RENEW_EVERY), clock - ttl)

    def renewal_ended(self, ok: bool, now: float) -> None:
        """A renewal that failed or took long: the database was not answering until `now`."""
        began, self.renewing = self.renewing, None
        if not ok or (began is not None and time.monotonic() - began > self.ttl * SLOW_ANSWER):
            self.answered_since = now


RENEW_SQL = "UPDATE owners SET expires_at = ? WHERE owner = ? AND fenced = 0"


class Renewer(threading.Thread):
    """Renews the owner row every ttl/3 on its own connection, so leases outlive a busy event
    loop (a stopped process stops this thread too, and its leases do expire). While another
    connection holds the write lock it waits (busy_timeout); a renewal that finds the row fenced
    or gone leaves `expires` at 0, so the next write transaction sees the loss."""

    def __init__(
        self, path: str, holding: Holding, busy_timeout_ms: int, clock: Callable[[], float]
    ) -> None:
        super().__init__(name="subagentd-lease-renewal", daemon=True)
        self.path = path
        self.holding = holding
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        except sqlite3.Error as exc:  # commits still renew the lease
            log.warning("lease renewal thread cannot open the database: %s", exc)
            return
        try:
            while not self.stopped.wait(self.holding.ttl * RENEW_EVERY):
                self.renew(conn)
        finally:
            conn.close()

    def renew(self, conn: sqlite3.Connection) -> None:
        holding = self.holding
        owner, ttl = holding.owner, holding.ttl
        holding.renewal_began()
        try:
            conn.execute("BEGIN IMMEDIATE")
            expires = self.clock() + ttl  # counted from when the write lock was ours
            held = conn.execute(RENEW_SQL, (expires, owner)).rowcount == 1
            conn.execute("COMMIT")
        except sqlite3.Error as exc:  # busy past the timeout, or the database went away
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            holding.renewal_ended(False, self.clock())
            log.debug("lease renewal failed (%s); retrying in %.1f s", exc, ttl * RENEW_EVERY)
            return
        holding.renewal_ended(True, self.clock())
        if holding.owner == owner:
            holding.expires = expires if held else 0.0


# Open turns of sessions no valid owner holds: no lease, or one whose owner is fenced, gone or
# expired by the transaction's clock (this process's own leases always count as held).
_ORPHANED_SQL = """
SELECT s.id, s.open_turn_id, s.root_id FROM sessions s
WHERE s.open_turn_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM leases l JOIN owners o ON o.owner = l.owner
    WHERE l.root_id = s.root_id AND l.session_id = s.id AND o.fenced = 0 AND (o.owner = :me OR o.expires_at > :clock)
)
"""


# A live agent as its owner recorded it (LiveRecord's fields, in order)
_LIVE_SQL = (
    "SELECT l.session_id, s.parent_id, l.kind, s.depth, l.activation_id, l.ancestry,"
    " s.open_turn_id, l.interrupted, s.parked, l.disposing, l.resume, s.last_reason,"
    " s.last_output, (SELECT count(*) FROM inbox i WHERE i.root_id = l.root_id"
    " AND i.session_id = l.session_id AND i.state IN ('queued', 'parked'))"
    " FROM leases l JOIN sessions s ON s.root_id = l.root_id AND s.id = l.session_id"
    " WHERE l.activation_id IS NOT NULL AND"
)
_LIVE_OF_SQL = rooted(_LIVE_SQL + " {l.root}l.session_id = ?")
_LEASE_SQL = rooted("SELECT owner, status, expires_at FROM leases WHERE {root}session_id = ?")
_PUT_LEASE_SQL = inserting(
    "INSERT INTO leases (root_id, session_id, owner, status, expires_at, activation_id, ancestry,"
    " kind, interrupted, disposing, resume) VALUES ({root},?,?,?,?,?,?,?,0,0,?)"
    " ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner,"
    " status = excluded.status, expires_at = excluded.expires_at,"
    " activation_id = excluded.activation_id, ancestry = excluded.ancestry,"
    " kind = excluded.kind, interrupted = 0, disposing = 0, resume = excluded.resume"
)
_LEASE_STATUS_SQL = rooted(
    "UPDATE leases SET status = ?, interrupted = ?, disposing = ?, resume = ?"
    " WHERE {root}session_id = ? AND owner = ?"
)
_DROP_LEASE_SQL = rooted("DELETE FROM leases WHERE {root}session_id = ? AND owner = ?")


# A lease row and its owner's (a lease whose owner row is gone has NULLs for the owner's columns:
# fenced is never NULL in a row that exists)
_LEASE_AND_OWNER_SQL = rooted(
    "SELECT l.owner, l.status, l.expires_at, o.expires_at, o.fenced FROM leases l"
    " LEFT JOIN owners o ON o.owner = l.owner WHERE {l.root}l.session_id = ?"
)


class LeaseTables:
    """The `owners` and `leases` tables (this process's own row is kept by GroupCommit.hold)."""

    def __init__(self, db: Connected) -> None:
        self._db = db

    def owners(self) -> list[OwnerRow]:
        """Every process registered on this database."""
        rows = self._db.conn.execute("SELECT owner, expires_at, fenced FROM owners").fetchall()
        return [OwnerRow._make(row) for row in rows]

    def owner_state(self, owner: str) -> OwnerState | None:
        """(expires_at, fenced) of one owner, None when it has no row (gone, or older). Inside
        a group it is read once (with the lease naming it, get_lease): only this process fences
        or deletes owner rows while it holds the write lock; another owner's renewal may still
        move its expiry later meanwhile, which the group then judges by the row it first read."""
        seen = self._db.reads()
        if seen is not None and ("owner", owner) in seen:
            state: OwnerState | None = seen["owner", owner]
            return state
        row = self._db.conn.execute(
            "SELECT expires_at, fenced FROM owners WHERE owner = ?", (owner,)
        ).fetchone()
        state = None if row is None else OwnerState._make(row)
        if seen is not None:
            seen["owner", owner] = state
        return state

    def fence(self, owner: str, expired_by: float | None) -> bool:
        """Take an owner's leases away: its row is marked fenced and its leases deleted, in the
        caller's write transaction. With `expired_by`, only if its row (re-read here, under the
        lock) expired by then; returns whether the owner is fenced now."""
        db = self._db
        db.begin()
        self._forget()
        if expired_by is None:  # two statements: PostgreSQL cannot type `? IS NULL` for a NULL
            db.conn.execute("UPDATE owners SET fenced = 1 WHERE owner = ? AND fenced = 0", (owner,))
        else:
            db.conn.execute(
                "UPDATE owners SET fenced = 1 WHERE owner = ? AND fenced = 0 AND expires_at <= ?",
                (owner, expired_by),
            )
        state = self.owner_state(owner)
        if state is not None and not state.fenced:
            return False
        db.conn.execute("DELETE FROM leases WHERE owner = ?", (owner,))
        db.conn.execute("DELETE FROM signals WHERE owner = ?", (owner,))  # inputs stay queued
        return True

    def prune_owners(self, before: float) -> None:
        """Forget fenced owners whose rows expired before `before`."""
        db = self._db
        if db.conn.execute(
            "SELECT 1 FROM owners WHERE fenced = 1 AND expires_at < ? LIMIT 1", (before,)
        ).fetchone():
            db.begin()
            self._forget()
            db.conn.execute("DELETE FROM owners WHERE fenced = 1 AND expires_at < ?", (before,))

    def orphaned_turns(self, owner: str, clock: float) -> list[OpenTurn]:
        """Open turns that no valid owner holds (crash recovery)."""
        rows = self._db.conn.execute(_ORPHANED_SQL, {"me": owner, "clock": clock}).fetchall()
        for session_id, _, root in rows:
            self._db.roots.place(session_id, root)
        return [OpenTurn(session_id, turn_id) for session_id, turn_id, _ in rows]

    def get_lease(self, session_id: str) -> LeaseRow | None:
        """(owner, status, expires_at) of the session's lease row, if any (its owner's row
        says whether it is valid). Inside a group the owner's row is read with it, and both are
        kept in the group's reads (group_base.py `reads`) until this process writes them."""
        seen = self._db.reads()
        root = self._db.roots.root(session_id)
        if seen is None:
            row = self._db.conn.execute(*pick(_LEASE_SQL, root, (session_id,))).fetchone()
            return None if row is None else LeaseRow._make(row)
        key = ("lease", session_id)
        if key in seen:
            lease: LeaseRow | None = seen[key]
            return lease
        found = self._db.conn.execute(*pick(_LEASE_AND_OWNER_SQL, root, (session_id,))).fetchone()
        if found is None:
            seen[key] = None
            return None
        owner, status, expires_at, owner_expires, fenced = found
        seen[key] = lease = LeaseRow(owner, status, expires_at)
        if ("owner", owner) not in seen:
            seen["owner", owner] = None if fenced is None else OwnerState(owner_expires, fenced)
        return lease

    def put_lease(
        self,
        session_id: str,
        owner: str,
        status: str,
        expires_at: float,
        *,
        activation_id: str | None = None,
        ancestry: str | None = None,
        kind: str | None = None,
        resume: bool = False,
    ) -> None:
        """Take the session's lease, with what its new activation is (see live_agents)."""
        db = self._db
        db.begin()
        self._written(session_id)
        row = (session_id, owner, status, expires_at, activation_id, ancestry, kind, int(resume))
        root = db.roots.root(session_id)
        db.conn.execute(*pick_insert(_PUT_LEASE_SQL, root, session_id, row))

    def set_lease_status(
        self,
        session_id: str,
        owner: str,
        status: str,
        *,
        interrupted: bool = False,
        disposing: bool = False,
        resume: bool = False,
    ) -> None:
        """The live agent's status and flags (its open turn interrupted, disposing, resume), held
        with the group's next statement (storage/deferred.py): nothing reads its answer."""
        db = self._db
        self._written(session_id)
        row = (status, int(interrupted), int(disposing), int(resume), session_id, owner)
        db.defer(*pick(_LEASE_STATUS_SQL, db.roots.root(session_id), row))

    def live_agents(self, owner: str) -> list[LiveRecord]:
        """Every agent `owner` holds live, as storage has it (registry rebuild)."""
        rows = self._db.conn.execute(_LIVE_SQL + " l.owner = ?", (owner,)).fetchall()
        for row in rows:
            self._db.roots.learn(row[0], row[1])
        return msgspec.convert(rows, list[LiveRecord], strict=False)

    def live_record(self, session_id: str) -> LiveRecord | None:
        """The live agent a session is in whichever process holds it (its lease says nothing of
        whether that owner is still valid)."""
        root = self._db.roots.root(session_id)
        row = self._db.conn.execute(*pick(_LIVE_OF_SQL, root, (session_id,))).fetchone()
        return None if row is None else msgspec.convert(row, LiveRecord, strict=False)

    def drop_lease(self, session_id: str, owner: str) -> None:
        db = self._db
        db.begin()
        self._written(session_id)
        root = db.roots.root(session_id)
        db.conn.execute(*pick(_DROP_LEASE_SQL, root, (session_id, owner)))

    def _written(self, session_id: str) -> None:
        """The group's reads forget the session's lease row, about to change."""
        seen = self._db.reads()
        if seen:
            seen.pop(("lease", session_id), None)

    def _forget(self) -> None:
        """Owner rows and every lease of one are about to change: the group reads them anew."""
        seen = self._db.reads()
        if seen:
            seen.clear()

    def foreign_leases(self, owner: str, now: float) -> list[ForeignLease]:
        """The leases held by other owners, unfenced and unexpired."""
        rows = self._db.conn.execute(
            # from the few owner rows to their leases (leases_by_owner): this process's own
            # leases, usually nearly all of them, are never read
            "SELECT l.session_id, l.owner, l.status FROM owners o CROSS JOIN leases l"
            " ON l.owner = o.owner WHERE o.owner != ? AND o.fenced = 0 AND o.expires_at > ?",
            (owner, now),
        ).fetchall()
        return [ForeignLease._make(row) for row in rows]
