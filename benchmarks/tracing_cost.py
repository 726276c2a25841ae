"""What tracing costs the server: the same load untraced, traced to a live OTLP receiver and
traced to a port nothing listens on, interleaved, with the ratios to untraced pair by pair.

    python benchmarks/tracing_cost.py                 # 3 rounds, 5000 requests per method
    python benchmarks/tracing_cost.py --rounds 5 -n 2000 --demos 3

Each round runs the three modes in turn (the order rotates round by round, so drift in the
machine's speed falls on every mode alike):

- the server load of server_cpu.py: a fresh server, `initialize`, `agents/open root`, a spawned
  child `c0` whose first turn stays open, then for `tools/call list_agents` and `send_message`
  N requests one in flight and N pipelined in batches: the server process's CPU per request
  (user + sys, all threads, /proc) and the pipelined wall time per request. Every such request
  is a traced `execute_tool` span when tracing is on.
- `subagentd demo` as a whole process (it starts two servers): wall seconds and the CPU of the
  demo and its servers (getrusage of waited-for children).

The live receiver is an HTTP server in this process that reads each `POST /v1/traces` and
answers 200 (it decodes nothing: the cost measured is the sender's). The dead port is bound
and closed again, so connections to it are refused. The table gives per mode the median
[min-max] over the rounds, and per traced mode the ratio to the untraced run of the same round.
"""

from __future__ import annotations

import argparse
import http.server
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import PYTHON, Server, server_command  # noqa: E402
from server_cpu import ROOT_ID, measure  # noqa: E402

MODES = ("off", "live", "dead")
METHODS = ("tools", "send")


class Receiver:
    """A live OTLP/HTTP endpoint: reads every request, answers 200 with an empty response."""

    def __init__(self) -> None:
        self.requests = 0

        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"


def dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def environment(mode: str, live: str, dead: str) -> dict[str, str]:
    if mode == "off":
        return {}
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": live if mode == "live" else dead}


def server_round(env: dict[str, str], n: int, batch: int, tmp: str) -> dict[str, float]:
    db = os.path.join(tmp, f"t-{time.monotonic_ns()}.db")
    server = Server(server_command("subagentd", db), env=env)
    try:
        server.initialize()
        server.call("agents/open", {"agent_id": ROOT_ID})
        spawn = {"caller": ROOT_ID, "label": "c0", "prompt": "go", "child_id": "c0"}
        server.call("agents/spawn", spawn)
        server.notification("turn/start", agent_id="c0")
        figures: dict[str, float] = {}
        for method in METHODS:
            got = measure(server, method, n, batch)
            figures[f"{method} cpu one"] = got["one_user"] + got["one_sys"]
            figures[f"{method} cpu pipelined"] = got["pipe_user"] + got["pipe_sys"]
            figures[f"{method} wall pipelined"] = got["pipe_wall"]
        server.close()
    finally:
        server.kill()
    return figures


def demo_round(env: dict[str, str], tmp: str) -> dict[str, float]:
    db = os.path.join(tmp, f"demo-{time.monotonic_ns()}.db")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "subagentd", "demo", "--db", db],
        env={**os.environ, **env},
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"demo failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"demo wall s": wall, "demo cpu s": cpu}


def spread(xs: list[float], digits: int = 0) -> str:
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds, modes alternating")
    parser.add_argument("-n", type=int, default=5000, help="requests per method and mode")
    parser.add_argument("--batch", type=int, default=500, help="pipelined requests per write")
    parser.add_argument("--demos", type=int, default=2, help="demo runs per mode and round")
    args = parser.parse_args(argv)
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # the modes set what they need; nothing inherited
    receiver = Receiver()
    dead = dead_endpoint()
    tmp = tempfile.mkdtemp(prefix="subagentd-tracing-")
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        for r in range(args.rounds):
            order = MODES[r % 3 :] + MODES[: r % 3]
            got: dict[str, dict[str, float]] = {}
            for mode in order:
                env = environment(mode, receiver.endpoint, dead)
                figures = server_round(env, args.n, args.batch, tmp)
                for _ in range(args.demos):
                    for key, value in demo_round(env, tmp).items():
                        figures[key] = figures.get(key, 0.0) + value / args.demos
                got[mode] = figures
                print(f"round {r + 1} {mode}: {figures}", file=sys.stderr)
            for mode, figures in got.items():
                for key, value in figures.items():
                    values[key][mode].append(value)
                    if mode != "off" and got["off"][key] > 0:  # 0: under one CPU tick
                        ratios[key][mode].append(value / got["off"][key])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\n{args.n} requests per method and mode, {args.demos} demo runs per mode and round;"
        f" median [min-max] of {args.rounds} rounds; the receiver took {receiver.requests}"
        " requests\n"
    )
    print("| figure | off | live | dead | live/off | dead/off |")
    print("|---|---|---|---|---|---|")
    for key, by_mode in values.items():
        digits = 2 if key.startswith("demo") else 0
        cells = [spread(by_mode[m], digits) for m in MODES]
        cells += [spread(ratios[key][m], 2) if ratios[key][m] else "-" for m in ("live", "dead")]
        unit = "" if key.startswith("demo") else " (µs/req)"
        print(f"| {key}{unit} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
