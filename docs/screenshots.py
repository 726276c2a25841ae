"""Regenerate the README's screenshots: docs/images/timeline.png and docs/images/watch.png.

    pip install -e '.[test]' && python docs/screenshots.py      # needs Debian's chromium

The timeline is `subagentd inspect --html` of the demo's database, with one turn clicked; the
watch view is one frame of `subagentd watch` beside a server a scripted host keeps mid-run
(turns open, a message queued, two parked), exported by rich as SVG and drawn by Chromium.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from subagentd.client import Client  # noqa: E402
from subagentd.schema.notifications import TurnInterrupt, TurnStart  # noqa: E402
from subagentd.storage.reader import StoreReader  # noqa: E402
from subagentd.view.screen import frame  # noqa: E402
from subagentd.view.snapshot import Snapshot  # noqa: E402
from tests.chromium import Browser  # noqa: E402

IMAGES = ROOT / "docs" / "images"
WAIT = 10.0


def cli(work: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "subagentd", *args], check=True, capture_output=True, cwd=work
    )


def timeline(work: Path) -> None:
    page = work / "demo.html"
    cli(work, "demo", "--db", "demo.db")
    cli(work, "inspect", "--db", "demo.db", "--html", "demo.html")
    browser = Browser(work / "profile", width=1200, height=440)
    try:
        browser.open(page.as_uri())
        assert browser.problems() == [], browser.problems()
        # click the writer's last turn, so the picture shows what a click shows
        browser.evaluate(
            """(() => { const d = JSON.parse(document.getElementById('timeline-data').textContent);
            const i = d.turns.map((t, i) => [t, i]).filter(([t]) => d.agents[t.agent].id === 'c2').pop()[1];
            document.querySelector(`#lanes rect[data-t="${i}"]`)
              .dispatchEvent(new MouseEvent('click', {bubbles: true})); })()"""
        )
        browser.screenshot(IMAGES / "timeline.png")
    finally:
        browser.close()


def mid_run(db: Path) -> Client:
    """A server kept mid-run: turns open, a message queued, two parked after an interrupt."""
    srv = Client.spawn("--log-level", "warning", db=str(db))
    srv.initialize(client_name="screenshots", client_version="1")
    srv.agents_open("root", label="coordinator")
    for caller, child, label, prompt in (
        ("root", "c1", "researcher", "Find the three oldest open bugs."),
        ("root", "c2", "writer", "Draft the release notes."),
        ("c1", "g1", "bug-finder", "Scan the tracker for bugs older than 2020."),
        ("c1", "g2", "triager", "Label what g1 finds."),
    ):
        srv.agents_spawn(caller, label, prompt, child_id=child)
        srv.wait_for(TurnStart, WAIT, agent_id=child)
    srv.send_message("c1", "Also check the closed ones.", caller="root")
    srv.send_message("c2", "Use the changelog.", caller="root")
    srv.send_message("c2", "Keep it short.", caller="root")
    srv.interrupt_agent("c2", caller="root")
    stop = srv.wait_for(TurnInterrupt, WAIT, agent_id="c2")
    srv.turns_end("c2", stop.turn_id, "aborted")
    srv.report("Oldest open bug: #12 (2019).", caller="g1")
    return srv


def watch(work: Path) -> None:
    db = work / "live.db"
    srv = mid_run(db)
    time.sleep(2.5)  # so the clocks of the open turns and the events' ages read something
    try:
        reader = StoreReader(str(db))
        try:
            console = Console(record=True, width=118, file=open("/dev/null", "w"))  # noqa: SIM115
            console.print(frame(Snapshot(reader), f"subagentd watch {db.name}", 14))
        finally:
            reader.close()
        svg = console.export_svg(title="subagentd watch --db live.db")
        svg = re.sub(r"@font-face\s*{[^}]*}", "", svg)  # no fetch: the local monospace font
        page = f"<html><body style='margin:0'><div style='width:1180px'>{svg}</div></body></html>"
        (work / "watch.html").write_text(page)
    finally:
        srv.close(WAIT)
    browser = Browser(work / "profile2", width=1200, height=420)
    try:
        browser.open((work / "watch.html").as_uri())
        browser.screenshot(IMAGES / "watch.png", selector="svg")
    finally:
        browser.close()


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="subagentd-shots-") as tmp:
        timeline(Path(tmp))
        watch(Path(tmp))
    for name in ("timeline.png", "watch.png"):
        print(f"{IMAGES / name}: {(IMAGES / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
