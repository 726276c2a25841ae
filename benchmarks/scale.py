"""Scale scenarios: many live agents, the turn runner's rate, the tail under load.

`python benchmarks/scale.py [--quick] [--postgres] [--only many,runner,tail]` prints its rows (the
table report.py renders); `run.py` runs the same scenarios (`--only many,runner,tail`) and keeps
their raw figures in latest.json under `many`, `many_postgres`, `runner`, `tail`.

- many: N live continuable agents (first turns left running) spawned under one root through the
  host API (`agents/spawn`, pipelined in bursts), RSS before and at rest after, spawn rate, and
  `tools/call list_agents {scope: descendants}` over all of them. On PostgreSQL: 4 processes on
  one database, each its own root and N/4 agents, at the same time. The tree budgets
  (--tree-max-spawns, default 1,000) and quotas are lifted (harness.server_command).
- runner: `serve --caller root --runner true --max-running M` (M = 1, 4, 16): K continuable
  children spawned and settled, then K `send_message`s pipelined; turns per second from the
  first byte written until the K-th child settled again (`agent/settled`), beside a floor that runs
  `true` from Python (`subprocess.run`) K times in a loop, on M threads for M > 1. Runner
  overhead per turn from a pass with `date +%s.%N` as the command: its printed start time
  minus the turn's `turn_start` event time (start written and committed → process started), and
  the `turn_end` event time minus it (process exit → turn ended).
- tail: a host process with 1,000 live children whose turns it answers (turns/end, then a new
  `send_message` to the same child, so every child keeps running turns), and a second process on
  the same file taking pipelined `send_message` bursts (so the two contend for the write lock);
  meanwhile `tools/call list_agents` one in flight from a second root of the loaded process;
  percentiles of those round trips beside the same call before the load, and both processes'
  `server/stats` `lock_waits`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import msgspec
from harness import ROOT, Server, server_command
from report import REST_SECONDS, Metric, render_table

_decode = msgspec.json.Decoder().decode
STATUS_CAPS = {"experimental": {"subagentd": {"statusEvents": True, "hostNotifications": True}}}
QUIET_CAPS = {"experimental": {"subagentd": {"reportDelivery": "quiet"}}}
SCENARIOS = {"many", "runner", "tail"}
LOCK_WAIT_MS = 5000  # the documented --lock-wait-ms default (PROTOCOL.md section 1)


@dataclass
class ScaleSizes:
    agents: int  # many: live agents in one process
    pg_processes: int
    pg_agents: int  # many: per PostgreSQL process
    burst: int  # spawns per pipelined write
    runner_turns: int  # runner: turns per --max-running
    overhead_turns: int
    tail_agents: int
    tail_seconds: float
    tail_idle_samples: int


FULL = ScaleSizes(100_000, 4, 25_000, 5000, 400, 100, 1000, 20.0, 1000)
QUICK = ScaleSizes(2000, 4, 500, 1000, 40, 20, 100, 2.0, 200)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start(db: str, *extra: str) -> Server:
    return Server(server_command("subagentd", db) + list(extra))


def initialize(server: Server, capabilities: dict[str, Any] | None = None) -> None:
    server.call(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": capabilities or {},
            "clientInfo": {"name": "subagentd-bench", "version": "0"},
        },
    )
    server.notify("notifications/initialized")


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --- many live agents ---------------------------------------------------------------------


def spawn_live(
    server: Server, root: str, n: int, burst: int, notes: Any = None
) -> tuple[float, int]:
    """n continuable children of `root` spawned pipelined, `burst` frames a write; their first
    turns stay running (unless `notes`, handed each notification read, ends them). (seconds,
    error responses)."""
    elapsed, errors = 0.0, 0
    for first in range(0, n, burst):
        frames = [
            server.frame(
                "agents/spawn",
                {"caller": root, "label": f"a{i}", "prompt": "go", "child_id": f"{root}-{i}"},
                server.take_id(),
            )
            for i in range(first, min(n, first + burst))
        ]
        took, bad, examples = server.pipelined(frames, timeout=600)
        if examples and not errors:
            log(f"spawn errors, e.g. {examples[0][:300]!r}")
        if notes is not None:
            for note in server.client.notifications:
                notes(note)
        server.client.notifications.clear()  # their turn/start notes: not kept
        elapsed += took
        errors += bad
    return elapsed, errors


def listing(server: Server, root: str, reps: int = 3) -> tuple[float, int]:
    """tools/call list_agents descendants from `root`: median seconds, reply bytes."""
    frame = lambda: server.frame(  # noqa: E731
        "tools/call",
        {
            "name": "list_agents",
            "arguments": {"scope": "descendants"},
            "_meta": {"subagentd/caller": root},
        },
        server.take_id(),
    )
    times, size = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        server.write(frame())
        line = server.read_line(time.perf_counter() + 300)
        while line.startswith(b'{"jsonrpc":"2.0","method"'):
            line = server.read_line(time.perf_counter() + 300)
        times.append(time.perf_counter() - t0)
        size = len(line)
    return statistics.median(times), size


def rested_rss(server: Server) -> int:
    """RSS (KiB) at rest: after output enough for the server to trim its heap once quiet
    (wire/memory.py: 256 KiB, then 0.5 s without output; 8,000 pings), REST_SECONDS later. So
    the idle figure is trimmed as the one after the agents is, not the handshake's garbage."""
    server.pipelined([server.frame("ping", {}, server.take_id()) for _ in range(8000)])
    time.sleep(REST_SECONDS)
    server.call("ping", {})
    return server.rss_kib()


