"""The server's own CPU per request (user and sys, from /proc/PID/stat), for A/B runs of the loop.

    python benchmarks/server_cpu.py                           # the working tree
    python benchmarks/server_cpu.py --at bdea7e3 --at HEAD    # two revisions, rounds alternate
    python benchmarks/server_cpu.py --at ../other-checkout    # a checkout's directory, as it is
    python benchmarks/server_cpu.py --event-loop asyncio --event-loop uvloop --peer echo
    python benchmarks/server_cpu.py --peer anyio --peer asyncio  # the price of wait_readable
    python benchmarks/server_cpu.py --at . --peer stack  # subagentd's CPU beside the stack floor's

Each variant (a revision or the working tree, times each --event-loop; plus each --peer) gets a
fresh server per round, `initialize`, `agents/open root` and one spawned continuable child `c0`
(its first turn stays running, so `send_message` queues), 300 warm-up calls, then for each method
(ping, tools/call list_agents, send_message) N requests one in flight (round-trip p50) and N
pipelined in batches of BATCH. CPU time is the server process's (all its threads) over exactly
those requests, so it depends on the machine's load far less than wall-clock figures do. Rounds
alternate the variants; the table shows median [min-max] over the rounds. A revision older than
an option the measurement passes (the quota flags) is started without it (harness.accepted).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Server, accepted, serve_options, server_command  # noqa: E402
from run import export_revision  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ROOT_ID = "root"
METHODS = ("ping", "tools", "send")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, sys) CPU seconds the process has used so far, all its threads."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def request(server: Server, method: str) -> bytes:
    if method == "ping":
        return server.frame("ping", {}, server.take_id())
    if method == "tools":
        arguments = {"scope": "children"}
        meta = {"subagentd/caller": ROOT_ID}
        params = {"name": "list_agents", "arguments": arguments, "_meta": meta}
        return server.frame("tools/call", params, server.take_id())
    rid = server.take_id()
    params = {"caller": ROOT_ID, "subagent_id": "c0", "message": f"m{rid}"}
    return server.frame("send_message", params, rid)


def measure(server: Server, method: str, n: int, batch: int) -> dict[str, float]:
    """One in flight, then pipelined: µs of server CPU per request, round-trip p50 in µs."""
    pid = server.proc.pid
    server.round_trips([request(server, method) for _ in range(300)])  # warm-up
    frames = [request(server, method) for _ in range(n)]
    u0, s0 = cpu_seconds(pid)
    samples = sorted(server.round_trips(frames, timeout=600))
    u1, s1 = cpu_seconds(pid)
    batches = [[request(server, method) for _ in range(batch)] for _ in range(max(1, n // batch))]
    count = sum(len(b) for b in batches)
    errors = 0
    u2, s2 = cpu_seconds(pid)
    t0 = time.perf_counter()
    for frames in batches:
        errors += server.pipelined(frames, timeout=600)[1]
    wall = time.perf_counter() - t0
    u3, s3 = cpu_seconds(pid)
    if errors:
        raise RuntimeError(f"{method}: {errors} error replies")
    return {
        "one_user": (u1 - u0) / n * 1e6,
        "one_sys": (s1 - s0) / n * 1e6,
        "one_p50": samples[len(samples) // 2] * 1e6,
        "pipe_user": (u3 - u2) / count * 1e6,
        "pipe_sys": (s3 - s2) / count * 1e6,
        "pipe_wall": wall / count * 1e6,
    }


def start(variant: dict[str, Any], tmp: str) -> Server:
    if variant["peer"]:
        return Server(server_command(variant["peer"]))
    db = os.path.join(tmp, f"cpu-{time.monotonic_ns()}.db")
    command = server_command("subagentd", db) + [f"--event-loop={variant['loop']}"]
    if not variant["src"]:
        return Server(command)
    env = {"PYTHONPATH": variant["src"]}
    options = serve_options(env)
    if variant["loop"] != "asyncio" and "--event-loop" not in options:
        raise SystemExit(f"{variant['src']}: no --event-loop option (asyncio only)")
    return Server(accepted(command, options), env=env)


def one_round(variant: dict[str, Any], methods: list[str], n: int, batch: int, tmp: str) -> dict:
    server = start(variant, tmp)
    try:
        server.initialize()
        if not variant["peer"]:
            server.call("agents/open", {"agent_id": ROOT_ID})
            spawn = {"caller": ROOT_ID, "label": "c0", "prompt": "go", "child_id": "c0"}
            server.call("agents/spawn", spawn)
            server.notification("turn/start", agent_id="c0")
        # a peer answers every request alike: its one figure is "ping"
        figures = {
            m: measure(server, m, n, batch) for m in (["ping"] if variant["peer"] else methods)
        }
        server.close()
    finally:
        server.kill()  # after a failure (close() already waited for a clean exit otherwise)
    return figures


COLUMNS = (
    ("one_user", "user µs/req, one in flight"),
    ("one_sys", "sys µs/req, one in flight"),
    ("one_p50", "round trip p50 µs"),
    ("pipe_user", "user µs/req, pipelined"),
    ("pipe_sys", "sys µs/req, pipelined"),
    ("pipe_wall", "wall µs/req, pipelined"),
)


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f} [{min(xs):.0f}-{max(xs):.0f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--at",
        action="append",
        metavar="REV",
        default=[],
        help="a git revision, or a checkout's directory, to measure (repeatable; `.` is the working"
        " tree, the default)",
    )
    parser.add_argument(
        "--event-loop",
        action="append",
        default=[],
        choices=("asyncio", "uvloop", "trio"),
        help="subagentd's --event-loop (repeatable; default asyncio)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        choices=("echo", "anyio", "asyncio", "stack"),
        help="also a peer (stack: the stack floor, peers/stack_floor.py)",
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="of ping,tools,send")
    parser.add_argument("-n", type=int, default=5000, help="requests per method and mode")
    parser.add_argument("--batch", type=int, default=500, help="pipelined requests per write")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, variants alternating")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    if unknown := set(methods) - set(METHODS):
        parser.error(f"unknown methods: {sorted(unknown)}")
    tmp = tempfile.mkdtemp(prefix="subagentd-cpu-")
    variants: list[dict[str, Any]] = []
    for i, rev in enumerate(args.at or ["."]):
        if rev == ".":
            src = None
        elif os.path.isdir(os.path.join(rev, "subagentd")):  # a checkout, as it is
            src = os.path.abspath(rev)
        else:
            src = export_revision(rev, os.path.join(tmp, str(i)))
        for loop in args.event_loop or ["asyncio"]:
            name = "working tree" if rev == "." else rev
            name += "" if loop == "asyncio" else f" {loop}"
            variants.append({"name": name, "src": src, "loop": loop, "peer": None})
    variants += [{"name": f"peer {p}", "src": None, "loop": "", "peer": p} for p in args.peer]
    results: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        for r in range(args.rounds):
            for variant in variants:
                figures = one_round(variant, methods, args.n, args.batch, tmp)
                for method, values in figures.items():
                    for key, value in values.items():
                        results[(variant["name"], method)][key].append(value)
                summary = ", ".join(
                    f"{m} {v['one_user']:.0f}/{v['pipe_user']:.0f}" for m, v in figures.items()
                )
                print(f"round {r + 1} {variant['name']}: user µs {summary}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.n} requests per method and mode; median [min-max] of {args.rounds} rounds\n")
    print("| variant | method | " + " | ".join(label for _, label in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for (name, method), values in results.items():
        cells = " | ".join(spread(values[key]) for key, _ in COLUMNS)
        print(f"| {name} | {method} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
