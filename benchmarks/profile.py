"""Profile subagentd inside the benchmark scenarios that miss their targets.

    python benchmarks/profile.py [--at REV] [--scenarios imports,tools,send,list,restart,live]

Each scenario reruns the load from run.py against a subagentd wrapped in cProfile (or, for cold
start, `-X importtime`) and writes a text excerpt to benchmarks/results/profiles/<name>.txt.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import pstats
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import ROOT  # noqa: E402
from run import QUICK, Bench, export_revision, log  # noqa: E402

OUT = os.path.join(ROOT, "benchmarks", "results", "profiles")


def stats_text(path: str, title: str, limit: int = 30) -> str:
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.strip_dirs()
    out.write(f"# {title}\n\n## by own time (tottime)\n")
    stats.sort_stats("tottime").print_stats(limit)
    out.write("\n## by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()


def import_times(stderr: str, limit: int = 40) -> str:
    """`-X importtime` lines sorted by cumulative microseconds (top-level packages only)."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:") :].split("|", 2)
        rows.append((int(cumulative_us), int(self_us), name[1:]))
    top = [r for r in rows if not r[2].startswith(" ")]
    top.sort(reverse=True)
    total = sum(r[0] for r in top)
    lines = [f"# cold start: -X importtime (top-level imports, total {total / 1000:.0f} ms)", ""]
    lines += [
        f"{c / 1000:8.1f} ms cumulative  {s / 1000:7.1f} ms self  {n}" for c, s, n in top[:limit]
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", metavar="REV", default=None)
    parser.add_argument("--scenarios", default="imports,tools,send,list,restart,live")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="subagentd-profile-")
    source = export_revision(args.at, tmp) if args.at else None
    prof = os.path.join(tmp, "out.prof")
    cprofile = ["-m", "cProfile", "-o", prof]
    wanted = args.scenarios.split(",")
    sizes = dataclasses.replace(
        QUICK,
        pipelined=5000,
        sends=5000,
        list_sizes=(10000,),
        list_reps={10000: 5},
        restart_sessions=100_000,
        restart_events=1_000_000,
        restarts=1,
    )
    try:
        if "imports" in wanted:
            bench = Bench(sizes, tmp, prefix=["-X", "importtime"], source=source)
            server = bench.start("subagentd", bench.db_path("imports"))
            server.initialize()
            server.close()
            text = import_times(server.stderr_tail(limit=10**7))
            _write("cold_start_imports.txt", text)
        runs = {
            "tools": ("tools_call_list_agents", lambda b: b.tool_calls("subagentd")),
            "send": ("send_message_normal", lambda b: b.send_messages("normal")),
            "list": ("list_agents_descendants_10k", lambda b: b.list_scaling()),
            "restart": ("restart_100k_1M", lambda b: b.restart()),
            "live": ("spawn_live_agents", lambda b: b.live_agents()),
        }
        for key, (name, scenario) in runs.items():
            if key not in wanted:
                continue
            log(f"profiling {name}")
            bench = Bench(sizes, tmp, prefix=cprofile, source=source)
            result = scenario(bench)
            _write(f"{name}.txt", stats_text(prof, f"{name}: {result!r:.600}"))
            os.unlink(prof)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _write(name: str, text: str) -> None:
    with open(os.path.join(OUT, name), "w") as fh:
        fh.write(text)
    log(f"wrote {os.path.join(OUT, name)}")


if __name__ == "__main__":
    sys.exit(main())
