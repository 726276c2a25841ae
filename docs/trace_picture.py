"""Regenerate docs/images/trace.png: the trace of `subagentd demo`, as a tracing tool shows it.

    pip install -e '.[test,bench]' && python docs/trace_picture.py

The demo runs with OTEL_EXPORTER_OTLP_ENDPOINT pointed at the test suite's OTLP/HTTP receiver
(tests/otlp.py, which decodes the protobuf with opentelemetry-proto); the spans it received are
drawn as a waterfall with matplotlib: one row per span in tree order (a child below its parent),
bars on the real time axis, and the links (the turn that sent a message or report → the turn
that consumed it) as arrows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from tests.otlp import Receiver  # noqa: E402

COLOURS = {"completed": "#4c9a6a", "aborted": "#d08a2e", "error": "#c0392b"}
TOOL = "#6c7fb8"


def collect() -> list[dict]:
    receiver = Receiver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "50",
            }
            done = subprocess.run(
                [sys.executable, "-m", "subagentd", "demo", "--db", f"{tmp}/demo.db"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                raise SystemExit(done.stderr)
        count, still = -1, 0
        while still < 10:  # until nothing more arrives for half a second
            time.sleep(0.05)
            still = still + 1 if len(receiver.spans) == count else 0
            count = len(receiver.spans)
        return list(receiver.spans)
    finally:
        receiver.close()


def tree_order(spans: list[dict]) -> list[tuple[dict, int]]:
    ids = {s["span_id"] for s in spans}
    below: dict[str | None, list[dict]] = {}
    for s in spans:
        below.setdefault(s["parent"] if s["parent"] in ids else None, []).append(s)
    for kids in below.values():
        kids.sort(key=lambda s: s["start"])
    out: list[tuple[dict, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in below.get(parent, []):
            out.append((s, depth))
            walk(s["span_id"], depth + 1)

    walk(None, 0)
    return out


def label(span: dict) -> str:
    a = span["attributes"]
    if a.get("gen_ai.operation.name") == "invoke_agent":
        return f"invoke_agent {a['gen_ai.agent.name']} ({a.get('subagentd.turn.end_reason', '?')})"
    return f"execute_tool {a.get('gen_ai.tool.name')} by {a.get('gen_ai.agent.id')}"


GAP_MS = 20.0  # idle stretches longer than this are drawn this long (the demo restarts a process)


def squeeze(spans: list[dict]):
    """Nanoseconds -> drawn milliseconds, with every idle gap longer than GAP_MS shortened."""
    edges = sorted({s["start"] for s in spans} | {s["end"] for s in spans})
    drawn, at, previous, cut = {}, 0.0, edges[0], 0.0
    for edge in edges:
        step = (edge - previous) / 1e6
        busy = any(s["start"] < edge and s["end"] >= edge for s in spans)
        if not busy and step > GAP_MS:
            cut += step - GAP_MS
            step = GAP_MS
        at += step
        drawn[edge] = at
        previous = edge
    return lambda t: drawn[t], cut


def draw(spans: list[dict], out: Path) -> None:
    rows = tree_order(spans)
    place, cut = squeeze(spans)
    row_of = {s["span_id"]: i for i, (s, _) in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(13, 0.32 * len(rows) + 1.4), dpi=110)
    names = blended_transform_factory(ax.transAxes, ax.transData)  # x: axes, y: rows
    for i, (s, depth) in enumerate(rows):
        start, end = place(s["start"]), place(s["end"])
        invoke = s["attributes"].get("gen_ai.operation.name") == "invoke_agent"
        reason = s["attributes"].get("subagentd.turn.end_reason", "")
        colour = COLOURS.get(reason, "#888888") if invoke else TOOL
        ax.barh(i, max(end - start, 0.4), left=start, height=0.62, color=colour)
        ax.text(-0.66, i, "   " * depth + label(s), ha="left", va="center", fontsize=8,
                family="monospace", transform=names)  # fmt: skip
        for link in s["links"]:
            j = row_of.get(link["span_id"])
            if j is not None:
                sent = rows[j][0]
                ax.annotate("", xy=(start, i), xytext=(place(sent["end"]), j),
                            arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 0.8,
                                        "linestyle": "--"})  # fmt: skip
    trace_ids = {s["trace_id"] for s in spans}
    ax.set_title(
        f"subagentd demo: {len(spans)} spans in {len(trace_ids)} trace(s), below the demo host's span\n"
        "(dashed: links from the turn that sent a message to the one that consumed it)",
        fontsize=10,
    )
    ax.set_xlabel(
        f"milliseconds since the first span ({cut:.0f} ms of idle gaps over {GAP_MS:.0f} ms left out)"
    )
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.spines[["left", "right", "top"]].set_visible(False)
    fig.subplots_adjust(left=0.40, right=0.98, top=0.92, bottom=0.08)
    fig.savefig(out)


if __name__ == "__main__":
    target = ROOT / "docs" / "images" / "trace.png"
    spans = collect()
    draw(spans, target)
    print(f"wrote {target}: {len(spans)} spans")