def many(sizes: ScaleSizes, tmp: str) -> dict[str, Any]:
    server = start(os.path.join(tmp, "many.db"))
    try:
        initialize(server)
        server.call("agents/open", {"agent_id": "root"})
        idle = rested_rss(server)
        seconds, errors = spawn_live(server, "root", sizes.agents, sizes.burst)
        server.call("ping", {})
        after = server.rss_kib()
        rested = rested_rss(server)
        list_s, list_bytes = listing(server, "root")
        server.close(timeout=120)
    finally:
        server.kill()
    n = sizes.agents
    return {
        "agents": n,
        "spawn_seconds": seconds,
        "spawn_per_s": n / seconds,
        "errors": errors,
        "rss_idle_kib": idle,
        "rss_after_burst_kib": after,
        "rss_rest_kib": rested,
        "kib_per_agent": (rested - idle) / n,
        "list_descendants_s": list_s,
        "list_bytes": list_bytes,
    }


def many_postgres(sizes: ScaleSizes, url: str) -> dict[str, Any]:
    k, n = sizes.pg_processes, sizes.pg_agents
    # four processes' pipelined bursts at the default --lock-wait-ms: a process that finds the
    # writer lock held waits in PostgreSQL's lock queue, served before the holder's next group
    servers = [start(url) for _ in range(k)]
    try:
        idle = []
        for i, server in enumerate(servers):
            initialize(server)
            server.call("agents/open", {"agent_id": f"r{i}"})
            idle.append(rested_rss(server))
        with ThreadPoolExecutor(k) as pool:
            began = time.perf_counter()
            done = list(
                pool.map(lambda j: spawn_live(servers[j], f"r{j}", n, sizes.burst), range(k))
            )
            wall = time.perf_counter() - began
        rested = [rested_rss(server) for server in servers]
        list_s, list_bytes = listing(servers[0], "r0")
        for server in servers:
            server.close(timeout=120)
    finally:
        for server in servers:
            server.kill()
    per_agent = [(r - i) / n for r, i in zip(rested, idle, strict=True)]
    return {
        "processes": k,
        "agents_each": n,
        "spawn_seconds": wall,
        "spawn_per_s": k * n / wall,
        "errors": sum(e for _, e in done),
        "rss_idle_kib": idle,
        "rss_rest_kib": rested,
        "kib_per_agent": max(per_agent),
        "kib_per_agent_each": per_agent,
        "list_descendants_s": list_s,
        "list_bytes": list_bytes,
    }


# --- the runner ---------------------------------------------------------------------------


