"""benchmarks/scale.py's scenarios (many live agents, the runner, the tail under load) at tiny
sizes: each produces its rows, with sane values (counts as driven, percentiles in order, no
errors, both processes' lock waits read from server/stats). No figure is judged on speed."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import scale  # noqa: E402

TINY = scale.ScaleSizes(
    agents=60,
    pg_processes=2,
    pg_agents=20,
    burst=25,
    runner_turns=6,
    overhead_turns=4,
    tail_agents=12,
    tail_seconds=0.5,
    tail_idle_samples=20,
)


def run(only: set[str], postgres: bool = False) -> dict[str, Any]:
    failures: list[str] = []

    def guarded(name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # the test fails below with the scenario's own message
            failures.append(f"{name}: {exc}")
            return None

    raw = scale.run_all(TINY, only, postgres, guarded)
    assert failures == []
    return raw


def finite(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def test_many_live_agents_rows():
    raw = run({"many"})
    many = raw["many"]
    assert (many["agents"], many["errors"]) == (60, 0)
    assert many["spawn_per_s"] > 0 and finite(many["kib_per_agent"])
    assert many["rss_idle_kib"] > 0 and many["rss_rest_kib"] > 0
    assert many["list_bytes"] > 60 * 50  # one line per agent at least
    keys = [m.key for m in scale.rows(raw)]
    assert keys == ["many_kib_per_agent", "many_spawn_per_s", "many_list_ms"]


def test_many_live_agents_on_postgresql_rows():
    raw = run({"many"}, postgres=True)
    pg = raw["many_postgres"]
    assert (pg["processes"], pg["agents_each"], pg["errors"]) == (2, 20, 0)
    assert len(pg["rss_rest_kib"]) == 2 and all(finite(k) for k in pg["kib_per_agent_each"])
    assert "many_postgres_kib_per_agent" in [m.key for m in scale.rows(raw)]


def test_runner_rows():
    raw = run({"runner"})
    runner = raw["runner"]
    for running, turns in (("1", 6), ("4", 12), ("16", 12)):
        assert runner[running]["runner"]["turns"] == turns
        assert runner[running]["floor"]["turns"] == turns
        assert runner[running]["runner"]["per_s"] > 0 and runner[running]["floor"]["per_s"] > 0
        assert runner[running]["runner"]["server_cpu_per_turn_s"] >= 0
    overhead = runner["overhead"]
    assert overhead["turns"] == 4  # the spawn's own first turn is left out
    for key in ("start_to_process", "exit_to_end"):
        # both from the same wall clock: the process started after its start was written and
        # ended before its end was (a few ms of clock disagreement between the two is none)
        assert 0 <= overhead[f"{key}_p50_s"] <= overhead[f"{key}_p99_s"] < 60
    keys = [m.key for m in scale.rows(raw)]
    assert keys == [
        "runner_1_per_s",
        "runner_4_per_s",
        "runner_16_per_s",
        "runner_start_to_process_ms",
        "runner_exit_to_end_ms",
    ]


def test_tail_under_load_rows():
    raw = run({"tail"})
    tail = raw["tail"]
    assert (tail["agents"], tail["errors"]) == (12, 0)
    assert tail["samples"] > 0 and tail["turns_ended"] > 0 and tail["other_sends"] > 0
    order = [tail[k] for k in ("p50_s", "p90_s", "p99_s", "p99_9_s", "max_s")]
    assert order == sorted(order) and order[0] > 0
    for side in ("host", "other"):  # the server's own counters (server/stats lock_waits)
        waits = tail["lock_waits"][side]
        assert set(waits) == {"count", "total_ms", "max_ms", "gave_up"}
        assert waits["gave_up"] == 0 and 0 <= waits["max_ms"] <= waits["total_ms"] + 1e-9
    keys = [m.key for m in scale.rows(raw)]
    assert keys[0] == "tail_p99_over_p50" and keys[-1] == "tail_lock_wait_max_ms"
    assert len(keys) == 7
