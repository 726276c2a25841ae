"""Several runs of the same revision side by side: each row's subagentd figure, min, median and
max, with each run's load average, so a reader sees how much a figure moves from run to run.

    python benchmarks/spread.py RUN.json RUN.json RUN.json [--out results/spread.md]

Each RUN.json is a `latest.json` that `run.py` wrote (`run.py --out DIR` keeps runs apart). The
rows are judged the way report.py judges one run; a target's column says in how many of the runs
it held. `report.py --readme --runs …` puts the same min–max beside the committed run's figure in
benchmarks/README.md's targets table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from typing import Any

from report import Metric, fmt, judged


@dataclass
class Spread:
    """One row's subagentd figure over the runs (None where a run did not measure it)."""

    key: str
    name: str
    unit: str
    target: str
    values: list[float | None]
    held: list[bool | None]

    @property
    def measured(self) -> list[float]:
        return [v for v in self.values if v is not None]

    def range(self) -> str:
        """`min–max (median)` of the measured runs; one figure when only one run measured it."""
        got = self.measured
        if not got:
            return "—"
        if len(got) == 1:
            return fmt(got[0])
        return f"{fmt(min(got))}–{fmt(max(got))} (median {fmt(statistics.median(got))})"

    def verdicts(self) -> str:
        judged_runs = [h for h in self.held if h is not None]
        return f"{sum(judged_runs)} of {len(judged_runs)}" if judged_runs else ""


def load(paths: list[str]) -> list[dict[str, Any]]:
    runs = []
    for path in paths:
        with open(path) as fh:
            runs.append(json.load(fh))
    return runs


def spreads(runs: list[dict[str, Any]]) -> list[Spread]:
    """Every row any run has, in the first run's order, with each run's figure and verdict."""
    per_run: list[dict[str, Metric]] = [{m.key: m for m in judged(r["raw"])} for r in runs]
    keys: list[str] = []
    for rows in per_run:
        keys += [k for k in rows if k not in keys]
    out = []
    for key in keys:
        first = next(rows[key] for rows in per_run if key in rows)
        out.append(
            Spread(
                key,
                first.name,
                first.unit,
                first.target,
                [rows[key].values.get("subagentd") if key in rows else None for rows in per_run],
                [rows[key].met if key in rows else None for rows in per_run],
            )
        )
    return out


def render(runs: list[dict[str, Any]]) -> str:
    envs = [r["environment"] for r in runs]
    lines = [
        f"# {len(runs)} runs side by side",
        "",
        *(
            f"- run {i + 1}: {e.get('mode', '?')} run of {e.get('date', '?')}, commit"
            f" {e.get('commit', '?')}, 1-min load average before/after"
            f" {e.get('loadavg_1m_before_after', '?')}, {e.get('seconds', 0):.0f} s"
            for i, e in enumerate(envs)
        ),
        "",
        "| row | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | min–max (median)"
        " | target | held in |",
        "|---|" + "---:|" * len(runs) + "---:|---|---|",
    ]
    for s in spreads(runs):
        cells = " | ".join(fmt(v) for v in s.values)
        lines.append(
            f"| {s.name} ({s.unit}) | {cells} | {s.range()} | {s.target} | {s.verdicts()} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="latest.json files of run.py")
    parser.add_argument("--out", help="write the table here (markdown) as well as printing it")
    args = parser.parse_args(argv)
    text = render(load(args.runs))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