def _until_idle(server: Server, want: set[str], deadline: float) -> None:
    """Read until every agent in `want` ended its turn: `agent/settled` (a runner's child is
    idle, then ready and settled after each turn: one `agent/settled` a turn; an `agent/status`
    idle also comes when it is woken, before its turn runs)."""
    while want:
        line = server.read_line(deadline)
        if b'"agent/settled"' in line[:60]:
            want.discard(_decode(line)["params"]["agent_id"])


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time, all its threads (/proc/PID/stat, clock ticks); its
    children (the runner's commands) are not counted."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tool(server: Server, name: str, arguments: dict[str, Any]) -> bytes:
    return server.frame("tools/call", {"name": name, "arguments": arguments}, server.take_id())


def idle_children(server: Server, k: int, deadline: float) -> list[str]:
    """A runner server initialized, K children spawned (c0…) and their first turns ended."""
    initialize(server, STATUS_CAPS)
    ids = [f"c{i}" for i in range(k)]
    spawns = [
        _tool(server, "spawn_agent", {"label": a, "prompt": "go", "child_id": a}) for a in ids
    ]
    server.write(b"".join(spawns))
    _until_idle(server, set(ids), deadline)
    return ids


def follow_ups(server: Server, ids: list[str]) -> bytes:
    """One send_message to each child, as the frames of one pipelined write."""
    return b"".join(
        _tool(server, "send_message", {"subagent_id": a, "message": "next"}) for a in ids
    )


def runner_rate(tmp: str, command: str, running: int, k: int) -> dict[str, Any]:
    """K runner turns of `command` at --max-running `running` (see the module docstring)."""
    db = os.path.join(tmp, f"runner-{running}-{time.monotonic_ns()}.db")
    server = start(db, "--caller", "root", "--runner", command, "--max-running", str(running))
    try:
        deadline = time.perf_counter() + 300
        ids = idle_children(server, k, deadline)
        sends = follow_ups(server, ids)
        cpu = cpu_seconds(server.proc.pid)
        t0 = time.perf_counter()
        server.write(sends)
        _until_idle(server, set(ids), deadline)
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(server.proc.pid) - cpu
        server.close(timeout=60)
    finally:
        server.kill()
    return {
        "db": db,
        "turns": k,
        "seconds": elapsed,
        "per_s": k / elapsed,
        "server_cpu_per_turn_s": cpu / k,
    }


def fork_floor(running: int, k: int) -> dict[str, Any]:
    """`true` run K times from Python (subprocess.run: fork/exec and wait), on `running` threads."""

    def one(_: int) -> None:
        subprocess.run(["true"], check=True)

    t0 = time.perf_counter()
    if running == 1:
        for i in range(k):
            one(i)
    else:
        with ThreadPoolExecutor(running) as pool:
            list(pool.map(one, range(k)))
    elapsed = time.perf_counter() - t0
    return {"turns": k, "seconds": elapsed, "per_s": k / elapsed}


def runner_overhead(tmp: str, k: int) -> dict[str, Any]:
    """Per turn, one turn at a time, with `date +%s.%N` (it prints the wall time it started at):
    turn_start event → that time, that time → turn_end event, from the transcript."""
    db = os.path.join(tmp, f"overhead-{time.monotonic_ns()}.db")
    server = start(db, "--caller", "root", "--runner", "date +%s.%N", "--max-running", "1")
    try:
        initialize(server, STATUS_CAPS)
        deadline = time.perf_counter() + 300
        server.write(_tool(server, "spawn_agent", {"label": "o", "prompt": "go", "child_id": "o"}))
        _until_idle(server, {"o"}, deadline)
        for _ in range(k):
            server.write(_tool(server, "send_message", {"subagent_id": "o", "message": "next"}))
            _until_idle(server, {"o"}, deadline)
        server.close(timeout=60)
    finally:
        server.kill()
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT turn_id, type, data, at FROM events WHERE type IN ('turn_start', 'turn_end')"
        " AND session_id != 'root' ORDER BY seq"
    ).fetchall()
    conn.close()
    started: dict[str, float] = {}
    to_process, to_end = [], []
    for turn_id, kind, data, at in rows:
        if kind == "turn_start":
            started[turn_id] = _at(at)
            continue
        output = json.loads(data).get("output")
        if turn_id not in started or not output:
            continue
        ran = float(output)
        to_process.append(ran - started[turn_id])
        to_end.append(_at(at) - ran)
    to_process, to_end = to_process[1:], to_end[1:]  # the spawn's first turn: a cold start
    return {
        "turns": len(to_process),
        "start_to_process_p50_s": statistics.median(to_process),
        "start_to_process_p99_s": pct(to_process, 99),
        "exit_to_end_p50_s": statistics.median(to_end),
        "exit_to_end_p99_s": pct(to_end, 99),
    }


