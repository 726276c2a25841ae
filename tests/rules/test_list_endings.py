"""list_agents: a ready child's row says how its last turn ended (SEMANTICS.md section 6).

Every ending the stored turn outcome tells apart, for both scopes and both ways a listing is read
(the one-statement children listing and the row-by-row fallback), other statuses left as they
were, and after a restart: read from the session rows, not from a registry or a transcript.
"""

from __future__ import annotations

import msgspec
import pytest

from subagentd.core import texts
from subagentd.schema.budgets import Budget
from subagentd.schema.host_methods import ListParams
from tests.core_host import TTL, CoreHost, FakeClock, process, step

ENDINGS = [
    ("completed", "last turn completed"),
    ("aborted", "last turn was stopped"),
    ("max-tokens", "last turn ran out of room"),
    ("refusal", "last turn declined the task"),
    ("error", "last turn failed"),
]


def fallback(core: CoreHost):
    """list_agents {children} through the row-by-row path (the joined read fails)."""
    store = core.store

    def failing(*args):
        raise OSError("disk I/O error")

    real, store.children_listing = store.children_listing, failing
    try:
        return core.list("root")
    finally:
        store.children_listing = real


@pytest.mark.parametrize(("reason", "told"), ENDINGS)
def test_a_ready_childs_row_says_how_its_last_turn_ended(reason, told):
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="worker")
    core.end("c1", reason, output="closing")
    assert core.status("c1") == "ready"
    assert texts.LAST_TURN[reason] == told
    for result in (core.list("root"), fallback(core)):
        assert result.text == f"c1 [ready, {told}] — worker"
        assert [(a.id, a.status, a.ended) for a in result.agents] == [("c1", "ready", reason)]
    result = core.list("root", "descendants")
    assert result.text == f"c1 [ready, {told}] parent=root depth=1 — worker"
    assert [(a.id, a.status, a.ended) for a in result.agents] == [("c1", "ready", reason)]


def test_an_interrupted_child_reads_as_stopped():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="worker")
    core.interrupt("root", "c1")
    core.end("c1", "aborted")
    assert core.list("root").text == "c1 [ready, last turn was stopped] — worker"


def test_only_ready_rows_say_it_running_and_idle_ones_are_as_before():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="parent of g1")
    core.spawn("c1", "g1", label="leaf")
    core.spawn("root", "c2", label="done")
    core.end("c1")  # completed, but g1 keeps it live: idle
    core.end("c2", "refusal")
    assert (core.status("c1"), core.status("g1")) == ("idle", "running")
    result = core.list("root")
    assert result.text == "c1 [idle] — parent of g1\nc2 [ready, last turn declined the task] — done"
    assert [a.ended for a in result.agents] == [None, "refusal"]
    assert fallback(core).text == result.text
    assert core.list("root", "descendants").text == (
        "c1 [idle] parent=root depth=1 — parent of g1\n"
        "g1 [running] parent=c1 depth=2 — leaf\n"
        "c2 [ready, last turn declined the task] parent=root depth=1 — done"
    )
    core.send("root", "c2", "again")  # ready again: running, its earlier ending not told
    assert core.list("root").text.splitlines()[1] == "c2 [running] — done"
    assert core.list("root").agents[1].ended is None


def test_the_hosts_agents_list_rows_carry_no_ending():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="worker")
    core.end("c1", "refusal")
    [row] = core.svc.records.list_host(ListParams(root_id="root")).agents
    assert msgspec.to_builtins(row) == {
        "kind": "child",
        "id": "c1",
        "label": "worker",
        "status": "ready",
        "mode": "continuable",
    }
    assert core.list("root").agents[0].ended == "refusal"


def test_a_ready_row_without_a_known_ending_is_plain_ready():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="one")
    core.spawn("root", "c2", label="two")
    core.end("c1")
    core.end("c2")
    # a session no turn of which ever ended, and a reason written by another version
    core.store.conn.execute("UPDATE sessions SET last_reason = NULL WHERE id = 'c1'")
    core.store.conn.execute("UPDATE sessions SET last_reason = 'vanished' WHERE id = 'c2'")
    core.store.commit()
    for result in (core.list("root"), fallback(core)):
        assert result.text == "c1 [ready] — one\nc2 [ready] — two"
        assert [a.ended for a in result.agents] == [None, None]
    assert core.list("root", "descendants").text == (
        "c1 [ready] parent=root depth=1 — one\nc2 [ready] parent=root depth=1 — two"
    )


def test_after_a_restart_every_ending_is_read_from_storage(tmp_path):
    path, clock = str(tmp_path / "restart.db"), FakeClock()
    first = process(path, clock, "p1")
    step(first, first.open, "root")
    for n, (reason, _) in enumerate(ENDINGS, 1):
        step(first, first.spawn, "root", f"c{n}", label=reason)
        step(first, first.end, f"c{n}", reason)
    step(first, first.spawn, "root", "c6", label="deadline", budget=Budget(max_seconds=60))
    step(first, first.spawn, "root", "c7", label="crashed")  # still running when p1 goes
    step(first, first.spawn, "root", "c8", label="parked")
    step(first, first.send, "root", "c8", "held")
    step(first, first.interrupt, "root", "c8")
    step(first, first.end, "c8", "aborted")  # idle in p1, holding one parked message
    clock.advance(61)
    step(first, first.timers.fire_all)  # c6's deadline passed: interrupted
    step(first, first.end, "c6", "aborted")
    first.store.close()  # the process goes without ending anything more
    clock.advance(TTL)  # its leases lapse

    second = process(path, clock, "p2")
    assert len(second.svc.agents.registry) == 0  # nothing of p1's is live here
    expected = [
        "c1 [ready, last turn completed] — completed",
        "c2 [ready, last turn was stopped] — aborted",
        "c3 [ready, last turn ran out of room] — max-tokens",
        "c4 [ready, last turn declined the task] — refusal",
        "c5 [ready, last turn failed] — error",
        "c6 [ready, last turn ran out of time] — deadline",
        "c7 [ready, last turn failed] — crashed",  # a turn its dead process left open
        "c8 [ready, last turn was stopped, 1 parked] — parked",
    ]
    result = step(second, second.list, "root")
    assert result.text == "\n".join(expected)
    endings = [a.ended for a in result.agents]
    assert endings == [*(r for r, _ in ENDINGS), "deadline", "error", "aborted"]
    assert fallback(second).text == result.text
    descendants = step(second, second.list, "root", "descendants").text
    assert descendants == "\n".join(
        line.replace("] — ", "] parent=root depth=1 — ") for line in expected
    )
    # the crashed turn recovered here (what an activation does first) reads the same
    clock.advance(TTL)
    step(second, second.svc.recovery.recover)
    assert step(second, second.list, "root").text == "\n".join(expected)


# SQLite's statement trace
@pytest.mark.sqlite_only
def test_the_endings_come_with_the_rows_in_one_statement_without_a_transcript_read():
    core = CoreHost()
    core.open("root")
    for n in range(1, 21):
        core.spawn("root", f"c{n:02d}", label="x")
        core.end(f"c{n:02d}", ENDINGS[n % len(ENDINGS)][0])
    core.store.commit()
    for scope in ("children", "descendants"):
        ran: list[str] = []
        core.store.conn.set_trace_callback(ran.append)
        try:
            result = core.list("root", scope)
        finally:
            core.store.conn.set_trace_callback(None)
        assert all(a.ended is not None for a in result.agents)
        assert not any("events" in sql for sql in ran), ran
        if scope == "children":
            assert len([s for s in ran if s.lstrip().upper().startswith("SELECT")]) == 1, ran
