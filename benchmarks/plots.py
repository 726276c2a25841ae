"""Pictures of one benchmark run, drawn from latest.json (run.py calls this): each scenario's
throughput and latency beside its floors (physical, stack, anyio) and the SDKs, list_agents time
against tree size on log axes, and tools/call latency percentiles, at rest and under load.

    python benchmarks/plots.py [benchmarks/results/latest.json] [--out DIR]

Writes throughput.svg, latency.svg, listing.svg and tail.svg (SVG: small, diffable, no date
stamped in).

tail.svg's series: at rest, `raw["tool_calls"][kind]["rtt_percentiles_s"]` of subagentd, the stack
floor and the TS SDK (run.py `tool_calls`); under load, scale.py's `raw["tail"]` (`p50_s`, `p90_s`,
`p99_s`, `p99_9_s` while its agents run turns) and every entry of `raw["tail_under_load"]` (a
scenario's name → `{"percentiles_s": {"50": s, …, "99.9": s}}` or `{"samples_s": [s, …]}`), each
its own line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
from report import PERCENTILES, percentiles  # noqa: E402

# (values key in latest.json, legend label, colour): the floors are grey, the SDKs muted
SERIES = (
    ("subagentd", "subagentd", "#1f77b4"),
    ("floor", "physical floor (echo / sqlite / psycopg)", "#9e9e9e"),
    ("stack", "stack floor (transport + jsonrpcserver)", "#4d4d4d"),
    ("anyio", "anyio floor", "#c7c7c7"),
    ("mcp", "MCP Python SDK", "#d62728"),
    ("mcp-ts", "MCP TypeScript SDK", "#ff7f0e"),
)
THROUGHPUT = (
    ("tools_call_per_s", "tools/call\npipelined"),
    ("ping_per_s", "ping\npipelined"),
    ("send_normal_per_s", "send_message\nnormal"),
    ("send_full_per_s", "send_message\nfull"),
    ("shared_send_postgres_1_per_s", "send_message\nPostgreSQL"),
)
LATENCY = (
    ("cold_start_ms", "cold start (ms)"),
    ("idle_rss_mib", "idle RSS (MiB)"),
    ("tools_call_p50_us", "tools/call round trip p50 (µs)"),
    ("tools_call_p99_us", "tools/call round trip p99 (µs)"),
    ("ping_p50_us", "ping round trip p50 (µs)"),
    ("send_normal_seq_p50_us", "send_message one in flight p50 (µs)"),
)
# tail.svg: the peers whose at-rest percentiles sit beside subagentd's
AT_REST = (
    ("subagentd", "subagentd at rest", "#1f77b4"),
    ("stack", "stack floor at rest", "#4d4d4d"),
    ("mcp-ts", "MCP TypeScript SDK at rest", "#ff7f0e"),
)
UNDER_LOAD = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def series_value(metric: dict[str, Any], key: str) -> float | None:
    values = metric["values"]
    if key == "floor":  # the echo floor for protocol rows, a write floor for send_message rows
        return next(
            (values[k] for k in ("echo", "sqlite", "pg") if values.get(k) is not None), None
        )
    return values.get(key)


def grouped_bars(ax: Any, metrics: list[dict[str, Any]], labels: list[str]) -> None:
    """One group of bars per metric, one bar per series that has a figure (log y axis)."""
    width = 0.8 / len(SERIES)
    for i, (key, legend, colour) in enumerate(SERIES):
        xs, ys = [], []
        for x, metric in enumerate(metrics):
            v = series_value(metric, key)
            if v is not None:
                xs.append(x + (i - (len(SERIES) - 1) / 2) * width)
                ys.append(v)
        if ys:
            bars = ax.bar(xs, ys, width, label=legend, color=colour)
            ax.bar_label(bars, labels=[_short(y) for y in ys], fontsize=7, rotation=90, padding=2)
    ax.set_xticks(range(len(metrics)), labels)
    ax.set_yscale("log")
    ax.margins(y=0.25)


def _short(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def throughput(metrics: dict[str, dict[str, Any]], out: str) -> str | None:
    chosen = [(metrics[k], label) for k, label in THROUGHPUT if k in metrics]
    if not chosen:
        return None
    fig, ax = plt.subplots(figsize=(9, 5.5))
    grouped_bars(ax, [m for m, _ in chosen], [label for _, label in chosen])
    ax.set_ylabel("requests per second (log)")
    ax.set_title("Throughput, pipelined (higher is better)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    return _save(fig, out, "throughput.svg")


def latency(metrics: dict[str, dict[str, Any]], out: str) -> str | None:
    chosen = [(metrics[k], label) for k, label in LATENCY if k in metrics]
    if not chosen:
        return None
    fig, axes = plt.subplots(1, len(chosen), figsize=(2.6 * len(chosen), 4.5), squeeze=False)
    for ax, (metric, label) in zip(axes[0], chosen, strict=True):
        grouped_bars(ax, [metric], [""])
        ax.set_title(label, fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3)
    fig.suptitle("Latency and memory (lower is better; round trips: one request in flight)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return _save(fig, out, "latency.svg", layout=False)


def listing(raw: dict[str, Any], out: str) -> str | None:
    entries = sorted((int(n), e["median_s"] * 1e3) for n, e in (raw or {}).items())
    if not entries:
        return None
    sizes, ms = [n for n, _ in entries], [t for _, t in entries]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(sizes, ms, "o-", label="list_agents descendants (median)", color="#1f77b4")
    ax.plot(
        sizes,
        [ms[0] * n / sizes[0] for n in sizes],
        "--",
        color="#9e9e9e",
        label="linear from the smallest tree",
    )
    for n, t in entries:
        ax.annotate(
            f"{t:,.0f} ms" if t >= 100 else f"{t:.3g} ms",
            (n, t),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("persisted sessions in the tree (log)")
    ax.set_ylabel("ms per listing (log)")
    ax.set_title("list_agents time vs tree size")
    ax.legend(fontsize=8)
    return _save(fig, out, "listing.svg")


def tail(raw: dict[str, Any], out: str) -> str | None:
    """tools/call latency percentiles: at rest (subagentd, the stack floor, the TS SDK) and
    under each load the run measured (raw["tail_under_load"])."""
    lines: list[tuple[str, str, str, dict[str, float]]] = []
    for kind, label, colour in AT_REST:
        got = percentiles((raw.get("tool_calls") or {}).get(kind) or {})
        if got:
            lines.append((label, colour, "--" if kind != "subagentd" else "-", got))
    loads = dict(raw.get("tail_under_load") or {})
    if isinstance(raw.get("tail"), dict):  # scale.py's tail: agents running turns meanwhile
        loads[f"{raw['tail'].get('agents', '?'):,} agents running turns"] = raw["tail"]
    for i, (name, entry) in enumerate(sorted(loads.items())):
        got = percentiles(entry if isinstance(entry, dict) else {})
        if got:
            lines.append(
                (f"subagentd under load: {name}", UNDER_LOAD[i % len(UNDER_LOAD)], "-", got)
            )
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, colour, style, got in lines:
        xs = [i for i, p in enumerate(PERCENTILES) if p in got]
        ys = [got[PERCENTILES[i]] * 1e6 for i in xs]
        ax.plot(xs, ys, "o" + style, color=colour, label=label)
    ax.set_xticks(range(len(PERCENTILES)), [f"p{p}" for p in PERCENTILES])
    ax.set_yscale("log")
    ax.set_ylabel("round trip (µs, log)")
    ax.set_title("tools/call latency percentiles, at rest and under load (lower is better)")
    ax.legend(fontsize=8)
    return _save(fig, out, "tail.svg")


def _save(fig: Any, out: str, name: str, layout: bool = True) -> str:
    path = os.path.join(out, name)
    if layout:
        fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def write_all(results: dict[str, Any], out: str) -> list[str]:
    """Every plot the run has figures for; the paths written."""
    plt.rcParams["svg.hashsalt"] = "subagentd-bench"  # stable element ids between runs
    by_key = {m["key"]: m for m in results["metrics"]}
    made = [
        throughput(by_key, out),
        latency(by_key, out),
        listing(results["raw"].get("list_scaling"), out),
        tail(results["raw"], out),
    ]
    return [p for p in made if p]


def main(argv: list[str] | None = None) -> int:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=os.path.join(here, "latest.json"))
    parser.add_argument("--out", default=None, help="default: the directory of the results file")
    args = parser.parse_args(argv)
    with open(args.results) as fh:
        results = json.load(fh)
    for path in write_all(results, args.out or os.path.dirname(os.path.abspath(args.results))):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
