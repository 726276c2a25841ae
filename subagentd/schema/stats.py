"""server/stats (and `subagentd stats`): what an operator asks of a server or a database."""

from __future__ import annotations

from subagentd.schema.base import HostParams, Wire
from subagentd.schema.budgets import Spent


class StatsParams(HostParams, kw_only=True):
    """server/stats takes no params but `_meta`."""


class SessionCounts(Wire, kw_only=True):
    """Sessions by status: running (an open turn), idle (live, between turns), ready (not live)."""

    running: int
    idle: int
    ready: int


class CommitLatency(Wire, kw_only=True):
    """Group-commit latency over the most recent commits of this process, in milliseconds."""

    p50_ms: float
    p99_ms: float


class LockWaits(Wire, kw_only=True):
    """This process's waits for another process's write lock (PROTOCOL.md section 1): those that
    found it taken, their time in all and the longest, in milliseconds, and how many were given up
    after --lock-wait-ms (their writes refused 1011 busy)."""

    count: int
    total_ms: float
    max_ms: float
    gave_up: int


class Traffic(Wire, kw_only=True):
    """This process's exchanges with PostgreSQL since it started (absent on SQLite): the round
    trips of its main connection (statements sent together count once; the lease renewal
    thread's and the doorbell's connections not counted), and the times another process's
    NOTIFY woke it (`wakeups`) with how many notifications they brought (`rings`)."""

    round_trips: int
    wakeups: int
    rings: int


class StatsResult(Wire, kw_only=True):
    """Counts from the database; the `commits` and `commit_latency` figures only from a live
    server (they describe its process, so `subagentd stats` leaves them out)."""

    sessions: SessionCounts
    live_agents: int  # sessions a process sharing the database holds live (a valid lease)
    live_here: int | None = None  # of them, held by this process (server/stats only)
    queued_messages: int
    parked_messages: int
    oldest_queued_age_s: float | None = None  # seconds the oldest queued message has waited
    database_bytes: int  # the database file (its pages; the -wal file not counted)
    free_bytes: int  # of them, free pages (left by deletes; reused before the file grows)
    commits: int | None = None  # group commits this process made (writes only)
    commit_latency: CommitLatency | None = None  # absent until a commit was made
    usage: Spent | None = None  # every session's own usage summed (absent: no such table yet)
    lock_waits: LockWaits | None = None  # this process's waits for the write lock (server only)
    traffic: Traffic | None = None  # this process's round trips and wake-ups (PostgreSQL only)
