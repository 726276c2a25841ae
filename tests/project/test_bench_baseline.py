"""The benchmarks' A/B tools: an older checkout measured beside the working tree is started with
only the options it knows (harness.accepted), and the floors server_cpu.py compares answer like
the server (the asyncio floor prices anyio's wait_readable); the tracing benchmark's three modes
run and the live one exports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
from harness import Server, accepted, serve_options, server_command  # noqa: E402

ROOT = str(BENCH.parent)


def test_the_working_trees_serve_options_are_read_from_its_help() -> None:
    options = serve_options({"PYTHONPATH": ROOT})
    assert {"--db", "--durability", "--max-children", "--max-queued", "--event-loop"} <= options
    assert "--no-such-option" not in options


def test_an_older_checkout_gets_only_the_options_it_knows() -> None:
    command = server_command("subagentd", "/tmp/x.db") + ["--event-loop=asyncio"]
    older = {"--db", "--durability", "--log-level"}  # 98cb36b had no quota flags, no --event-loop
    kept = accepted(command, older)
    assert kept[kept.index("--db") + 1] == "/tmp/x.db"  # an option and its value apart are kept
    assert "--durability" in kept and "normal" in kept
    assert not [a for a in kept if a.startswith(("--max-", "--event-loop"))]
    assert accepted(command, serve_options({"PYTHONPATH": ROOT})) == command
    url = "postgresql://u@/db?host=/tmp/pg&port=5433"  # a value with "=" in it is no option
    on_pg = server_command("subagentd", url)
    assert accepted(on_pg, older)[on_pg.index("--db") + 1] == url


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("echo", "echo"),
        ("anyio", "anyio-echo"),
        ("asyncio", "asyncio-echo"),
        ("stack", "stack-floor"),
    ],
)
def test_each_floor_answers_pings_one_in_flight_and_pipelined(kind: str, name: str) -> None:
    server = Server(server_command(kind))
    try:
        assert server.initialize()["serverInfo"]["name"] == name
        samples = server.round_trips([server.frame("ping", None, i) for i in range(50)])
        assert len(samples) == 50
        elapsed, errors, _ = server.pipelined(
            [server.frame("ping", None, i) for i in range(100, 2100)]
        )
        assert errors == 0 and elapsed > 0
        assert server.close() == 0
    finally:
        server.kill()


def test_the_tracing_benchmark_runs_all_three_modes(capsys) -> None:
    import tracing_cost

    assert tracing_cost.main(["--rounds", "1", "-n", "100", "--batch", "50", "--demos", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| ")]
    assert rows == [
        "| figure",
        *(
            f"| {m} {f} (µs/req)"
            for m in ("tools", "send")
            for f in ("cpu one", "cpu pipelined", "wall pipelined")
        ),
        "| demo wall s",
        "| demo cpu s",
    ]
    took = int(out.split("the receiver took ")[1].split()[0])
    assert took > 0  # the live mode exported (400 tool spans and the demo's)
