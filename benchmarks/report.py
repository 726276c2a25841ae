"""The benchmark report: each run's raw figures judged against their targets, as one table.

Columns: subagentd (and any variants), the floor (the echo floor in protocol rows, the write floor
in send_message rows, the PostgreSQL write floor in the 1-process PostgreSQL one), the anyio floor (the echo floor's loop on anyio's fd readiness functions,
protocol rows), the MCP Python SDK and the MCP TypeScript SDK; ratio = subagentd ÷ each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PEERS = ("subagentd", "echo", "anyio", "mcp", "mcp-ts")
# RSS per live agent is read at rest, this long after the spawn burst: the server hands the heap
# the burst freed back to the OS once it has been quiet for 0.5 s (subagentd/server/memory.py)
REST_SECONDS = 1.5


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


def evaluate(raw: dict[str, Any]) -> list[Metric]:
    """The table's rows from one run's raw results (a scenario that did not run gives —)."""
    metrics: list[Metric] = []
    cold = raw.get("cold_start", {})
    tools = raw.get("tool_calls", {})

    def val(d: dict, kind: str, key: str, scale: float = 1.0) -> float | None:
        entry = d.get(kind)
        return None if entry is None else entry[key] * scale

    def within(s: float, peer: float | None, factor: float) -> bool:
        """s ≤ factor x peer (a missing peer figure misses the target)."""
        return peer is not None and s <= factor * peer

    # cold start
    m = Metric("cold_start_ms", "cold start: spawn → initialize response (median)", "ms")
    m.values = {k: val(cold, k, "median_s", 1e3) for k in PEERS}
    s, mcp, ts = m.values["subagentd"], m.values["mcp"], m.values["mcp-ts"]
    if s is not None:
        m.target = "≤ 250 ms, ≤ 0.25x MCP SDK, ≤ 0.5x TS SDK"
        m.met = s <= 250 and within(s, mcp, 0.25) and within(s, ts, 0.5)
        m.ratio = _ratio(m.values)
    metrics.append(m)

    m = Metric("idle_rss_mib", "idle RSS after initialize", "MiB")
    m.values = {k: val(cold, k, "idle_rss_kib", 1 / 1024) for k in PEERS}
    s = m.values["subagentd"]
    if s is not None:
        m.target = "≤ 40 MiB, ≤ 0.5x TS SDK"
        m.met = s <= 40 and within(s, m.values["mcp-ts"], 0.5)
        m.ratio = _ratio(m.values)
    metrics.append(m)

    m = Metric("tools_call_per_s", "tools/call list_agents, pipelined", "req/s")
    m.values = {k: val(tools, k, "per_s") for k in PEERS}
    s, mcp, ts = m.values["subagentd"], m.values["mcp"], m.values["mcp-ts"]
    if s is not None:
        m.target = "≥ 15x MCP SDK, ≥ 3x TS SDK"
        m.met = mcp is not None and s >= 15 * mcp and ts is not None and s >= 3 * ts
        m.ratio = _ratio(m.values)
    metrics.append(m)

    for key, label in (("rtt_p50_s", "p50"), ("rtt_p99_s", "p99")):
        m = Metric(f"tools_call_{label}_us", f"tools/call list_agents round trip {label}", "µs")
        m.values = {k: val(tools, k, key, 1e6) for k in PEERS}
        if (s := m.values["subagentd"]) is not None:
            m.ratio = _ratio(m.values)
            m.target = "(informational)"
            if label == "p50":
                m.target = "≤ 0.5x TS SDK"
                m.met = within(s, m.values["mcp-ts"], 0.5)
        metrics.append(m)

    for durability, floor in (("normal", 10_000), ("full", 5_000)):
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
            m.target = f"≥ {floor:,}/s, ≥ 0.5x write floor"
            m.met = (
                send["per_s"] >= floor
                and send["errors"] == 0
                and written is not None
                and send["per_s"] >= 0.5 * written["per_s"]
            )
            m.ratio = _ratio(m.values)
            if send["errors"]:
                m.note = f"{send['errors']} error responses"
        if written:
            m.note = "; ".join(filter(None, [m.note, f"floor: {written['group']} rows per commit"]))
        metrics.append(m)
        m = Metric(
            f"send_{durability}_seq_p50_us",
            f"sequential send_message p50, --durability {durability}",
            "µs",
        )
        m.values = {"subagentd": send["seq_p50_s"] * 1e6 if send else None}
        if send:
            if durability == "normal":
                m.target = "≤ 200 µs"
                m.met = m.values["subagentd"] <= 200
            else:
                m.target = "(informational)"
            m.note = f"p99 {send['seq_p99_s'] * 1e6:.0f} µs"
        metrics.append(m)

    live = raw.get("live_agents")
    m = Metric("kib_per_live_agent", "RSS per live continuable agent, at rest", "KiB")
    m.values = {"subagentd": live["kib_per_agent"] if live else None}
    if live:
        m.target = "≤ 2 KiB"
        m.met = live["kib_per_agent"] <= 2
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
        if n == 10000:
            m.target = "≤ 50 ms"
            m.met = m.values["subagentd"] <= 50
        elif n == 100000 and "10000" in listing:
            growth = entry["median_s"] / listing["10000"]["median_s"]
            m.target = "linear from 10k (≤ 12x the 10k time)"
            m.met = growth <= 12
            m.ratio = f"{growth:.1f}x the 10k time"
        elif n == 1000000 and "100000" in listing:
            growth = entry["median_s"] / listing["100000"]["median_s"]
            m.target = "linear from 100k (≤ 11x the 100k time)"
            m.met = growth <= 11
            m.ratio = f"{growth:.1f}x the 100k time"
        else:
            m.target = "(informational)"
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

    for suffix, store in (("", "one file"), ("_postgres", "one PostgreSQL database")):
        for n, entry in (raw.get(f"shared_sends{suffix}") or {}).items():
            m = Metric(
                f"shared_send{suffix}_{n}_per_s",
                f"durable send_message pipelined, {n} process(es) sharing {store}",
                "msg/s",
            )
            m.values = {"subagentd": entry["per_s"]}
            m.target = "(informational)"
            m.note = f"{entry['requests']:,} sent, {entry['refused']:,} refused 1011 busy"
            written = raw.get("pg_write_floor") if suffix and n == "1" else None
            if written:  # one writer's floor: the 1-process row's
                m.values["pg"] = written["per_s"]
                m.ratio = _ratio(m.values)
                m.note += f"; floor: {written['group']} rows per commit"
            metrics.append(m)

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
            if label == "p50" and not suffix:
                m.target = "≤ 5 ms"
                m.met = bool(cross) and m.values["subagentd"] <= 5
            else:
                m.target = "(informational)"
            metrics.append(m)

    restart = raw.get("restart")
    m = Metric("restart_first_response_ms", "restart → initialize response", "ms")
    if restart:
        m.values = {"subagentd": restart["to_initialize_s"] * 1e3}
        m.target = "≤ 1000 ms"
        m.met = m.values["subagentd"] <= 1000
        m.note = (
            f"{restart['sessions']:,} sessions, {restart['events']:,} events, "
            f"{restart['db_mib']:.0f} MiB DB; agents/open root answered at "
            f"{restart['to_open_root_s'] * 1e3:.0f} ms"
        )
    metrics.append(m)

    huge = raw.get("restart_huge")
    if huge:
        for key, name, label, bound in (
            ("to_initialize_s", "initialize", "initialize response", 1000),
            ("to_open_root_s", "open", "agents/open root response", 2000),
        ):
            m = Metric(
                f"restart_huge_{name}_ms",
                f"restart over {huge['sessions']:,} sessions → {label}",
                "ms",
            )
            m.values = {"subagentd": huge[key] * 1e3}
            m.target = f"≤ {bound} ms"
            m.met = m.values["subagentd"] <= bound
            m.note = (
                f"{huge['events']:,} events, {huge['db_mib']:.0f} MiB DB, built in"
                f" {huge['build_s']:.0f} s"
            )
            metrics.append(m)
    return metrics


RATIO_PEERS = (
    ("mcp", "MCP SDK"),
    ("mcp-ts", "TS SDK"),
    ("echo", "floor"),
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
        f"| metric | subagentd |{extra} floor | anyio floor | MCP SDK | TS SDK | ratio | target"
        " | met? |",
        "|---|---:|" + "---:|" * len(variants) + "---:|---:|---:|---:|---|---|---|",
    ]
    for m in metrics:
        met = {True: "yes", False: "**no**", None: ""}[m.met]
        name = f"{m.name} ({m.unit})"
        ratio = m.ratio + (f"; {m.note}" if m.note else "") if m.ratio else m.note
        cells = "".join(f" {fmt(m.values.get(v))} |" for v in variants)
        floor = next((m.values[k] for k in FLOORS if m.values.get(k) is not None), None)
        lines.append(
            f"| {name} | {fmt(m.values.get('subagentd'))} |{cells} {fmt(floor)} |"
            f" {fmt(m.values.get('anyio'))} | {fmt(m.values.get('mcp'))} | {fmt(m.values.get('mcp-ts'))} | {ratio} | {m.target}"
            f" | {met} |"
        )
    return "\n".join(lines)


def merge_variants(metrics: list[Metric], raws: dict[str, dict[str, Any]]) -> None:
    """Each variant's subagentd figure, as one more value of the working tree's metrics."""
    for name, raw in raws.items():
        theirs = {m.key: m.values.get("subagentd") for m in evaluate(raw)}
        for m in metrics:
            m.values[name] = theirs.get(m.key)
