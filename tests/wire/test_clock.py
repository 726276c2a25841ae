"""`--clock manual` and `clock/advance`: the time-based rules tested without sleeping (interrupt
grace, wait deadlines, report-rate and report-budget windows, lease expiry), each just before and
just after its moment; refused on a system clock. Driven over real pipes through the test kit."""

from __future__ import annotations

import pytest

from subagentd.client import RpcError
from subagentd.schema.codes import Code
from subagentd.testing.served import Served, serve

MANUAL = ["--clock", "manual"]


@pytest.fixture
def manual(request):
    servers: list[Served] = []

    def start(*args: str, db: str | None = None) -> Served:
        server = serve([*MANUAL, *args, *(["--db", db] if db else [])])
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.close(10) == 0, server.stderr_text()


def quiet_since(server: Served, count: int) -> list:
    """The notifications that arrived after the first `count` (a ping orders everything)."""
    server.barrier()
    return server.received()[count:]


def spawn(server: Served, child: str = "c1") -> str:
    server.agents_spawn("root", "w", "go", child_id=child)
    return server.wait_for_notification("turn/start", agent_id=child)["turn_id"]


def test_clock_advance_is_refused_on_the_system_clock():
    server = serve([])
    try:
        with pytest.raises(RpcError) as refused:
            server.clock_advance(1)
        assert refused.value.code == Code.INVALID_STATE
        assert refused.value.message == (
            "clock/advance needs a manual clock: it is served only with --clock manual (for tests)"
        )
    finally:
        assert server.close(10) == 0


def test_the_interrupt_grace_ends_the_turn_when_the_clock_passes_it(manual):
    server = manual("--interrupt-grace", "10")
    server.agents_open("root")
    turn = spawn(server)
    server.interrupt_agent("c1", caller="root")
    server.wait_for_notification("turn/interrupt", agent_id="c1", turn_id=turn)
    seen = len(server.received())
    assert server.clock_advance(9.999).advanced == pytest.approx(9.999)
    assert quiet_since(server, seen) == []  # still within the grace: the turn is open
    assert server.agents_get("c1").status == "running"
    server.clock_advance(0.002)
    assert server.wait_for_notification("agent/settled", agent_id="c1", timeout=1) == {
        "agent_id": "c1",
        "reason": "aborted",
    }
    with pytest.raises(RpcError) as late:  # force-ended: the host's end comes too late
        server.turns_end("c1", turn, "completed")
    assert late.value.code == Code.INVALID_STATE


def test_a_wait_is_answered_at_its_deadline_not_before(manual):
    server = manual()
    server.agents_open("root")
    spawn(server)
    waiting = server.start("agents/wait_idle", {"agent_id": "root", "timeout_ms": 60_000})
    server.clock_advance(59.9)
    server.barrier()
    assert waiting not in server.responses
    server.clock_advance(0.2)
    assert server.response(waiting, 1)["result"] == {"idle": False, "running": ["c1"]}


def test_the_report_rate_window_slides_with_the_clock(manual):
    server = manual("--report-rate", "1")
    server.agents_open("root")
    spawn(server)
    server.report("one", caller="c1")  # wakes the root: a turn
    server.wait_for_notification("turn/start", agent_id="root", timeout=1)
    server.report("two", caller="c1")  # past the rate within the minute: quietly
    server.wait_for_notification("agent/inject", agent_id="root", timeout=1)
    server.clock_advance(59)
    server.report("three", caller="c1")
    server.wait_for_notification("agent/inject", agent_id="root", timeout=1)
    server.clock_advance(61)  # "one" left the window (the quiet ones never counted)
    seen = len(server.received("turn/start"))
    server.report("four", caller="c1")
    server.barrier()
    assert len(server.received("turn/start")) == seen  # the root is still in its turn: queued
    assert server.agents_get("root").queued == 1


def test_the_report_budget_window_refills_when_the_clock_passes_it(manual):
    server = manual("--report-budget", "10", "--report-window", "600")
    server.agents_open("root")
    spawn(server)
    server.report("12345678", caller="c1")
    with pytest.raises(RpcError) as over:
        server.report("12345678", caller="c1")
    assert over.value.code == Code.OVERLOADED
    server.clock_advance(599)
    with pytest.raises(RpcError):
        server.report("12345678", caller="c1")
    server.clock_advance(1)
    assert server.report("12345678", caller="c1").message_id


def test_a_lease_expires_when_the_clock_passes_its_ttl(manual, tmp_path):
    """Another process's live root, seen from a process whose clock is advanced past the TTL:
    its lease has expired, so the root may be opened here (as after that process stalled)."""
    db = str(tmp_path / "shared.db")
    other = serve(["--db", db, "--lease-ttl", "15"])
    try:
        other.agents_open("root")
        server = manual("--lease-ttl", "15", db=db)
        with pytest.raises(RpcError) as live:
            server.agents_open("root")
        assert live.value.message == 'agent "root" is live in another subagentd process'
        server.clock_advance(10)  # within the TTL (the other renews it every 5 s): still there
        with pytest.raises(RpcError):
            server.agents_open("root")
        server.clock_advance(30)
        assert server.agents_open("root").agent_id == "root"
    finally:
        other.close(10)


@pytest.mark.parametrize("set_by", ["spawn", "agents/budget"])
def test_a_running_turn_is_interrupted_when_the_clock_passes_its_deadline(manual, set_by):
    from subagentd.schema.budgets import Budget

    server = manual()
    server.agents_open("root")
    if set_by == "spawn":
        server.agents_spawn("root", "w", "go", child_id="c1", budget=Budget(max_seconds=60))
        turn = server.wait_for_notification("turn/start", agent_id="c1")["turn_id"]
    else:
        turn = spawn(server)
        server.agents_budget("root", Budget(max_seconds=60))
    seen = len(server.received())
    server.clock_advance(59.9)
    assert quiet_since(server, seen) == []  # before its deadline: the turn runs on
    server.clock_advance(0.2)
    interrupt = server.wait_for_notification("turn/interrupt", agent_id="c1", timeout=1)
    assert (interrupt["turn_id"], interrupt["cause"]) == (turn, {"kind": "deadline"})
    with pytest.raises(RpcError) as late:  # a spawn under it is refused: past the deadline
        server.agents_spawn("c1", "w", "go", child_id="g1")
    assert late.value.data["budget"] == "deadline"
