"""The benchmark report: each run's raw figures judged against their targets, as one table.

Columns: subagentd (and any variants), the floor (the echo floor in protocol rows, the write floor
in send_message rows, the PostgreSQL write floor in the 1-process PostgreSQL one), the stack floor
(subagentd's transport and jsonrpcserver's dispatch of an empty method, peers/stack_floor.py),
the anyio floor (the echo floor's loop on anyio's fd readiness functions, protocol rows), the MCP
Python SDK and the MCP TypeScript SDK; ratio = subagentd ÷ each. Every target is a ratio of two
figures of the same run (`judge`); the met? column says by how much a missed one misses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PEERS = ("subagentd", "echo", "stack", "anyio", "mcp", "mcp-ts")
# RSS per live agent is read at rest, this long after the spawn burst: the server hands the heap
# the burst freed back to the OS once it has been quiet for 0.5 s (subagentd/wire/memory.py)
REST_SECONDS = 1.5
PERCENTILES = (
    "50",
    "90",
    "99",
    "99.9",
)  # a latency distribution's points in the tables and tail.svg


@dataclass
class Metric:
    key: str
    name: str
    unit: str
    values: dict[str, float | None] = field(default_factory=dict)
    target: str = ""
    met: bool | None = None
    ratio: str = ""
    note: str = ""
    miss: str = ""  # how far a missed target is: "1.54x TS SDK, bound 1.0x (54 % over)"


# A check of a target: (what is compared, subagentd's ratio or figure, the bound, "le" or "ge");
# a figure that was not measured (None) misses it
Check = tuple[str, float | None, float, str]


def judge(m: Metric, checks: list[Check]) -> None:
    """m.met from the checks, m.target from their bounds, m.miss says how far each missed one is."""
    m.target = ", ".join(
        f"{'≤' if op == 'le' else '≥'} {bound:g}x {what}" for what, _, bound, op in checks
    )
    misses = []
    for what, value, bound, op in checks:
        if value is None:
            misses.append(f"{what}: not measured")
        elif op == "le" and value > bound:
            misses.append(f"{value:.2f}x {what} ({value / bound - 1:.0%} over)")
        elif op == "ge" and value < bound:
            misses.append(f"{value:.2f}x {what} ({1 - value / bound:.0%} under)")
    m.met = not misses
    m.miss = "; ".join(misses)


def over(s: float | None, peer: float | None) -> float | None:
    """s ÷ peer, None when either is missing."""
    return None if s is None or not peer else s / peer


def evaluate(raw: dict[str, Any]) -> list[Metric]:
    """The table's rows from one run's raw results (a scenario that did not run gives —).

    Every target is a ratio of figures of the same run: against the stack floor (the transport
    and jsonrpcserver alone, peers/stack_floor.py), the physical floors and the fastest peer (the
    TS SDK). The exceptions are the issue's own bounds: RSS per live agent, cross-process delivery."""
    metrics: list[Metric] = []
    cold = raw.get("cold_start", {})
    tools = raw.get("tool_calls", {})
    pings = raw.get("ping_calls", {})

    def val(d: dict, kind: str, key: str, scale: float = 1.0) -> float | None:
        entry = d.get(kind)
        return None if entry is None else entry[key] * scale

    # cold start
    m = Metric("cold_start_ms", "cold start: spawn → initialize response (median)", "ms")
    m.values = {k: val(cold, k, "median_s", 1e3) for k in PEERS}
    s = m.values["subagentd"]
    if s is not None:
        judge(m, [("TS SDK", over(s, m.values["mcp-ts"]), 0.5, "le")])
        m.ratio = _ratio(m.values)
    metrics.append(m)

    m = Metric("idle_rss_mib", "idle RSS after initialize", "MiB")
    m.values = {k: val(cold, k, "idle_rss_kib", 1 / 1024) for k in PEERS}
    s = m.values["subagentd"]
    if s is not None:
        judge(m, [("TS SDK", over(s, m.values["mcp-ts"]), 0.7, "le")])
        m.ratio = _ratio(m.values)
    metrics.append(m)

    for scenario, label, prefix in (
        (tools, "tools/call list_agents", "tools_call"),
        (pings, "ping", "ping"),
    ):
        if scenario is pings and not pings:
            continue  # a run without the ping scenario has no ping rows
        m = Metric(f"{prefix}_per_s", f"{label}, pipelined", "req/s")
        m.values = {k: val(scenario, k, "per_s") for k in PEERS}
        if (s := m.values["subagentd"]) is not None:
            m.ratio = _ratio(m.values)
            if scenario is tools:
                judge(m, [("stack floor", over(s, m.values["stack"]), 0.4, "ge")])
            else:
                m.target = "(informational)"
        metrics.append(m)
        for key, pct in (("rtt_p50_s", "p50"), ("rtt_p99_s", "p99")):
            m = Metric(f"{prefix}_{pct}_us", f"{label} round trip {pct}", "µs")
            m.values = {k: val(scenario, k, key, 1e6) for k in PEERS}
            if (s := m.values["subagentd"]) is not None:
                m.ratio = _ratio(m.values)
                m.target = "(informational)"
                if scenario is tools and pct == "p50":
                    judge(
                        m,
                        [
                            ("stack floor", over(s, m.values["stack"]), 2.0, "le"),
                            ("TS SDK", over(s, m.values["mcp-ts"]), 1.0, "le"),
                        ],
                    )
            metrics.append(m)

    stack_p50 = val(tools, "stack", "rtt_p50_s", 1e6)  # the stack floor's tools/call round trip
    for durability in ("normal", "full"):
        send = raw.get(f"send_{durability}")
        written = raw.get(f"write_floor_{durability}")
        m = Metric(
            f"send_{durability}_per_s",
            f"durable send_message pipelined, --durability {durability}",
            "msg/s",
        )
        m.values = {
            "subagentd": send["per_s"] if send else None,
            "sqlite": written["per_s"] if written else None,
        }
        if send:
            judge(m, [("write floor", over(send["per_s"], m.values["sqlite"]), 0.5, "ge")])
            if send["errors"]:
                m.met = False
                m.miss = "; ".join(filter(None, [m.miss, f"{send['errors']} error responses"]))
                m.note = f"{send['errors']} error responses"
            m.ratio = _ratio(m.values)
        if written:
            m.note = "; ".join(filter(None, [m.note, f"floor: {written['group']} rows per commit"]))
        metrics.append(m)
        m = Metric(
            f"send_{durability}_seq_p50_us",
            f"sequential send_message p50, --durability {durability}",
            "µs",
        )
        m.values = {"subagentd": send["seq_p50_s"] * 1e6 if send else None, "stack": stack_p50}
        if send:
            m.ratio = _ratio(m.values)
            if durability == "normal":
                judge(m, [("stack floor", over(m.values["subagentd"], stack_p50), 3.0, "le")])
            else:
                m.target = "(informational)"
            m.note = f"p99 {send['seq_p99_s'] * 1e6:.0f} µs"
        metrics.append(m)

    inter = raw.get("interleaved")  # one in flight, rounds alternating with the floors'
    for name, what, bound in (
        ("list_agents", "tools/call list_agents", 2.0),
        ("send_message", "sequential durable send_message", 3.0),
    ):
        m = Metric(
            f"{name}_interleaved_p50_us", f"{what} p50, one in flight, interleaved rounds", "µs"
        )
        if inter:
            m.values = {k: inter[k]["p50_s"] * 1e6 for k in (name, "stack", "echo")}
            m.values["subagentd"] = m.values.pop(name)
            m.ratio = _ratio(m.values)
            judge(m, [("stack floor", over(m.values["subagentd"], m.values["stack"]), bound, "le")])
            m.note = f"p99 {inter[name]['p99_s'] * 1e6:.0f} µs; the echo floor shows the phase"
        metrics.append(m)

    live = raw.get("live_agents")
    m = Metric("kib_per_live_agent", "RSS per live continuable agent, at rest", "KiB")
    m.values = {"subagentd": live["kib_per_agent"] if live else None}
    if live:
        m.target = "≤ 2 KiB"
        m.met = live["kib_per_agent"] <= 2
        m.miss = "" if m.met else f"{live['kib_per_agent'] / 2 - 1:.0%} over"
        m.note = (
            f"{live['agents']} spawned pipelined at {live['spawn_per_s']:.0f}/s; RSS at rest "
            f"{live['rss_before_kib'] / 1024:.1f} → {live['rss_after_kib'] / 1024:.1f} MiB "
            f"({REST_SECONDS:g} s after the burst; right after it "
            f"{live['kib_per_agent_after_burst']:.2f} KiB per agent)"
        )
    metrics.append(m)

    listing = raw.get("list_scaling") or {}
    for size, entry in listing.items():
        n = int(size)
        m = Metric(
            f"list_descendants_{n}_ms",
            f"list_agents descendants, {n:,} persisted sessions",
            "ms",
        )
        m.values = {"subagentd": entry["median_s"] * 1e3}
        m.note = f"{entry['rows_listed']:,} rows, {entry['response_bytes'] / 1024:.0f} KiB response"
        m.target = "(informational)"
        for smaller, bound in ((n // 10, 12 if n == 100000 else 11),):
            if n >= 100000 and str(smaller) in listing:
                growth = entry["median_s"] / listing[str(smaller)]["median_s"]
                judge(m, [(f"the {smaller // 1000}k time", growth, bound, "le")])
                m.ratio = f"{growth:.1f}x the {smaller // 1000}k time"
        metrics.append(m)

    for size, entry in (raw.get("list_scaling_postgres") or {}).items():
        m = Metric(
            f"list_descendants_postgres_{size}_ms",
            f"list_agents descendants, {int(size):,} persisted sessions, PostgreSQL",
            "ms",
        )
        m.values = {"subagentd": entry["median_s"] * 1e3}
        m.target = "(informational)"
        m.note = f"{entry['rows_listed']:,} rows, {entry['response_bytes'] / 1024:.0f} KiB response"
        metrics.append(m)

    for suffix, store in (
        ("", "one file"),
        ("_postgres", "one PostgreSQL database"),
        ("_postgres_link", "one PostgreSQL database over a 1 ms link"),
        ("_postgres_link_pipelined", "one PostgreSQL database over a 1 ms link"),
    ):
        shared = raw.get(f"shared_sends{suffix}") or {}
        for n, entry in shared.items():
            window = entry.get("window")
            how = f"{window} in flight per process" if window else "pipelined"
            m = Metric(
                f"shared_send{suffix}_{n}_per_s",
                f"durable send_message {how}, {n} process(es) sharing {store}",
                "msg/s",
            )
            m.values = {"subagentd": entry["per_s"]}
            m.target = "(informational)"
            m.note = f"{entry['requests']:,} sent, {entry['refused']:,} refused 1011 busy"
            written = raw.get("pg_write_floor") if suffix == "_postgres" and n == "1" else None
            if written:  # one writer's floor: the 1-process row's
                m.values["pg"] = written["per_s"]
                m.ratio = _ratio(m.values)
                m.note += f"; floor: {written['group']} rows per commit"
            if suffix == "_postgres" and n == "1":
                judge(m, [("pg write floor", over(entry["per_s"], m.values.get("pg")), 0.5, "ge")])
            one = shared.get("1")
            growth = over(entry["per_s"], one["per_s"] if one else None)
            if suffix and n == "4" and not suffix.endswith("pipelined"):
                # over a link, round trips bound one process, not the machine: 4 reach 2.5x
                judge(m, [("1 process", growth, 2.5 if suffix.endswith("link") else 2.0, "ge")])
                m.target += ", 0 refused"
                if entry["refused"]:
                    m.met = False
                    m.miss = "; ".join(filter(None, [m.miss, f"{entry['refused']:,} refused"]))
            if suffix.endswith("pipelined") and n == "4":  # what bounds it: the cores
                m.note += (
                    "; a group carries up to a pipe buffer of sends, so one process is bound"
                    " by CPU, not by the link: 4 processes and PostgreSQL share 2 cores"
                )
            if suffix == "_postgres" and n == "4":
                m.note += (
                    "; on localhost the processes and PostgreSQL share the machine's cores:"
                    " CPU bounds them before any lock does (the rows over the link show what"
                    " the locks allow)"
                )
            if suffix and n == "4" and growth is not None:
                m.ratio = f"{growth:.2f}x 1 process"
            metrics.append(m)

    interference = raw.get("interference_postgres_link")
    if interference:
        m = Metric(
            "interference_postgres_link_p99_ms",
            f"send_message p99 on one tree while another process bursts"
            f" {interference['burst']:,} into its own, PostgreSQL over a 1 ms link",
            "ms",
        )
        alone, during = interference["alone"]["p99_s"], interference["during"]["p99_s"]
        m.values = {"subagentd": during * 1e3}
        growth = over(during, alone)
        judge(m, [("its p99 alone", growth, 2.0, "le")])
        if growth is not None:
            m.ratio = f"{growth:.2f}x alone"
        m.note = (
            f"alone {alone * 1e3:.2f} ms ({interference['alone']['samples']} samples), during"
            f" the bursts {interference['during']['samples']} samples"
            f" ({interference['bursts']} bursts, {interference['burst_seconds']:.2f} s each);"
            f" {interference['refused']:,} refused"
        )
        metrics.append(m)

    # cross-process delivery: the bounds in ms (a delivery's latency has no peer)
    bounds = {("", "p50"): 2.0, ("_postgres", "p50"): 5.0, ("_postgres", "p99"): 25.0}
    for suffix, store in (("", "SQLite file"), ("_postgres", "PostgreSQL")):
        cross = raw.get(f"cross_process{suffix}")
        if suffix and not cross:
            continue  # PostgreSQL rows only when --postgres ran them
        for label in ("p50", "p99"):
            m = Metric(
                f"cross_process{suffix}_{label}_ms",
                f"input across processes ({store}), followup → turn/start in the other {label}",
                "ms",
            )
            if cross:
                m.values = {"subagentd": cross[f"{label}_s"] * 1e3}
                m.note = f"{cross['samples']} samples, idle owner"
                path = cross.get("path")
                if path:  # the owner's side, sender's COMMIT → turn/start (median per crossing)
                    m.note += (
                        f"; owner per crossing: {path['round_trips']['median']:g} round trips,"
                        f" {path['wakeups']['median']:g} wake-ups ({path['rings']['median']:g}"
                        f" notifications), {path['commits']['median']:g} commits"
                    )
            bound = bounds.get((suffix, label))
            if not cross:
                pass  # not run: nothing judged
            elif bound is None:
                m.target = "(informational)"
            else:
                m.target = f"≤ {bound:g} ms"
                figure = m.values.get("subagentd")
                m.met = figure is not None and figure <= bound
                if figure is not None and not m.met:
                    m.miss = f"{figure / bound - 1:.0%} over"
            metrics.append(m)

    restart = raw.get("restart")
    m = Metric("restart_first_response_ms", "restart → initialize response", "ms")
    if restart:
        m.values = {"subagentd": restart["to_initialize_s"] * 1e3}
        m.target = "(informational)"
        m.note = (
            f"{restart['sessions']:,} sessions, {restart['events']:,} events, "
            f"{restart['db_mib']:.0f} MiB DB; agents/open root answered at "
            f"{restart['to_open_root_s'] * 1e3:.0f} ms"
        )
        cold_ms = m.values.get("subagentd")
        fresh = val(cold, "subagentd", "median_s", 1e3)
        if cold_ms is not None and fresh:
            m.ratio = f"{cold_ms / fresh:.2f}x a cold start on a new file"
    metrics.append(m)

    huge = raw.get("restart_huge")
    if huge:
        for key, name, label in (
            ("to_initialize_s", "initialize", "initialize response"),
            ("to_open_root_s", "open", "agents/open root response"),
        ):
            m = Metric(
                f"restart_huge_{name}_ms",
                f"restart over {huge['sessions']:,} sessions → {label}",
                "ms",
            )
            m.values = {"subagentd": huge[key] * 1e3}
            m.target = "(informational)"
            m.note = (
                f"{huge['events']:,} events, {huge['db_mib']:.0f} MiB DB, built in"
                f" {huge['build_s']:.0f} s"
            )
            metrics.append(m)
    return metrics


def percentiles(entry: dict[str, Any]) -> dict[str, float]:
    """A series' percentiles in seconds: given (`percentiles_s`, `rtt_percentiles_s`), as flat
    keys (`p50_s`, `p90_s`, `p99_s`, `p99_9_s`: scale.py's `tail`), or taken from its samples
    (`samples_s`)."""
    given = entry.get("percentiles_s") or entry.get("rtt_percentiles_s")
    if given:
        return {p: given[p] for p in PERCENTILES if p in given}
    flat = {
        p: entry[f"p{p.replace('.', '_')}_s"]
        for p in PERCENTILES
        if f"p{p.replace('.', '_')}_s" in entry
    }
    if flat:
        return flat
    samples = sorted(entry.get("samples_s") or [])
    if not samples:
        return {}
    at = lambda p: samples[min(len(samples) - 1, int(round(float(p) / 100 * (len(samples) - 1))))]  # noqa: E731
    return {p: at(p) for p in PERCENTILES}


RATIO_PEERS = (
    ("mcp", "MCP SDK"),
    ("mcp-ts", "TS SDK"),
    ("echo", "floor"),
    ("stack", "stack floor"),
    ("anyio", "anyio floor"),
    ("sqlite", "floor"),
    ("pg", "floor"),
)


FLOORS = ("echo", "sqlite", "pg")  # the floor column's peer: whichever of these a row has


def _ratio(values: dict[str, float | None]) -> str:
    """subagentd ÷ each peer that has a figure in this row."""
    s = values.get("subagentd")
    if s is None:
        return ""
    return ", ".join(
        f"{s / peer:.2f}x {label}" for key, label in RATIO_PEERS if (peer := values.get(key))
    )


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def render_table(metrics: list[Metric], variants: tuple[str, ...] = ()) -> str:
    extra = "".join(f" {v} |" for v in variants)
    lines = [
        f"| metric | subagentd |{extra} floor | stack floor | anyio floor | MCP SDK | TS SDK | ratio"
        " | target | met? |",
        "|---|---:|" + "---:|" * len(variants) + "---:|---:|---:|---:|---:|---|---|---|",
    ]
    for m in metrics:
        met = {True: "yes", False: "**no**", None: ""}[m.met] + (f": {m.miss}" if m.miss else "")
        name = f"{m.name} ({m.unit})"
        ratio = m.ratio + (f"; {m.note}" if m.note else "") if m.ratio else m.note
        cells = "".join(f" {fmt(m.values.get(v))} |" for v in variants)
        floor = next((m.values[k] for k in FLOORS if m.values.get(k) is not None), None)
        lines.append(
            f"| {name} | {fmt(m.values.get('subagentd'))} |{cells} {fmt(floor)} |"
            f" {fmt(m.values.get('stack'))} | {fmt(m.values.get('anyio'))} | {fmt(m.values.get('mcp'))} | {fmt(m.values.get('mcp-ts'))} | {ratio} | {m.target}"
            f" | {met} |"
        )
    return "\n".join(lines)


README_BEGIN = "<!-- targets: written by `python benchmarks/report.py --readme` -->"
README_END = "<!-- end of targets -->"


def render_targets(
    metrics: list[Metric], env: dict[str, Any], runs: list[dict[str, Any]] | None = None
) -> str:
    """The judged rows only: which targets hold and by how much each other one misses, with the
    run they come from (benchmarks/README.md carries it, `--readme`). `runs`: other runs of the
    same revision (latest.json files, spread.py), whose min–max and verdicts join each row."""
    import spread

    lines = [
        f"From the {env.get('mode', '?')} run of {env.get('date', '?')} (1-min load average"
        f" before/after {env.get('loadavg_1m_before_after', '?')}; its revision is in its"
        f" latest.md): {sum(m.met is True for m in metrics)} of"
        f" {sum(m.met is not None for m in metrics)} targets hold.",
    ]
    rows = {s.key: s for s in spread.spreads(runs)} if runs else {}
    if runs:
        loads = ", ".join(str(r["environment"].get("loadavg_1m_before_after")) for r in runs)
        lines.append(
            f"Beside it, {len(runs)} runs of the same revision (this one among them; load"
            f" averages {loads}): each row's min–max (median) and in how many it held"
            " (all rows: results/spread.md)."
        )
    spread_head = " runs: min–max (median) | held in |" if runs else ""
    lines += [
        "",
        f"| target | subagentd | holds? |{spread_head}",
        "|---|---:|---|" + ("---:|---|" if runs else ""),
    ]
    for m in metrics:
        if m.met is None:
            continue
        verdict = "yes" if m.met else f"**no**: {m.miss}"
        more = ""
        if runs:
            s = rows.get(m.key)
            more = f" {s.range()} {m.unit} | {s.verdicts()} |" if s else " — | |"
        lines.append(
            f"| {m.name} {m.target} | {fmt(m.values.get('subagentd'))} {m.unit} | {verdict} |"
            + more
        )
    return "\n".join(lines)


def judged(raw: dict[str, Any]) -> list[Metric]:
    """Every row of a run's raw figures, run.py's scenarios and scale.py's, as run.py makes them."""
    import scale  # the scale scenarios' rows (scale.py imports this module: not at its top)

    return evaluate(raw) + scale.rows(raw)


def write_readme(
    readme: str, results: dict[str, Any], runs: list[dict[str, Any]] | None = None
) -> None:
    """Replace the targets table between README_BEGIN and README_END of `readme` with the one of
    `results` (a latest.json), its raw figures judged by this report's targets (and `runs`'
    spread beside them)."""
    metrics = judged(results["raw"])
    with open(readme) as fh:
        text = fh.read()
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    table = render_targets(metrics, results["environment"], runs)
    with open(readme, "w") as fh:
        fh.write(f"{head}{README_BEGIN}\n{table}\n{README_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=os.path.join(here, "results", "latest.json"))
    parser.add_argument(
        "--readme", action="store_true", help="write the targets table into benchmarks/README.md"
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=[],
        help="other runs' latest.json (same revision): their spread beside each target",
    )
    args = parser.parse_args(argv)
    with open(args.results) as fh:
        results = json.load(fh)
    import spread

    runs = spread.load(args.runs) if args.runs else None
    if args.readme:
        write_readme(os.path.join(here, "README.md"), results, runs)
    else:
        print(render_targets(judged(results["raw"]), results["environment"], runs))
    return 0


def merge_variants(metrics: list[Metric], raws: dict[str, dict[str, Any]]) -> None:
    """Each variant's subagentd figure, as one more value of the working tree's metrics."""
    for name, raw in raws.items():
        theirs = {m.key: m.values.get("subagentd") for m in evaluate(raw)}
        for m in metrics:
            m.values[name] = theirs.get(m.key)


if __name__ == "__main__":
    raise SystemExit(main())
