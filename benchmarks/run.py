"""subagentd benchmarks: one run, side by side with the physical floors and the MCP SDKs.

    python benchmarks/run.py            # full run, a few minutes on 2 cores
    python benchmarks/run.py --quick    # smaller sizes, under a minute
    python benchmarks/run.py --baseline-src ../old-checkout --uvloop   # extra subagentd columns
    python benchmarks/run.py --flames   # then py-spy flame graphs (flames.py) into profiles/

Extra columns run the same scenarios right after the working tree's, scenario by scenario:
`baseline` is another checkout of subagentd (its own PYTHONPATH), `uvloop` the working tree
with --event-loop uvloop (the `fast` extra). Targets are judged on the working tree only.

Writes benchmarks/results/latest.md, latest.json and the plots (plots.py) to --out DIR.
Generated databases live in a temporary directory that is removed afterwards. Exits 1 when any
scenario failed (CI's smoke step relies on it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import msgspec  # noqa: E402
import scale  # noqa: E402
from dbgen import ROOT_ID, build_tree, build_tree_postgres, create_schema  # noqa: E402
from harness import PEERS as PEERS_DIR  # noqa: E402
from harness import (  # noqa: E402
    PYTHON,
    ROOT,
    Server,
    ServerFailure,
    accepted,
    serve_options,
    server_command,
)
from report import (  # noqa: E402
    PEERS,
    REST_SECONDS,
    evaluate,
    merge_variants,
    render_table,
    render_targets,
)

from subagentd.client import frames as wire  # noqa: E402

_encode = msgspec.json.Encoder().encode
F_GETPIPE_SZ = 1032  # fcntl: a pipe's capacity (Linux)


@dataclass
class Sizes:
    cold_starts: int
    pipelined: int
    pipelined_mcp: int
    round_trips: int
    round_trips_mcp: int
    sends: int
    sequential_sends: int
    live_agents: int
    list_sizes: tuple[int, ...]
    list_reps: dict[int, int]
    restart_sessions: int
    restart_events: int
    restarts: int
    huge_restart: tuple[int, int] | None  # (sessions, events) of the 1M restart, or None
    trials: int
    crossings: int


HUGE_LIST = 1_000_000  # the listing and restart over 1M sessions: left out by --quick, --no-huge
FULL = Sizes(
    cold_starts=10,
    pipelined=5000,
    pipelined_mcp=3000,
    round_trips=2000,
    round_trips_mcp=500,
    sends=5000,
    sequential_sends=1000,
    live_agents=5000,
    list_sizes=(1000, 10000, 100000, HUGE_LIST),
    list_reps={1000: 21, 10000: 9, 100000: 3, HUGE_LIST: 3},
    restart_sessions=100_000,
    restart_events=1_000_000,
    restarts=3,
    huge_restart=(1_000_000, 10_000_000),
    trials=3,
    crossings=500,
)
QUICK = Sizes(
    cold_starts=4,
    pipelined=2000,
    pipelined_mcp=800,
    round_trips=500,
    round_trips_mcp=200,
    sends=2000,
    sequential_sends=300,
    live_agents=1000,
    list_sizes=(1000, 10000),
    list_reps={1000: 9, 10000: 5},
    restart_sessions=20_000,
    restart_events=200_000,
    restarts=2,
    huge_restart=None,
    trials=1,
    crossings=100,
)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def own_tree(server: Any, k: int) -> None:
    """Process k's own tree: root r<k> with a child k<k> whose first turn started."""
    server.initialize()
    server.call("agents/open", {"agent_id": f"r{k}"})
    server.call(
        "agents/spawn", {"caller": f"r{k}", "label": "w", "prompt": "go", "child_id": f"k{k}"}
    )
    server.notification("turn/start", agent_id=f"k{k}")


