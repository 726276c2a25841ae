"""The benchmark report (benchmarks/report.py, run.py): the floors' and peers' columns, every
target a ratio of two figures of one run (the stack floor, the write floors, the TS SDK), how far
a missed one misses, and exit 1 when a scenario failed (CI's smoke step)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import report  # noqa: E402
import run  # noqa: E402
from harness import ServerFailure  # noqa: E402


def cold(ms: float, rss_mib: float) -> dict[str, float]:
    return {"median_s": ms / 1e3, "idle_rss_kib": rss_mib * 1024}


def tools(per_s: float, p50_us: float) -> dict[str, float]:
    return {"per_s": per_s, "rtt_p50_s": p50_us / 1e6, "rtt_p99_s": 2 * p50_us / 1e6}


def send(per_s: float, p50_us: float = 150) -> dict[str, float]:
    return {"per_s": per_s, "errors": 0, "seq_p50_s": p50_us / 1e6, "seq_p99_s": 400e-6}


RAW = {
    "cold_start": {
        "subagentd": cold(200, 30),
        "echo": cold(70, 14),
        "stack": cold(150, 28),
        "anyio": cold(110, 20),
        "mcp": cold(1000, 66),
        "mcp-ts": cold(500, 70),
    },
    "tool_calls": {
        "subagentd": tools(15000, 150),
        "echo": tools(300000, 30),
        "stack": tools(30000, 80),
        "anyio": tools(60000, 60),
        "mcp": tools(600, 1100),
        "mcp-ts": tools(4000, 400),
    },
    "send_normal": send(12000),
    "write_floor_normal": {"per_s": 30000, "group": 528},
    "send_full": send(6000),
    "write_floor_full": {"per_s": 10000, "group": 528},
}


def by_key(raw: dict) -> dict[str, report.Metric]:
    return {m.key: m for m in report.evaluate(raw)}


def test_the_targets_are_ratios_to_the_stack_floor_and_the_ts_sdk():
    metrics = by_key(RAW)
    assert metrics["cold_start_ms"].target == "≤ 0.5x TS SDK"
    assert metrics["cold_start_ms"].met is True  # 200 ≤ 250
    assert metrics["idle_rss_mib"].target == "≤ 0.7x TS SDK"
    assert metrics["idle_rss_mib"].met is True  # 30 ≤ 49
    assert metrics["tools_call_per_s"].target == "≥ 0.4x stack floor"
    assert metrics["tools_call_per_s"].met is True  # 15000 ≥ 12000
    ratio = "25.00x MCP SDK, 3.75x TS SDK, 0.05x floor, 0.50x stack floor, 0.25x anyio floor"
    assert metrics["tools_call_per_s"].ratio == ratio
    assert metrics["tools_call_p50_us"].target == "≤ 2x stack floor, ≤ 1x TS SDK"
    assert metrics["tools_call_p50_us"].met is True  # 150 ≤ 160 and ≤ 400
    assert metrics["tools_call_p99_us"].met is None
    seq = metrics["send_normal_seq_p50_us"]
    assert seq.values == {"subagentd": 150, "stack": 80}  # the stack floor's tools/call p50
    assert (seq.target, seq.met, seq.ratio) == ("≤ 3x stack floor", True, "1.88x stack floor")
    assert metrics["send_full_seq_p50_us"].target == "(informational)"
    assert all(m.miss == "" for m in metrics.values() if m.met)


@pytest.mark.parametrize(
    ("key", "change", "miss"),
    [
        ("cold_start_ms", {"cold_start": {"mcp-ts": cold(399, 70)}}, "0.50x TS SDK (0% over)"),
        ("cold_start_ms", {"cold_start": {"mcp-ts": cold(200, 70)}}, "1.00x TS SDK (100% over)"),
        ("idle_rss_mib", {"cold_start": {"mcp-ts": cold(500, 40)}}, "0.75x TS SDK (7% over)"),
        (
            "tools_call_per_s",
            {"tool_calls": {"stack": tools(50000, 80)}},
            "0.30x stack floor (25% under)",
        ),
        (
            "tools_call_p50_us",
            {"tool_calls": {"stack": tools(30000, 50), "mcp-ts": tools(4000, 100)}},
            "3.00x stack floor (50% over); 1.50x TS SDK (50% over)",
        ),
        ("tools_call_per_s", {"tool_calls": {"stack": None}}, "stack floor: not measured"),
        ("cold_start_ms", {"cold_start": {"mcp-ts": None}}, "TS SDK: not measured"),
    ],
)
def test_a_missed_or_unmeasured_target_is_not_met_and_says_by_how_much(key, change, miss):
    raw = {name: dict(RAW[name]) for name in ("cold_start", "tool_calls")}
    for scenario, peers in change.items():
        for peer, figure in peers.items():
            if figure is None:
                del raw[scenario][peer]
            else:
                raw[scenario][peer] = figure
    metric = by_key(raw)[key]
    assert (metric.met, metric.miss) == (False, miss)
    assert f"| **no**: {miss} |" in report.render_table([metric])


def test_send_message_is_judged_against_the_write_floor():
    metrics = by_key(RAW)
    normal, full = metrics["send_normal_per_s"], metrics["send_full_per_s"]
    assert normal.values == {"subagentd": 12000, "sqlite": 30000}
    assert normal.target == "≥ 0.5x write floor"
    assert normal.met is False  # 12000 < 0.5 x 30000
    assert normal.miss == "0.40x write floor (20% under)"
    assert normal.ratio == "0.40x floor"
    assert normal.note == "floor: 528 rows per commit"
    assert full.met is True  # 6000 ≥ 0.5 x 10000
    table = report.render_table(report.evaluate(RAW))
    header = (
        "| metric | subagentd | floor | stack floor | anyio floor | MCP SDK | TS SDK | ratio |"
        " target | met? |"
    )
    assert header in table
    assert "| 12,000 | 30,000 | — | — | — | — | 0.40x floor; floor: 528 rows per commit |" in table
    slow = by_key({**RAW, "send_normal": send(12000, 241)})["send_normal_seq_p50_us"]
    assert (slow.met, slow.miss) == (False, "3.01x stack floor (0% over)")


def test_the_stack_and_anyio_floors_sit_beside_the_echo_floor_in_the_protocol_rows():
    table = report.render_table(report.evaluate(RAW))
    row = "| tools/call list_agents round trip p50 (µs) | 150 | 30.0 | 80.0 | 60.0 | 1,100 | 400 |"
    assert row in table
    assert "1.88x stack floor, 2.50x anyio floor" in table  # 150 ÷ 80, 150 ÷ 60
    assert "| idle RSS after initialize (MiB) | 30.0 | 14.0 | 28.0 | 20.0 | 66.0 | 70.0 |" in table


def test_ping_rows_come_with_the_ping_scenario_and_are_informational():
    assert "ping_per_s" not in by_key(RAW)
    metrics = by_key(
        {**RAW, "ping_calls": {"subagentd": tools(20000, 120), "stack": tools(40000, 70)}}
    )
    rows = [metrics[k] for k in ("ping_per_s", "ping_p50_us", "ping_p99_us")]
    assert [(m.target, m.met) for m in rows] == [("(informational)", None)] * 3
    assert rows[0].ratio == "0.50x stack floor"
    assert rows[1].ratio == "1.71x stack floor"


def test_a_failed_scenario_makes_the_run_exit_1(tmp_path, monkeypatch):
    def broken(self, kind):
        raise ServerFailure(f"{kind} did not answer")

    monkeypatch.setattr(run.Bench, "cold_start", broken)
    monkeypatch.setattr(run, "draw_plots", lambda results, out: [])
    assert run.main(["--quick", "--only", "cold", "--out", str(tmp_path)]) == 1
    report = (tmp_path / "latest.md").read_text()
    assert "## Failures" in report
    assert "cold start mcp-ts: mcp-ts did not answer" in report


def test_a_run_without_failures_exits_0(tmp_path, monkeypatch):
    monkeypatch.setattr(run.Bench, "cold_start", lambda self, kind: RAW["cold_start"][kind])
    monkeypatch.setattr(run, "draw_plots", lambda results, out: [])
    assert run.main(["--quick", "--only", "cold", "--out", str(tmp_path)]) == 0
    assert "## Failures" not in (tmp_path / "latest.md").read_text()


def test_the_postgresql_shared_rows_against_the_pg_floor_and_one_process():
    shared = {"requests": 5000, "refused": 0}
    raw = {
        **RAW,
        "shared_sends": {"1": {**shared, "per_s": 9000}, "4": {**shared, "per_s": 9000}},
        "shared_sends_postgres": {
            "1": {**shared, "per_s": 4000},
            "2": {**shared, "per_s": 5000},
            "4": {**shared, "per_s": 8000, "refused": 3},
        },
        "pg_write_floor": {"per_s": 16000, "group": 600},
    }
    metrics = by_key(raw)
    one = metrics["shared_send_postgres_1_per_s"]
    assert one.values == {"subagentd": 4000, "pg": 16000}
    assert one.ratio == "0.25x floor"
    assert one.note == "5,000 sent, 0 refused 1011 busy; floor: 600 rows per commit"
    assert (one.target, one.met) == ("≥ 0.5x pg write floor", False)
    assert one.miss == "0.25x pg write floor (50% under)"
    assert metrics["shared_send_postgres_2_per_s"].values == {"subagentd": 5000}
    four = metrics["shared_send_postgres_4_per_s"]
    assert (four.target, four.ratio) == ("≥ 2x 1 process, 0 refused", "2.00x 1 process")
    assert (four.met, four.miss) == (False, "3 refused")  # 2x holds, the refusals do not
    assert four.note == (
        "5,000 sent, 3 refused 1011 busy; on localhost the processes and PostgreSQL share the"
        " machine's cores: CPU bounds them before any lock does (the rows over the link show"
        " what the locks allow)"
    )
    assert metrics["shared_send_4_per_s"].target == "(informational)"  # SQLite's: no target
    assert metrics["shared_send_1_per_s"].values == {"subagentd": 9000}  # SQLite's has its own
    table = report.render_table(report.evaluate(raw))
    row = (
        "| durable send_message pipelined, 1 process(es) sharing one PostgreSQL database (msg/s)"
        " | 4,000 | 16,000 | — | — | — | — | 0.25x floor; 5,000 sent, 0 refused 1011 busy; floor:"
        " 600 rows per commit | ≥ 0.5x pg write floor | **no**: 0.25x pg write floor (50% under) |"
    )
    assert row in table
    assert "sharing one PostgreSQL database (msg/s) | 5,000 | — |" in table  # 2 processes: none


def test_cross_process_delivery_has_the_bounds_of_each_backend():
    cross = lambda p50, p99: {"samples": 500, "p50_s": p50 / 1e3, "p99_s": p99 / 1e3}  # noqa: E731
    metrics = by_key(
        {**RAW, "cross_process": cross(1.5, 30), "cross_process_postgres": cross(6, 20)}
    )
    sqlite50, sqlite99 = metrics["cross_process_p50_ms"], metrics["cross_process_p99_ms"]
    assert (sqlite50.target, sqlite50.met, sqlite99.met) == ("≤ 2 ms", True, None)
    pg50, pg99 = metrics["cross_process_postgres_p50_ms"], metrics["cross_process_postgres_p99_ms"]
    assert (pg50.target, pg50.met, pg50.miss) == ("≤ 5 ms", False, "20% over")
    assert (pg99.target, pg99.met) == ("≤ 25 ms", True)
    assert by_key(RAW)["cross_process_p50_ms"].met is None  # not run: not judged


def test_a_latency_series_percentiles_given_or_taken_from_its_samples():
    given = {"percentiles_s": {"50": 0.001, "99": 0.004, "99.9": 0.02, "75": 9.0}}
    assert report.percentiles(given) == {"50": 0.001, "99": 0.004, "99.9": 0.02}
    rest = {"rtt_percentiles_s": {"50": 1e-4, "90": 2e-4}}
    assert report.percentiles(rest) == {"50": 1e-4, "90": 2e-4}
    samples = {"samples_s": [i / 1000 for i in range(1000, 0, -1)]}  # 1 ms … 1 s, unsorted
    assert report.percentiles(samples) == {"50": 0.501, "90": 0.9, "99": 0.99, "99.9": 0.999}
    assert report.percentiles({}) == {}
    tail = {"agents": 1000, "p50_s": 1e-4, "p90_s": 2e-4, "p99_s": 5e-4, "p99_9_s": 1e-3}
    assert report.percentiles(tail) == {"50": 1e-4, "90": 2e-4, "99": 5e-4, "99.9": 1e-3}


def test_the_targets_summary_lists_the_judged_rows_and_goes_between_the_readme_markers(tmp_path):
    metrics = report.evaluate(RAW)
    env = {"mode": "full", "date": "D", "commit": "abc", "loadavg_1m_before_after": [1.0, 2.0]}
    summary = report.render_targets(metrics, env)
    judged = [m for m in metrics if m.met is not None]
    assert summary.startswith(
        "From the full run of D (1-min load average before/after [1.0, 2.0]; its revision is in"
        " its latest.md):"
        f" {sum(m.met for m in judged)} of {len(judged)} targets hold."
    )
    assert "| durable send_message pipelined, --durability normal ≥ 0.5x write floor |" in summary
    assert "| 12,000 msg/s | **no**: 0.40x write floor (20% under) |" in summary
    assert "round trip p99" not in summary  # informational rows are not targets
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.README_BEGIN}\nold table\n{report.README_END}\nafter\n")
    results = {"raw": RAW, "environment": env}  # judged again from the raw figures
    report.write_readme(str(readme), results)
    text = readme.read_text()
    assert text == f"before\n{report.README_BEGIN}\n{summary}\n{report.README_END}\nafter\n"
    assert report.README_BEGIN in (Path(report.__file__).parent / "README.md").read_text()


def test_three_runs_spread_sits_beside_each_target_and_in_its_own_table(tmp_path):
    import copy
    import json

    import spread

    env = {"mode": "full", "date": "D", "commit": "abc", "loadavg_1m_before_after": [1.0, 2.0]}
    runs = []
    for n, per_s in enumerate((12000, 16000, 15000)):
        raw = copy.deepcopy(RAW)
        raw["send_normal"] = send(per_s)
        path = tmp_path / f"run{n}.json"
        path.write_text(json.dumps({"raw": raw, "environment": env}))
        runs.append(str(path))
    loaded = spread.load(runs)
    summary = report.render_targets(report.evaluate(RAW), env, loaded)
    # 12,000, 16,000 and 15,000 msg/s against a 30,000 write floor (≥ 0.5x): held in two runs
    assert (
        "| durable send_message pipelined, --durability normal ≥ 0.5x write floor | 12,000 msg/s"
        " | **no**: 0.40x write floor (20% under) | 12,000–16,000 (median 15,000) msg/s"
        " | 2 of 3 |"
    ) in summary
    assert "3 runs of the same revision" in summary
    table = spread.render(loaded)
    assert (
        "| durable send_message pipelined, --durability normal (msg/s) | 12,000 | 16,000 | 15,000"
        " | 12,000–16,000 (median 15,000) | ≥ 0.5x write floor | 2 of 3 |"
    ) in table
    assert table.count("\n- run ") == 3


def test_the_link_rows_judge_the_windowed_sends_and_explain_the_pipelined_ones():
    sent = {"requests": 5000, "refused": 0}
    raw = {
        **RAW,
        "shared_sends_postgres_link": {
            "1": {**sent, "per_s": 700, "window": 8},
            "4": {**sent, "per_s": 1680, "window": 8},
        },
        "shared_sends_postgres_link_pipelined": {
            "1": {**sent, "per_s": 12000, "window": None},
            "4": {**sent, "per_s": 21000, "window": None},
        },
    }
    metrics = by_key(raw)
    four = metrics["shared_send_postgres_link_4_per_s"]
    assert four.name == (
        "durable send_message 8 in flight per process, 4 process(es) sharing one PostgreSQL"
        " database over a 1 ms link"
    )
    assert (four.target, four.ratio, four.met) == (
        "≥ 2.5x 1 process, 0 refused",
        "2.40x 1 process",
        False,
    )
    assert four.miss == "2.40x 1 process (4% under)"
    piped = metrics["shared_send_postgres_link_pipelined_4_per_s"]
    assert (piped.target, piped.met, piped.ratio) == ("(informational)", None, "1.75x 1 process")
    assert piped.note == (
        "5,000 sent, 0 refused 1011 busy; a group carries up to a pipe buffer of sends, so one"
        " process is bound by CPU, not by the link: 4 processes and PostgreSQL share 2 cores"
    )
    assert metrics["shared_send_postgres_link_pipelined_1_per_s"].name.startswith(
        "durable send_message pipelined, 1 process(es)"
    )
