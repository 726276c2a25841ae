"""What one turn of a settled continuable child reads and writes (SQLite): a cold resume reads
the session, its descriptor and its lease once, a turn's start its budgets once, and the lease
row is written only as often as its state is known to change (the runner's turns are this path,
once each)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost

TREE_TABLE = re.compile(
    r"\b(FROM|INTO|UPDATE|JOIN) (sessions|descriptors|events|inbox|leases|signals|spending"
    r"|idempotency|tasks|trace_context)\b"
)


@contextmanager
def statements(core: CoreHost) -> Iterator[Counter[str]]:
    """The statements run meanwhile, by their first words and the session named in them: the
    request's own group, committed at the end so the writes it holds back are counted too."""
    counts: Counter[str] = Counter()
    core.svc.commit()
    conn = core.store.group.conn

    def seen(sql: str) -> None:
        words = " ".join(sql.split())
        named = "root_id = '" in words or (
            words.startswith("INSERT") and "root_id" in words and "SELECT root_id" not in words
        )
        if TREE_TABLE.search(words) and not named:
            counts[f"names no tree: {words}"] += 1
        words = re.sub(r"root_id = '\w+' AND ", "", words)
        session = re.search(r"'(c2)'", words) or re.search(r"'(root)'", words)
        head = re.split(r" (WHERE|VALUES|\() ", words)[0]
        counts[f"{head} [{session.group(1) if session else '-'}]"] += 1

    conn.set_trace_callback(seen)
    try:
        yield counts
        core.svc.commit()
    finally:
        conn.set_trace_callback(None)


@pytest.fixture
def settled() -> CoreHost:
    """root -> c2, whose first turn ended, so it settled (ready): its next message resumes it."""
    core = CoreHost(SqliteStore(":memory:"), status_events=True)
    core.open("root")
    core.spawn("root", "c2")
    core.end("c2")
    assert core.status("c2") == "ready"
    core.notes.clear()
    return core


def count(counts: Counter[str], match: Callable[[str], bool]) -> int:
    return sum(n for key, n in counts.items() if match(key))


def test_a_cold_resume_reads_the_session_its_descriptor_and_its_lease_once(settled):
    with statements(settled) as counts:
        settled.send("root", "c2", "again")
    assert settled.status("c2") == "running"
    assert (
        counts[
            "SELECT id, parent_id, kind, label, created_at, depth, parked, open_turn_id,"
            " last_reason, last_output FROM sessions [c2]"
        ]
        == 1
    )
    assert counts["SELECT body FROM descriptors [c2]"] == 1
    assert counts["SELECT owner, status, expires_at FROM leases [c2]"] == 1
    # the budgets: the send's check, then the turn's start (its deadline from the same read)
    assert count(counts, lambda k: k.startswith("SELECT session_id, limits_set")) == 2
    # every statement names the tree (`root_id = 'root' AND …`, an insert its root_id)
    assert [key for key in counts if key.startswith("names no tree")] == []
    [start] = settled.take("turn/start", "c2")
    assert start["resume"] == {"version": 1, "mode": "continuable", "label": "task"}


def test_a_turn_writes_its_lease_row_once_per_state_it_leaves_behind(settled):
    with statements(settled) as counts:
        settled.send("root", "c2", "again")
    # taken idle, then running as the turn starts
    assert count(counts, lambda k: k.startswith("INSERT INTO leases") and k.endswith("[c2]")) == 1
    assert (
        counts[
            "UPDATE leases SET status = 'running', interrupted = 0, disposing = 0, resume = 0 [c2]"
        ]
        == 1
    )
    assert count(counts, lambda k: k.startswith("UPDATE leases")) == 1
    assert [n["status"] for m, n in settled.notes if m == "agent/status"] == ["idle", "running"]
    settled.notes.clear()
    with statements(settled) as counts:
        settled.end("c2")
    assert settled.status("c2") == "ready"
    # it settles at once: its row is dropped, never set idle first
    assert count(counts, lambda k: k.startswith("UPDATE leases")) == 0
    assert count(counts, lambda k: k.startswith("DELETE FROM leases") and k.endswith("[c2]")) == 1
    assert [n["status"] for m, n in settled.notes if m == "agent/status"] == [
        "idle",
        "ready",
    ]


def test_a_turn_that_is_followed_by_a_queued_one_writes_its_lease_only_as_that_one_starts(settled):
    settled.send("root", "c2", "one")
    settled.send("root", "c2", "two")
    settled.notes.clear()
    with statements(settled) as counts:
        settled.end("c2")
    assert settled.status("c2") == "running"
    assert count(counts, lambda k: k.startswith("UPDATE leases")) == 1  # running, once
    settled.send("root", "c2", "three")
    settled.interrupt("root", "c2")
    settled.end("c2", "aborted")
    assert settled.status("c2") == "idle"  # interrupted: what was queued is parked, it stays
    rows = settled.store.group.conn.execute(
        "SELECT status, interrupted FROM leases WHERE session_id = 'c2'"
    ).fetchall()
    assert rows == [("idle", 0)]
    assert [n["status"] for m, n in settled.notes if m == "agent/status"] == [
        "idle",
        "running",
        "idle",
    ]