class Bench:
    def __init__(
        self,
        sizes: Sizes,
        tmp: str,
        prefix: list[str] | None = None,
        source: str | None = None,
        args: list[str] | None = None,
        label: str = "",
    ) -> None:
        self.sizes = sizes
        self.env = {"PYTHONPATH": source} if source else None
        # an older checkout (a baseline) may lack options added since, e.g. the quota flags
        self.options = serve_options(self.env) if source else None
        self.args = args or []  # extra subagentd options (e.g. --event-loop uvloop)
        self.label = label  # prefixes its database files (several Benches share one temp dir)
        self.tmp = tmp
        self.prefix = prefix  # e.g. a profiler wrapped around subagentd
        self.raw: dict[str, Any] = {}
        self.failures: list[str] = []
        self.postgres: Any = None  # a tests/pg.py PostgresServer, with --postgres
        self._n = 0

    def db_path(self, tag: str) -> str:
        self._n += 1
        return os.path.join(self.tmp, f"{self.label}{tag}-{self._n}.db")

    def start(self, kind: str, db: str | None = None, durability: str = "normal") -> Server:
        if kind != "subagentd":
            return Server(server_command(kind, db, durability))
        command = server_command(kind, db, durability) + self.args
        if self.options is not None:
            command = accepted(command, self.options)
        return Server(command, prefix=self.prefix, env=self.env)

    # --- setup helpers -------------------------------------------------------------------

    def live_tree(self, server: Server, children: int = 1) -> None:
        """Open the root and spawn continuable children whose first turns stay running."""
        server.call("agents/open", {"agent_id": ROOT_ID})
        for i in range(children):
            server.call(
                "agents/spawn",
                {"caller": ROOT_ID, "label": f"child {i}", "prompt": "go", "child_id": f"c{i}"},
            )
            server.notification("turn/start", agent_id=f"c{i}")

    def ready(self, kind: str, db: str | None = None, durability: str = "normal") -> Server:
        server = self.start(kind, db, durability)
        server.initialize()
        if kind == "subagentd":
            self.live_tree(server)
        return server

    # --- scenarios -----------------------------------------------------------------------

    def cold_start(self, kind: str) -> dict[str, Any]:
        samples, rss = [], []
        for _ in range(self.sizes.cold_starts):
            db = self.db_path("cold") if kind == "subagentd" else None
            server = self.start(kind, db)
            try:
                rid = server.take_id()
                server.write(server.frame("initialize", _init_params(), rid))
                reply = server.response(rid, timeout=30)
                samples.append(time.perf_counter() - server.t_spawn)
                if "error" in reply:
                    raise server.failure(f"initialize failed: {reply['error']}")
                server.notify("notifications/initialized")
                server.call("ping", {}) if kind != "echo" else None
                rss.append(server.rss_kib())
                server.close()
            finally:
                server.kill()
        return {"samples_s": samples, "median_s": median(samples), "idle_rss_kib": median(rss)}

    def tool_calls(self, kind: str, method: str = "tools/call") -> dict[str, Any]:
        """tools/call list_agents (or `ping`): pipelined throughput, then one-in-flight round
        trips."""
        db = self.db_path("tools") if kind == "subagentd" else None
        server = self.ready(kind, db)
        frames = _tool_frames if method == "tools/call" else _ping_frames
        try:
            floor = 10 * self.sizes.pipelined  # the floors are fast: enough requests to time
            n = {
                "mcp": self.sizes.pipelined_mcp,
                "echo": floor,
                "anyio": floor,
                "stack": floor // 2,
            }.get(kind, self.sizes.pipelined)
            rtts = self.sizes.round_trips_mcp if kind == "mcp" else self.sizes.round_trips
            server.round_trips(frames(server, 200))  # warm-up
            trials = [server.pipelined(frames(server, n)) for _ in range(self.sizes.trials)]
            elapsed = median([t[0] for t in trials])
            errors = sum(t[1] for t in trials)
            examples = [e for t in trials for e in t[2]][:5]
            samples = server.round_trips(frames(server, rtts))
            server.close()
        finally:
            server.kill()
        return {
            "requests": n,
            "seconds": elapsed,
            "per_s": n / elapsed,
            "errors": errors,
            "error_examples": [e.decode(errors="replace") for e in examples],
            "rtt_p50_s": median(samples),
            "rtt_p99_s": pct(samples, 99),
            "rtt_percentiles_s": {p: pct(samples, float(p)) for p in ("50", "90", "99", "99.9")},
        }

    def interleaved(self) -> dict[str, Any]:
        """One request in flight, judged fairly: subagentd's tools/call list_agents and its
        sequential durable send_message beside the stack floor's and the echo floor's round
        trips, in alternating rounds of ROUND requests each (not one block after another), so a
        phase of the machine moves all four alike."""
        servers = {
            "subagentd": self.ready("subagentd", self.db_path("interleaved")),
            "stack": self.ready("stack"),
            "echo": self.ready("echo"),
        }
        kinds = [
            ("list_agents", "subagentd", _tool_frames),
            ("send_message", "subagentd", _send_frames),
            ("stack", "stack", _tool_frames),
            ("echo", "echo", _tool_frames),
        ]
        samples: dict[str, list[float]] = {name: [] for name, _, _ in kinds}
        try:
            for _, kind, frames in kinds:  # warm-up
                servers[kind].round_trips(frames(servers[kind], ROUND))
            for _ in range(max(2, self.sizes.round_trips // ROUND)):
                for name, kind, frames in kinds:
                    samples[name] += servers[kind].round_trips(frames(servers[kind], ROUND))
            for server in servers.values():
                server.close()
        finally:
            for server in servers.values():
                server.kill()
        return {name: {"p50_s": median(v), "p99_s": pct(v, 99)} for name, v in samples.items()}

    def send_messages(self, durability: str) -> dict[str, Any]:
        db = self.db_path(f"send-{durability}")
        server = self.ready("subagentd", db, durability)
        try:
            server.round_trips(_send_frames(server, 100))  # warm-up
            n = self.sizes.sends
            trials = [server.pipelined(_send_frames(server, n)) for _ in range(self.sizes.trials)]
            elapsed = median([t[0] for t in trials])
            errors = sum(t[1] for t in trials)
            examples = [e for t in trials for e in t[2]][:5]
            samples = server.round_trips(_send_frames(server, self.sizes.sequential_sends))
            server.close()
        finally:
            server.kill()
        return {
            "requests": n,
            "seconds": elapsed,
            "per_s": n / elapsed,
            "errors": errors,
            "error_examples": [e.decode(errors="replace") for e in examples],
            "seq_p50_s": median(samples),
            "seq_p99_s": pct(samples, 99),
        }

    def cross_process(self, backend: str = "sqlite") -> dict[str, Any]:
        """Input across processes (PROTOCOL.md, "Input across processes"): two processes on one
        file; b sends `agents/followup` to a's idle root; timed from the request written to b
        until a's `turn/start` for it is read, then a ends the turn (the root is idle again)."""
        db = self.database("cross", backend)
        owner, sender = self.start("subagentd", db), self.start("subagentd", db)
        try:
            owner.initialize()
            sender.initialize()
            owner.call("agents/open", {"agent_id": ROOT_ID})
            samples: list[float] = []
            warmup = 20
            for i in range(warmup + self.sizes.crossings):
                began = time.perf_counter()
                sender.call("agents/followup", {"agent_id": ROOT_ID, "message": f"m{i}"})
                start = owner.notification("turn/start", agent_id=ROOT_ID)
                if i >= warmup:
                    samples.append(time.perf_counter() - began)
                owner.call(
                    "turns/end",
                    {"agent_id": ROOT_ID, "turn_id": start["turn_id"], "reason": "completed"},
                )
            path = self.cross_path(owner, sender) if backend == "postgres" else None
            sender.close()
            owner.close()
        finally:
            sender.kill()
            owner.kill()
        result = {"samples": len(samples), "p50_s": median(samples), "p99_s": pct(samples, 99)}
        if path is not None:
            result["path"] = path
        return result

    def cross_path(self, owner: Server, sender: Server, passes: int = 20) -> dict[str, Any]:
        """What the owner did between the sender's COMMIT and its `turn/start`, from its
        server/stats `traffic` (PostgreSQL): round trips to the database, doorbell wake-ups and
        the notifications they brought, and group commits, per crossing (their median, min and
        max over `passes` untimed crossings after the timed ones). Two stats calls back to back
        give what one costs itself (its reads are counted in the next one's figures)."""

        def figures() -> tuple[int, int, int, int]:
            stats = owner.call("server/stats", {})
            t = stats["traffic"]
            return t["round_trips"], t["wakeups"], t["rings"], stats.get("commits") or 0

        first, second = figures(), figures()
        own = [b - a for a, b in zip(first, second, strict=True)]
        deltas: list[list[int]] = []
        for i in range(passes):
            before = figures()
            sender.call("agents/followup", {"agent_id": ROOT_ID, "message": f"counted {i}"})
            start = owner.notification("turn/start", agent_id=ROOT_ID)
            after = figures()
            deltas.append([b - a - c for a, b, c in zip(before, after, own, strict=True)])
            owner.call(
                "turns/end",
                {"agent_id": ROOT_ID, "turn_id": start["turn_id"], "reason": "completed"},
            )
        path: dict[str, Any] = {"passes": passes}
        for k, name in enumerate(("round_trips", "wakeups", "rings", "commits")):
            column = sorted(d[k] for d in deltas)
            path[name] = {"median": median(column), "min": column[0], "max": column[-1]}
        return path

    def database(self, tag: str, backend: str) -> str:
        """A new database for one scenario: a file here, or one on the throwaway PostgreSQL."""
        if backend == "sqlite":
            return self.db_path(tag)
        assert self.postgres is not None, "--postgres starts the PostgreSQL server"
        return self.postgres.url(self.postgres.new_database())

    def shared_sends(
        self, processes: int, backend: str = "sqlite", link: float = 0.0, window: int | None = None
    ) -> dict[str, Any]:
        """Durable send_message with several processes on one file DB (`--durability normal`):
        each runs its own root and busy child and is sent its share of the burst, pipelined, all
        at the same time; accepted messages per second over the whole burst. A write that finds
        the lock taken past the wait is refused 1011 busy (PROTOCOL.md section 1): counted.
        `link`: PostgreSQL is reached through linkproxy.py, `link` seconds each way (a database
        on another host). `window`: each process has at most that many sends in flight (as many
        agents, each sending its next message once the last is acknowledged), not all of them."""
        db, proxy = self.linked(self.database(f"shared-{processes}", backend), link)
        servers = [self.start("subagentd", db) for _ in range(processes)]
        try:
            for k, server in enumerate(servers):
                own_tree(server, k)
            share = self.sizes.sends // processes
            bursts = [
                [
                    server.frame("send_message", _shared_params(k, i), server.take_id())
                    for i in range(share)
                ]
                for k, server in enumerate(servers)
            ]
            with ThreadPoolExecutor(processes) as pool:
                began = time.perf_counter()
                results = list(
                    pool.map(
                        lambda job: job[0].pipelined(job[1], window=window),
                        zip(servers, bursts, strict=True),
                    )
                )
                elapsed = time.perf_counter() - began
            refused = sum(r[1] for r in results)
            for server in servers:
                server.close()
        finally:
            for server in servers:
                server.kill()
            if proxy is not None:
                proxy.close()
        sent = share * processes
        return {
            "processes": processes,
            "requests": sent,
            "seconds": elapsed,
            "per_s": (sent - refused) / elapsed,
            "refused": refused,
            "window": window,
        }

    def linked(self, db: str, link: float) -> tuple[str, Any]:
        """`db` as reached through linkproxy.py, `link` seconds each way (a database on another
        host), with the proxy (None, and `db` itself, without a link)."""
        if not link:
            return db, None
        from benchmarks.linkproxy import LinkProxy

        assert self.postgres is not None
        proxy = LinkProxy("127.0.0.1", self.postgres.port, link)
        name = urllib.parse.urlsplit(db).path.lstrip("/")
        return f"postgresql://{self.postgres.user}@127.0.0.1:{proxy.port}/{name}", proxy

    def interference(self, link: float) -> dict[str, Any]:
        """One process's pipelined burst of BURST sends into its own tree against another
        process's send_message latency on another tree (one request at a time), PostgreSQL over
        the link: the prober's latencies alone, then while a burst runs (BURSTS of them)."""
        db, proxy = self.linked(self.database("interference", "postgres"), link)
        servers = [self.start("subagentd", db) for _ in range(2)]
        try:
            for k, server in enumerate(servers):
                own_tree(server, k)
            burster, prober = servers
            probes = iter(range(10**9))

            def probe() -> float:
                frame = prober.frame(
                    "send_message", _shared_params(1, next(probes)), prober.take_id()
                )
                return prober.round_trips([frame])[0]

            for _ in range(20):  # warm-up
                probe()
            alone = [probe() for _ in range(PROBES)]
            during: list[float] = []
            burst_s, refused = [], 0
            for n in range(BURSTS):  # a burst lasts well under a second: pooled samples
                burst = [
                    burster.frame("send_message", _shared_params(0, i), burster.take_id())
                    for i in range(n * BURST, (n + 1) * BURST)
                ]
                with ThreadPoolExecutor(1) as pool:
                    bursting = pool.submit(burster.pipelined, burst)
                    while not bursting.done():
                        during.append(probe())
                    seconds, errors, _ = bursting.result()
                burst_s.append(seconds)
                refused += errors
        finally:
            for server in servers:
                server.kill()
            if proxy is not None:
                proxy.close()
        return {
            "burst": BURST,
            "bursts": BURSTS,
            "burst_seconds": median(burst_s),
            "refused": refused,
            "alone": {"samples": len(alone), "p50_s": median(alone), "p99_s": pct(alone, 99)},
            "during": {"samples": len(during), "p50_s": median(during), "p99_s": pct(during, 99)},
        }

    def write_floor(self, durability: str) -> dict[str, Any]:
        """peers/sqlite_floor.py: send_message's inbox rows, straight into SQLite, in the groups
        the server commits a pipelined burst in (one per pipe buffer of frames; README)."""
        db = self.db_path(f"floor-{durability}")
        create_schema(db, self.env)
        n, trials = self.sizes.sends, self.sizes.trials
        first_id = 104  # send_messages: ids 1-3 set it up, 4-103 are its warm-up sends
        frame_bytes = statistics.mean(
            len(wire.request(i, "send_message", _send_params(i)))
            for i in range(first_id, first_id + n * trials)
        )
        return self._run_floor("sqlite_floor.py", db, frame_bytes, "--durability", durability)

    def _run_floor(self, script: str, db: str, frame_bytes: float, *extra: str) -> dict[str, Any]:
        """A write floor (peers/SCRIPT) over this run's burst: the groups the server commits it
        in (one pipe buffer of its frames each), its sizes and trials; its JSON, with the sizes."""
        group = pipe_capacity() // int(frame_bytes)
        done = subprocess.run(
            [PYTHON, os.path.join(PEERS_DIR, script), "--db", db, "--group", str(group)]
            + ["--messages", str(self.sizes.sends), "--trials", str(self.sizes.trials), *extra],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode:
            raise ServerFailure(f"{script} failed (rc={done.returncode}):\n{done.stderr}")
        return {
            **json.loads(done.stdout),
            "frame_bytes": frame_bytes,
            "pipe_bytes": pipe_capacity(),
        }

    def pg_write_floor(self) -> dict[str, Any]:
        """peers/pg_floor.py: the 1-process `shared` burst's inbox rows, straight into a fresh
        database of the --postgres server (its schema by the server), in the groups the server
        commits that burst in (one per pipe buffer of its frames), as write_floor does."""
        db = self.database("pg-floor", "postgres")
        create_schema(db, self.env)
        n = self.sizes.sends
        first_id = 4  # shared_sends: ids 1-3 set each server up (initialize, open, spawn)
        frame_bytes = statistics.mean(
            len(wire.request(first_id + i, "send_message", _shared_params(0, i))) for i in range(n)
        )
        return self._run_floor(
            "pg_floor.py", db, frame_bytes, "--caller", "r0", "--target", "k0", "--prefix", "m"
        )

    def live_agents(self) -> dict[str, Any]:
        """RSS growth per live continuable child (spawned pipelined under one root)."""
        db = self.db_path("live")
        server = self.start("subagentd", db)
        try:
            server.initialize()
            server.call("agents/open", {"agent_id": ROOT_ID})
            server.call("ping", {})
            before = server.rss_kib()
            n = self.sizes.live_agents
            frames = [
                server.frame(
                    "agents/spawn",
                    {"caller": ROOT_ID, "label": f"child {i}", "prompt": "go", "child_id": f"c{i}"},
                    server.take_id(),
                )
                for i in range(n)
            ]
            elapsed, errors, examples = server.pipelined(frames, timeout=300)
            server.call("ping", {})
            after = server.rss_kib()  # right after the burst: its garbage may still be resident
            time.sleep(REST_SECONDS)  # at rest: the server has handed freed heap back
            server.call("ping", {})
            rested = server.rss_kib()
            server.close(timeout=60)
        finally:
            server.kill()
        return {
            "agents": n,
            "spawn_seconds": elapsed,
            "spawn_per_s": n / elapsed,
            "errors": errors,
            "error_examples": [e.decode(errors="replace") for e in examples],
            "rss_before_kib": before,
            "rss_after_burst_kib": after,
            "rss_after_kib": rested,
            "kib_per_agent_after_burst": (after - before) / n,
            "kib_per_agent": (rested - before) / n,
        }

    def list_scaling(self, backend: str = "sqlite") -> dict[str, Any]:
        """list_agents descendants over trees of each size (on PostgreSQL: the 10k one only,
        the same rows in a fresh database of the --postgres server)."""
        out: dict[str, Any] = {}
        for size in self.sizes.list_sizes if backend == "sqlite" else (10000,):
            t0 = time.perf_counter()
            if backend == "sqlite":
                db = self.db_path(f"list{size}")
                shape = build_tree(db, size, env=self.env)
            else:
                db = self.database(f"list{size}", backend)
                shape = build_tree_postgres(db, size, env=self.env)
            built = time.perf_counter() - t0
            server = self.start("subagentd", db)
            try:
                server.initialize()
                server.call("agents/open", {"agent_id": ROOT_ID})
                rid = server.take_id()
                first = server.frame(
                    "tools/call",
                    {
                        "name": "list_agents",
                        "arguments": {"scope": "descendants"},
                        "_meta": {"subagentd/caller": ROOT_ID},
                    },
                    rid,
                )
                server.write(first)
                reply = server.response(rid, timeout=300)
                rows = len(reply["result"]["structuredContent"]["agents"])
                size_bytes = len(_encode(reply))
                samples = server.round_trips(
                    [_tool_frame(server, "descendants") for _ in range(self.sizes.list_reps[size])],
                    timeout=600,
                )
                server.close(timeout=60)
            finally:
                server.kill()
            out[str(size)] = {
                **shape,
                "build_s": built,
                "rows_listed": rows,
                "response_bytes": size_bytes,
                "median_s": median(samples),
                "samples_s": samples,
            }
            log(
                f"  list_agents descendants over {size} ({backend}): {median(samples) * 1e3:.1f} ms"
            )
        return out

    def restart(self, huge: bool = False) -> dict[str, Any]:
        """Starts on a database of many sessions and events with 100 turns left open by a
        crash (`huge`: the 1M sessions / 10M events one; the file is removed afterwards)."""
        sessions, events = (
            self.sizes.huge_restart
            if huge and self.sizes.huge_restart
            else (self.sizes.restart_sessions, self.sizes.restart_events)
        )
        db = self.db_path("restart")
        t0 = time.perf_counter()
        shape = build_tree(db, sessions, events, open_turns=100, env=self.env)
        built = time.perf_counter() - t0
        size_mib = os.path.getsize(db) / 2**20
        to_init, to_open, open_errors = [], [], []
        for i in range(self.sizes.restarts + 1):
            server = self.start("subagentd", db)
            try:
                rid = server.take_id()
                server.write(server.frame("initialize", _init_params(), rid))
                server.response(rid, timeout=60)
                t_init = time.perf_counter() - server.t_spawn
                server.notify("notifications/initialized")
                rid = server.take_id()
                server.write(server.frame("agents/open", {"agent_id": ROOT_ID}, rid))
                reply = server.response(rid, timeout=60)
                t_open = time.perf_counter() - server.t_spawn
                if "error" in reply:
                    open_errors.append(f"start {i}: agents/open root -> {reply['error']}")
                server.close(timeout=60)
            finally:
                server.kill()
            if i:  # the first start warms the page cache and records the crashed turns
                to_init.append(t_init)
                to_open.append(t_open)
        if huge:
            for name in (db, db + "-wal", db + "-shm"):
                if os.path.exists(name):
                    os.remove(name)
        return {
            **shape,
            "open_turns_at_crash": 100,
            "build_s": built,
            "db_mib": size_mib,
            "to_initialize_s": median(to_init),
            "to_open_root_s": median(to_open),
            "samples_initialize_s": to_init,
            "samples_open_s": to_open,
            "open_errors": open_errors,
        }

    def guarded(self, name: str, fn, *args) -> Any:
        log(f"{name} ...")
        t0 = time.perf_counter()
        try:
            result = fn(*args)
        except (ServerFailure, Exception) as exc:  # keep going: report the failure precisely
            text = f"{name}: {exc}\n{traceback.format_exc(limit=3)}"
            self.failures.append(text)
            log(f"FAILED {text}")
            return None
        log(f"{name} done in {time.perf_counter() - t0:.1f}s")
        return result


def _init_params() -> dict[str, Any]:
    return {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "subagentd-bench", "version": "0"},
    }


def _tool_frame(server: Server, scope: str = "children") -> bytes:
    return server.frame(
        "tools/call",
        {
            "name": "list_agents",
            "arguments": {"scope": scope},
            "_meta": {"subagentd/caller": ROOT_ID},
        },
        server.take_id(),
    )


def _tool_frames(server: Server, n: int) -> list[bytes]:
    return [_tool_frame(server) for _ in range(n)]


def _ping_frames(server: Server, n: int) -> list[bytes]:
    return [server.frame("ping", {}, server.take_id()) for _ in range(n)]


LINK_DELAY = 0.001  # seconds each way of the shared_send_postgres_link rows' link (linkproxy.py)
LINK_WINDOW = 8  # sends in flight per process in the shared_send_postgres_link rows (8 agents)
BURST = 2000  # the interference row's burst into one tree
PROBES = 300  # the interference row's lone send_message latencies
ROUND = 50  # requests of each kind in a round of the interleaved one-in-flight row
BURSTS = 5  # the interference row's bursts, one after another (samples during each pooled)


def _send_params(request_id: int) -> dict[str, Any]:
    return {"caller": ROOT_ID, "subagent_id": "c0", "message": f"follow-up {request_id}"}


def _shared_params(k: int, i: int) -> dict[str, Any]:
    """Message i of process k's share in shared_sends (its root r{k}, its busy child k{k})."""
    return {"caller": f"r{k}", "subagent_id": f"k{k}", "message": f"m{i}"}


def _send_frames(server: Server, n: int) -> list[bytes]:
    return [
        server.frame("send_message", _send_params(request_id), request_id)
        for request_id in (server.take_id() for _ in range(n))
    ]


def pipe_capacity() -> int:
    """What a new pipe holds (64 KiB by default on Linux): the most one read of stdin returns."""
    import fcntl

    r, w = os.pipe()
    try:
        return fcntl.fcntl(w, F_GETPIPE_SZ)
    finally:
        os.close(r)
        os.close(w)


def draw_plots(results: dict[str, Any], out: str) -> list[str]:
    """plots.py over this run's results (matplotlib, the `bench` extra)."""
    import plots

    return plots.write_all(results, out)


def cpu_pressure() -> float | None:
    """Share of the last minute some runnable task waited for a CPU (other load skews results)."""
    try:
        with open("/proc/pressure/cpu") as fh:
            first = fh.readline().split()
        return float(dict(f.split("=") for f in first[1:])["avg60"])
    except (OSError, KeyError, ValueError):
        return None


def export_revision(rev: str, tmp: str) -> str:
    """`git archive REV` into tmp/src; put first on PYTHONPATH it shadows the editable install."""
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", rev, "subagentd"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True, timeout=60)
    return src


def compile_bytecode(root: str) -> None:
    """Write `root`/subagentd's bytecode, as installing a package does: with
    PYTHONDONTWRITEBYTECODE set (or a fresh export), every spawn would otherwise compile each
    module it imports, and a cold start would time the compiler (about 2x the imports here)."""
    import compileall

    compileall.compile_dir(os.path.join(root, "subagentd"), quiet=1)


def environment(rev: str | None = None) -> dict[str, Any]:
    if rev:
        out = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", rev], capture_output=True, text=True
        ).stdout.strip()
        return {**environment(), "commit": f"{out} (exported with --at {rev})"}
    try:
        commit = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "subagentd"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        commit, dirty = "?", ""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "commit": commit + (" (+ uncommitted changes under subagentd/)" if dirty else ""),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    parser.add_argument(
        "--no-huge",
        action="store_true",
        help="leave the 1M-session listing and the 1M sessions / 10M events restart out of a"
        " full run (they take minutes: benchmarks/README.md)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also run the shared, cross and list (10k) scenarios on a throwaway PostgreSQL 15 server"
        " (fsync on; Debian's binaries, as the tests use them)",
    )
    parser.add_argument(
        "--out",
        default=os.path.join(ROOT, "benchmarks", "results"),
        help="directory for latest.md / latest.json",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios (cold,tools,ping,interleaved,send,shared,cross,live,list,"
        "restart,many,runner,tail); default all",
    )
    parser.add_argument(
        "--at",
        metavar="REV",
        default=None,
        help="benchmark the subagentd of this git revision (exported to the temp dir) instead"
        " of the working tree",
    )
    parser.add_argument(
        "--baseline-src",
        metavar="DIR",
        default=None,
        help="also measure the subagentd of this checkout (DIR/subagentd, put first on PYTHONPATH)"
        " in a `baseline` column, scenario by scenario with the working tree",
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="also measure the working tree with --event-loop uvloop (needs the `fast` extra)",
    )
    parser.add_argument(
        "--flames",
        action="store_true",
        help="afterwards, py-spy flame graphs of the three hottest scenarios (flames.py) in"
        " OUT/profiles",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.no_huge:
        sizes = replace(
            sizes,
            list_sizes=tuple(n for n in sizes.list_sizes if n != HUGE_LIST),
            huge_restart=None,
        )
    only = set(filter(None, args.only.split(",")))
    want = lambda name: not only or name in only  # noqa: E731
    tmp = tempfile.mkdtemp(prefix="subagentd-bench-")
    source = export_revision(args.at, tmp) if args.at else None
    compile_bytecode(source or ROOT)
    bench = Bench(sizes, tmp, source=source)
    variants: dict[str, Bench] = {}
    if args.baseline_src:
        baseline = os.path.abspath(args.baseline_src)
        if not os.path.isdir(os.path.join(baseline, "subagentd")):
            parser.error(f"--baseline-src {baseline}: no subagentd package there")
        compile_bytecode(baseline)
        variants["baseline"] = Bench(sizes, tmp, source=baseline, label="baseline-")
    if args.uvloop:
        uvloop = ["--event-loop", "uvloop"]
        variants["uvloop"] = Bench(sizes, tmp, source=source, args=uvloop, label="uvloop-")
    raws: dict[str, dict[str, Any]] = {name: {} for name in variants}

    def each_variant(key: str, label: str, run: Any, *more: Any, peer: bool = False) -> None:
        for name, other in variants.items():
            result = other.guarded(f"{label} [{name}]", functools.partial(run, other), *more)
            if peer:
                raws[name].setdefault(key, {})
                if result is not None:
                    raws[name][key]["subagentd"] = result
            else:
                raws[name][key] = result

    t0 = time.perf_counter()
    load_before = os.getloadavg()
    psi_before = cpu_pressure()
    raw: dict[str, Any] = {}
    try:
        if want("cold"):
            raw["cold_start"] = {
                k: r
                for k in PEERS
                if (r := bench.guarded(f"cold start {k}", bench.cold_start, k)) is not None
            }
            each_variant("cold_start", "cold start", Bench.cold_start, "subagentd", peer=True)
        if want("tools"):
            raw["tool_calls"] = {
                k: r
                for k in PEERS
                if (r := bench.guarded(f"tools/call {k}", bench.tool_calls, k)) is not None
            }
            each_variant("tool_calls", "tools/call", Bench.tool_calls, "subagentd", peer=True)
        if want("ping"):
            raw["ping_calls"] = {
                k: r
                for k in PEERS
                if (r := bench.guarded(f"ping {k}", bench.tool_calls, k, "ping")) is not None
            }
            each_variant("ping_calls", "ping", Bench.tool_calls, "subagentd", "ping", peer=True)
        if want("interleaved"):
            raw["interleaved"] = bench.guarded("one in flight, interleaved", bench.interleaved)
        if want("send"):
            for durability in ("normal", "full"):
                raw[f"send_{durability}"] = bench.guarded(
                    f"send_message {durability}", bench.send_messages, durability
                )
                raw[f"write_floor_{durability}"] = bench.guarded(
                    f"write floor {durability}", bench.write_floor, durability
                )
                each_variant(
                    f"send_{durability}",
                    f"send_message {durability}",
                    Bench.send_messages,
                    durability,
                )
        if want("shared"):
            raw["shared_sends"] = {
                str(n): r
                for n in (1, 2, 4)
                if (r := bench.guarded(f"send_message, {n} processes", bench.shared_sends, n))
                is not None
            }
        if args.postgres and (want("shared") or want("cross") or want("list")):
            sys.path.insert(0, ROOT)
            from tests.pg import PostgresServer

            bench.postgres = bench.guarded(
                "PostgreSQL server", functools.partial(PostgresServer, durable=True)
            )
        if want("shared") and bench.postgres is not None:
            raw["shared_sends_postgres"] = {
                str(n): r
                for n in (1, 2, 4)
                if (
                    r := bench.guarded(
                        f"send_message, {n} processes, PostgreSQL",
                        bench.shared_sends,
                        n,
                        "postgres",
                    )
                )
                is not None
            }
            for key, window in (("_link", LINK_WINDOW), ("_link_pipelined", None)):
                raw[f"shared_sends_postgres{key}"] = {
                    str(n): r
                    for n in (1, 4)
                    if (
                        r := bench.guarded(
                            f"send_message, {n} processes, PostgreSQL over a 1 ms link"
                            + (f", {window} in flight each" if window else ", pipelined"),
                            functools.partial(
                                bench.shared_sends, n, "postgres", LINK_DELAY, window
                            ),
                        )
                    )
                    is not None
                }
            raw["interference_postgres_link"] = bench.guarded(
                "another tree's send_message during a burst, PostgreSQL over a 1 ms link",
                functools.partial(bench.interference, LINK_DELAY),
            )
            raw["pg_write_floor"] = bench.guarded("PostgreSQL write floor", bench.pg_write_floor)
        if want("cross"):
            raw["cross_process"] = bench.guarded("cross-process delivery", bench.cross_process)
            if bench.postgres is not None:
                raw["cross_process_postgres"] = bench.guarded(
                    "cross-process delivery, PostgreSQL", bench.cross_process, "postgres"
                )
            each_variant("cross_process", "cross-process delivery", Bench.cross_process)
        if want("live"):
            raw["live_agents"] = bench.guarded("live agents RSS", bench.live_agents)
            each_variant("live_agents", "live agents RSS", Bench.live_agents)
        if want("list"):
            raw["list_scaling"] = bench.guarded("list_agents scaling", bench.list_scaling)
            if bench.postgres is not None:
                raw["list_scaling_postgres"] = bench.guarded(
                    "list_agents over 10k, PostgreSQL", bench.list_scaling, "postgres"
                )
            each_variant("list_scaling", "list_agents scaling", Bench.list_scaling)
        if want("restart"):
            raw["restart"] = bench.guarded("restart", bench.restart)
            each_variant("restart", "restart", Bench.restart)
            if sizes.huge_restart:
                raw["restart_huge"] = bench.guarded("restart, 1M sessions", bench.restart, True)
                each_variant("restart_huge", "restart, 1M sessions", Bench.restart, True)
        if not only or only & scale.SCENARIOS:  # many, runner, tail: benchmarks/scale.py
            picked = only & scale.SCENARIOS
            sized = scale.QUICK if args.quick else scale.FULL
            raw.update(scale.run_all(sized, picked, args.postgres, bench.guarded))
    finally:
        if bench.postgres is not None:
            bench.postgres.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - t0
    metrics = evaluate(raw) + scale.rows(raw)
    merge_variants(metrics, raws)
    env = {
        **environment(args.at),
        "variants": {
            name: (args.baseline_src if name == "baseline" else "--event-loop uvloop")
            for name in variants
        },
        "mode": "quick" if args.quick else "full",
        "seconds": total,
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "cpu_pressure_some_avg60_before_after": [psi_before, cpu_pressure()],
    }
    os.makedirs(args.out, exist_ok=True)
    table = render_table(metrics, tuple(variants))
    results = {
        "environment": env,
        "sizes": asdict(sizes),
        "metrics": [asdict(m) for m in metrics],
        "raw": raw,
        "raw_variants": raws,
        "failures": bench.failures + [f for v in variants.values() for f in v.failures],
    }
    with open(os.path.join(args.out, "latest.json"), "w") as fh:
        json.dump(results, fh, indent=2, default=str)
    bench.guarded("plots", draw_plots, json.loads(json.dumps(results, default=str)), args.out)
    header = (
        f"# subagentd benchmark results ({env['mode']} run)\n\n"
        f"{env['date']} · Python {env['python']} · {env['cpus']} CPUs · {env['platform']} · "
        f"commit {env['commit']} · run took {total:.0f} s · 1-min load average before/after "
        f"{env['loadavg_1m_before_after']} · CPU pressure (PSI some avg60, %) before/after "
        f"{env['cpu_pressure_some_avg60_before_after']}\n\n"
        "floor: the echo floor (peers/echo_server.py) in the protocol rows, the write floor"
        " (peers/sqlite_floor.py) in the send_message rows, the PostgreSQL write floor"
        " (peers/pg_floor.py) in the 1-process PostgreSQL one. stack floor: subagentd's transport"
        " reading and writing, jsonrpcserver's public dispatch of a method that does nothing, one"
        " request at a time (peers/stack_floor.py). anyio floor: the echo floor's loop"
        " reading and writing through anyio's fd readiness functions as subagentd does"
        " (peers/anyio_echo.py). MCP SDK: the Python SDK; TS SDK: the"
        " TypeScript SDK (peers/ts-mcp).\n\n"
        "ratio: subagentd ÷ peer (for throughput higher is better, for time and memory lower).\n\n"
        "Plots: throughput.svg, latency.svg, listing.svg, tail.svg beside this file.\n\n"
        + "".join(f"column `{name}`: {desc}\n" for name, desc in env["variants"].items())
        + ("\n" if variants else "")
    )
    failed = bench.failures + [f for v in variants.values() for f in v.failures]
    failures = ""
    if failed:
        failures = "\n\n## Failures\n\n" + "\n".join(f"```\n{f.strip()}\n```" for f in failed)
    targets = "\n\n## Targets\n\n" + render_targets(metrics, env)
    with open(os.path.join(args.out, "latest.md"), "w") as fh:
        fh.write(header + table + targets + failures + "\n")
    print(table)
    if failed:
        print(f"\n{len(failed)} scenario(s) failed; see latest.md", file=sys.stderr)
    log(f"total {total:.1f}s")
    flames_failed = False
    if args.flames:
        import flames

        at = ["--at", args.at] if args.at else []
        flames_failed = flames.main([*at, "--out", os.path.join(args.out, "profiles")]) != 0
    return 1 if failed or flames_failed else 0


if __name__ == "__main__":
    sys.exit(main())