def runner(sizes: ScaleSizes, tmp: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for running in (1, 4, 16):
        k = sizes.runner_turns * (1 if running == 1 else 2)
        out[str(running)] = {
            "runner": runner_rate(tmp, "true", running, k),
            "floor": fork_floor(running, k),
        }
    out["overhead"] = runner_overhead(tmp, sizes.overhead_turns)
    return out


# --- the tail under load ------------------------------------------------------------------


class Writer(threading.Thread):
    """Pipelined send_message bursts into a second process on the same file until stopped."""

    def __init__(self, server: Server) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.sent = 0
        self.errors = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                frames = [
                    self.server.frame(
                        "send_message",
                        {"caller": "w", "subagent_id": "w0", "message": f"m{self.sent + i}"},
                        self.server.take_id(),
                    )
                    for i in range(200)
                ]
                _, bad, _ = self.server.pipelined(frames, timeout=120)
                self.sent += len(frames)
                self.errors += bad
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001  (reported by the scenario)
            self.failure = exc


def tail(sizes: ScaleSizes, tmp: str) -> dict[str, Any]:
    db = os.path.join(tmp, "tail.db")
    host, other = start(db), start(db)
    writer = Writer(other)
    try:
        initialize(host, QUIET_CAPS)
        initialize(other)
        other.call("agents/open", {"agent_id": "w"})
        other.call("agents/spawn", {"caller": "w", "label": "w", "prompt": "go", "child_id": "w0"})
        host.call("agents/open", {"agent_id": "probe"})
        host.call(
            "agents/spawn", {"caller": "probe", "label": "p", "prompt": "go", "child_id": "p0"}
        )
        probe = {
            "name": "list_agents",
            "arguments": {"scope": "children"},
            "_meta": {"subagentd/caller": "probe"},
        }
        idle = [probe_once(host, probe, None) for _ in range(sizes.tail_idle_samples)]
        host.call("agents/open", {"agent_id": "root"})
        load = Load(host)
        spawned, errors = spawn_live(host, "root", sizes.tail_agents, sizes.burst, load.note)
        # from now on every turn/start read is answered: the turn ended, the child sent its next
        # message (all pipelined), so every child keeps running turns
        writer.start()
        loaded: list[float] = []
        began = time.perf_counter()
        while time.perf_counter() - began < sizes.tail_seconds:
            loaded.append(probe_once(host, probe, load))
        writer.stop.set()
        writer.join(120)
        seconds = time.perf_counter() - began
        host_stats = host.call("server/stats", {}, timeout=60)
        other_stats = other.call("server/stats", {}, timeout=60)
        host.close(timeout=60)
        other.close(timeout=60)
    finally:
        writer.stop.set()
        host.kill()
        other.kill()
    if writer.failure is not None:
        raise writer.failure
    return {
        "agents": sizes.tail_agents,
        "seconds": seconds,
        "turns_ended": load.ended,
        "turns_per_s": load.ended / seconds,
        "other_sends": writer.sent,
        "errors": errors + load.errors + writer.errors,
        "idle_p50_s": statistics.median(idle),
        "samples": len(loaded),
        **{f"p{p}_s".replace(".", "_"): pct(loaded, p) for p in (50, 90, 99, 99.9)},
        "max_s": max(loaded),
        "lock_waits": {
            "host": host_stats.get("lock_waits"),
            "other": other_stats.get("lock_waits"),
        },
        "lock_wait_ms": LOCK_WAIT_MS,
    }


BATCH = 4  # turns the host ends before each probe


class Load:
    """The host side of the tail's 1,000 agents: every turn/start is ended and answered with
    the child's next message, pipelined (replies counted, not waited for)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pending: list[str] = []  # children whose turn runs, to end now
        self.turns: dict[str, str] = {}
        self.ended = 0
        self.errors = 0

    def note(self, message: dict[str, Any]) -> None:
        if message.get("method") == "turn/start":
            params = message["params"]
            if params["agent_id"].startswith("root-"):
                self.turns[params["agent_id"]] = params["turn_id"]
                self.pending.append(params["agent_id"])

    def flush(self) -> None:
        """End up to BATCH pending turns and send each child its next message, in one write (the
        probe written next waits behind them, not behind every turn that is due)."""
        if not self.pending:
            return
        frames = []
        now, self.pending = self.pending[:BATCH], self.pending[BATCH:]
        for agent in now:
            turn = self.turns.pop(agent, None)
            if turn is None:
                continue
            frames.append(
                self.server.frame(
                    "turns/end",
                    {"agent_id": agent, "turn_id": turn, "reason": "completed", "output": "ok"},
                    self.server.take_id(),
                )
            )
            frames.append(
                self.server.frame(
                    "send_message",
                    {"caller": "root", "subagent_id": agent, "message": "next"},
                    self.server.take_id(),
                )
            )
            self.ended += 1
        self.server.write(b"".join(frames))

    def line(self, line: bytes) -> None:
        message = _decode(line)
        if "method" in message:
            self.note(message)
        else:
            self.errors += "error" in message


def probe_once(server: Server, probe: dict[str, Any], load: Load | None) -> float:
    """One tools/call round trip (written → its reply read); under load the turns read meanwhile
    are answered after it, the load's replies counted."""
    if load is not None:
        load.flush()
    rid = server.take_id()
    frame = server.frame("tools/call", probe, rid)
    needle = b',"id":%d}' % rid  # the reply's last member
    t0 = time.perf_counter()
    server.write(frame)
    deadline = t0 + 60
    while True:
        line = server.read_line(deadline)
        if line.rstrip().endswith(needle):
            took = time.perf_counter() - t0
            if b'"isError":true' in line or b'"error":' in line[:60]:
                raise server.failure(f"probe failed: {line[:300]!r}")
            return took
        if load is not None:
            load.line(line)


# --- the rows -----------------------------------------------------------------------------


def rows(raw: dict[str, Any]) -> list[Metric]:
    """The table's rows (report.py's Metric) from the raw figures of these scenarios."""
    out: list[Metric] = []
    for key, label in (("many", "one process"), ("many_postgres", "PostgreSQL")):
        m = raw.get(key)
        if not m:
            continue
        total = m.get("agents") or m["processes"] * m["agents_each"]
        where = label if key == "many" else f"{m['processes']} processes × {m['agents_each']:,}"
        kib = m["kib_per_agent"]
        out.append(
            Metric(
                f"{key}_kib_per_agent",
                f"RSS per live continuable agent, {total:,} agents, {where}",
                "KiB",
                {"subagentd": kib},
                target="≤ 2 KiB (RSS ≤ idle + 2 KiB each)",
                met=kib <= 2 and m["errors"] == 0,
                note="budgets and quotas lifted (--tree-max-spawns=0 …)"
                + f"; {m['errors']} errors; "
                + (
                    f"RSS {m['rss_idle_kib'] / 1024:.1f} → {m['rss_rest_kib'] / 1024:.1f} MiB at rest"
                    if key == "many"
                    else "worst process; RSS idle "
                    + "/".join(f"{r / 1024:.1f}" for r in m["rss_idle_kib"])
                    + " → "
                    + "/".join(f"{r / 1024:.1f}" for r in m["rss_rest_kib"])
                    + " MiB"
                ),
            )
        )
        out.append(
            Metric(
                f"{key}_spawn_per_s",
                f"agents/spawn pipelined into {total:,} live agents, {where}",
                "spawns/s",
                {"subagentd": m["spawn_per_s"]},
                target="(informational)",
                note=f"{m['spawn_seconds']:.1f} s in bursts of pipelined frames",
            )
        )
        out.append(
            Metric(
                f"{key}_list_ms",
                f"list_agents descendants over the live agents, {where}",
                "ms",
                {"subagentd": m["list_descendants_s"] * 1e3},
                target="(informational)",
                note=f"{m['list_bytes'] / 1024:,.0f} KiB reply; median of 3"
                + ("" if key == "many" else f"; one process's {m['agents_each']:,}"),
            )
        )
    run = raw.get("runner")
    if run:
        for running in ("1", "4", "16"):
            r, f = run[running]["runner"], run[running]["floor"]
            ratio = r["per_s"] / f["per_s"]
            out.append(
                Metric(
                    f"runner_{running}_per_s",
                    f"runner turns of `true`, --max-running {running}",
                    "turns/s",
                    {"subagentd": r["per_s"]},
                    ratio=f"{ratio:.2f}x fork floor ({f['per_s']:,.0f} turns/s)",
                    target="≥ 0.5x fork floor",
                    met=ratio >= 0.5,
                    miss=""
                    if ratio >= 0.5
                    else f"{ratio:.2f}x fork floor ({1 - ratio / 0.5:.0%} under)",
                    note=f"{r['turns']} turns; server CPU {r['server_cpu_per_turn_s'] * 1e3:.2f} ms"
                    f" a turn; floor: subprocess.run(['true']) on {running} thread(s)",
                )
            )
        o = run["overhead"]
        for key, label in (
            ("start_to_process", "turn start → process started"),
            ("exit_to_end", "process exit → turn ended"),
        ):
            out.append(
                Metric(
                    f"runner_{key}_ms",
                    f"runner overhead per turn, {label}, p50",
                    "ms",
                    {"subagentd": o[f"{key}_p50_s"] * 1e3},
                    target="(informational)",
                    note=f"p99 {o[f'{key}_p99_s'] * 1e3:.2f} ms; {o['turns']} turns of `date +%s.%N`"
                    " (its own start time) against the transcript's turn_start / turn_end times",
                )
            )
    t = raw.get("tail")
    if t:
        waits = [w for w in t["lock_waits"].values() if w]
        longest = max((w["max_ms"] for w in waits), default=0.0)
        gave_up = sum(w["gave_up"] for w in waits)
        count = sum(w["count"] for w in waits)
        p50, p99 = t["p50_s"], t["p99_s"]
        out.append(
            Metric(
                "tail_p99_over_p50",
                f"tools/call p99 ÷ p50 while {t['agents']:,} agents run turns",
                "x",
                {"subagentd": p99 / p50},
                target="≤ 10x",
                met=p99 <= 10 * p50 and t["errors"] == 0,
                note=f"{t['samples']} samples; {t['turns_ended']} turns ended ({t['turns_per_s']:.0f}/s);"
                f" {t['errors']} errors",
            )
        )
        for key, label in (
            ("p50", "p50"),
            ("p90", "p90"),
            ("p99", "p99"),
            ("p99_9", "p99.9"),
            ("max", "max"),
        ):
            out.append(
                Metric(
                    f"tail_{key}_us",
                    f"tools/call list_agents round trip under load, {label}",
                    "µs",
                    {"subagentd": t[f"{key}_s"] * 1e6},
                    target="(informational)",
                    note=(f"unloaded p50 {t['idle_p50_s'] * 1e6:.0f} µs" if key == "p50" else ""),
                )
            )
        out.append(
            Metric(
                "tail_lock_wait_max_ms",
                "longest wait for another process's write lock under load",
                "ms",
                {"subagentd": longest},
                target=f"≤ --lock-wait-ms ({t['lock_wait_ms']} ms), none given up",
                met=longest <= t["lock_wait_ms"] and gave_up == 0,
                note=f"server/stats lock_waits of both processes: {count} waits, {gave_up} given up;"
                f" the other process took {t['other_sends']:,} send_message meanwhile",
            )
        )
    return out


def run_all(sizes: ScaleSizes, only: set[str], postgres: bool, guarded: Any) -> dict[str, Any]:
    """The raw results of the chosen scenarios; `guarded(name, fn, *args)` runs one (run.py's
    Bench.guarded: a failure is recorded and the run goes on)."""
    tmp = tempfile.mkdtemp(prefix="subagentd-scale-")
    raw: dict[str, Any] = {}
    try:
        if not only or "many" in only:
            raw["many"] = guarded("many live agents", many, sizes, tmp)
            if postgres:
                sys.path.insert(0, ROOT)
                from tests.pg import PostgresServer

                pg = guarded("PostgreSQL server", lambda: PostgresServer(durable=True))
                if pg is not None:
                    try:
                        url = pg.url(pg.new_database())
                        raw["many_postgres"] = guarded(
                            "many live agents, PostgreSQL", many_postgres, sizes, url
                        )
                    finally:
                        pg.stop()
        if not only or "runner" in only:
            raw["runner"] = guarded("runner turns", runner, sizes, tmp)
        if not only or "tail" in only:
            raw["tail"] = guarded("tail under load", tail, sizes, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {k: v for k, v in raw.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument(
        "--postgres", action="store_true", help="many also on a throwaway PostgreSQL 15"
    )
    parser.add_argument("--only", default="", help="comma-separated: many,runner,tail")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures here")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    failures: list[str] = []

    def guarded(name: str, fn: Any, *more: Any) -> Any:
        log(f"{name} ...")
        t0 = time.perf_counter()
        try:
            result = fn(*more)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{name}: {exc}")
            log(f"FAILED {name}: {exc}")
            return None
        log(f"{name} done in {time.perf_counter() - t0:.1f}s")
        return result

    load = os.getloadavg()[0]
    raw = run_all(sizes, set(filter(None, args.only.split(","))), args.postgres, guarded)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"sizes": asdict(sizes), "raw": raw, "failures": failures}, fh, indent=2)
    print(render_table(rows(raw)))
    print(f"\n1-min load average before/after: {load:.2f} / {os.getloadavg()[0]:.2f}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
