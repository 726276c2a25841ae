"""py-spy flame graphs of subagentd in the three hottest benchmark scenarios, as SVG files in
benchmarks/results/profiles/ (flame_*.svg).

    python benchmarks/flames.py [--at REV] [--rate HZ] [--scenarios tools,send,list]

Each scenario is run.py's own load; py-spy attaches to the server by pid once it is spawned
(`py-spy record --pid … --nonblocking`) and writes the graph when the server exits. Not
`py-spy record -- python -m subagentd`: py-spy prints its progress on its stdout, which the server
inherits, and that is the protocol pipe. Needs py-spy (the `bench` extra) and ptrace rights.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import ROOT, Server, ServerFailure  # noqa: E402
from run import FULL, Bench, export_revision, log  # noqa: E402

OUT = os.path.join(ROOT, "benchmarks", "results", "profiles")
# the scenarios where the server spends the most CPU in a run: key -> (file, title)
SCENARIOS = {
    "tools": ("flame_tools_call.svg", "tools/call list_agents, pipelined and round trips"),
    "send": ("flame_send_message_normal.svg", "send_message pipelined, --durability normal"),
    "list": ("flame_list_agents_10k.svg", "list_agents descendants over 10,000 sessions"),
}


class FlamedBench(Bench):
    """run.py's Bench with py-spy attached to the first subagentd it starts."""

    def __init__(self, *args: Any, svg: str, rate: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.svg, self.rate = svg, rate
        self.recorder: subprocess.Popen[bytes] | None = None
        self.spy_log = tempfile.TemporaryFile()

    def start(self, kind: str, db: str | None = None, durability: str = "normal") -> Server:
        server = super().start(kind, db, durability)
        if kind == "subagentd" and self.recorder is None:
            self.recorder = attach(server.proc.pid, self.svg, self.rate, self.spy_log)
        return server

    def finish(self, timeout: float = 120.0) -> None:
        """Wait for py-spy to write the graph (it stops when the server exits)."""
        if self.recorder is None:
            raise ServerFailure("no subagentd was started: nothing recorded")
        try:
            rc = self.recorder.wait(timeout)
        except subprocess.TimeoutExpired:
            self.recorder.kill()
            raise ServerFailure(f"py-spy did not finish within {timeout}s") from None
        if rc or not os.path.exists(self.svg):
            raise ServerFailure(f"py-spy failed (rc={rc}):\n{spy_output(self.spy_log)}")


def attach(pid: int, svg: str, rate: int, spy_log: Any) -> subprocess.Popen[bytes]:
    """Start `py-spy record --pid` and wait until it samples (bounded), so no load goes unseen."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    recorder = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--output", svg, "--format", "flamegraph"]
        + ["--rate", str(rate), "--nonblocking", "--function"],
        stdin=subprocess.DEVNULL,
        stdout=spy_log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while "Sampling process" not in spy_output(spy_log):
        if recorder.poll() is not None or time.monotonic() > deadline:
            recorder.kill()
            raise ServerFailure(f"py-spy could not attach to {pid}:\n{spy_output(spy_log)}")
        time.sleep(0.05)  # polling py-spy's own log: nothing of the server waits on this
    return recorder


def spy_output(spy_log: Any) -> str:
    spy_log.seek(0)
    return spy_log.read().decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", metavar="REV", default=None)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="subagentd-flames-")
    source = export_revision(args.at, tmp) if args.at else None
    sizes = dataclasses.replace(FULL, list_sizes=(10000,), list_reps={10000: 9})
    loads = {
        "tools": lambda b: b.tool_calls("subagentd"),
        "send": lambda b: b.send_messages("normal"),
        "list": lambda b: b.list_scaling(),
    }
    failed = 0
    try:
        for key in filter(None, args.scenarios.split(",")):
            name, title = SCENARIOS[key]
            svg = os.path.join(args.out, name)
            bench = FlamedBench(sizes, tmp, source=source, svg=svg, rate=args.rate)
            if bench.guarded(f"flame graph: {title}", run_flamed, bench, loads[key]) is None:
                failed += 1
            else:
                log(f"wrote {svg}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


def run_flamed(bench: FlamedBench, load: Any) -> Any:
    result = load(bench)
    bench.finish()
    return result


if __name__ == "__main__":
    sys.exit(main())
