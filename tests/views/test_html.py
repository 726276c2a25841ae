"""`subagentd inspect --html`, looked at in headless Chromium: the demo's run and a 1,000-agent one.

The page must load with no console message, no exception and no network request but its own
file; every agent and every turn in the database must be drawn; clicking a turn and hovering a
report show their texts. Screenshots go to each test's temporary directory.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from subagentd.storage.database import SqliteStore
from tests.chromium import Browser
from tests.core_host import CoreHost
from tests.view_runs import large_run


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("demo") / "demo.db")
    done = cli("demo", "--db", path)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


def stored(path: str) -> tuple[set[str], dict[str, str | None]]:
    """The session ids and each turn's end reason (None: still open), read with plain SQL."""
    conn = sqlite3.connect(path)
    try:
        ids = {r[0] for r in conn.execute("SELECT id FROM sessions")}
        turns: dict[str, str | None] = {
            r[0]: None for r in conn.execute("SELECT turn_id FROM events WHERE type='turn_start'")
        }
        for turn_id, data in conn.execute("SELECT turn_id, data FROM events WHERE type='turn_end'"):
            turns[turn_id] = json.loads(data)["reason"]
    finally:
        conn.close()
    return ids, turns


DRAWN = """(() => {
  const turns = {};
  for (const r of document.querySelectorAll('#lanes rect.turn[data-turn]')) {
    const box = r.getBBox();
    turns[r.dataset.turn] = {cls: r.getAttribute('class'), w: box.width, h: box.height};
  }
  return {
    agents: [...document.querySelectorAll('#names text[data-agent]')].map(t => t.dataset.agent),
    turns,
    width: +document.getElementById('lanes').getAttribute('width'),
  };
})()"""


def render(db: str, out: Path, *root: str) -> float:
    began = time.monotonic()
    done = cli("inspect", "--db", db, "--html", str(out), *root)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"wrote {out}: ")
    return took


def check_drawn(browser: Browser, db: str, page: Path) -> dict:
    browser.open(page.as_uri())
    assert browser.problems() == []
    assert browser.requests() == [page.as_uri()]  # self-contained: nothing else is fetched
    drawn = browser.evaluate(DRAWN)
    ids, turns = stored(db)
    assert sorted(drawn["agents"]) == sorted(ids)  # each agent once
    assert set(drawn["turns"]) == set(turns)
    for turn_id, reason in turns.items():
        shown = drawn["turns"][turn_id]
        assert shown["cls"] == f"turn {reason or 'open'}", turn_id
        assert shown["w"] >= 3 and shown["h"] > 5, turn_id
    return drawn


def click(browser: Browser, selector: str, move_only: bool = False) -> str:
    """Scroll the element into view, move the mouse to it (and click), return the detail text."""
    box = browser.evaluate(
        f"""(() => {{ const el = document.querySelector({json.dumps(selector)});
        el.scrollIntoView({{block: 'center', inline: 'center'}});
        const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"""
    )
    x, y = box
    covered = browser.evaluate(
        f"""(() => {{ const el = document.querySelector({json.dumps(selector)});
        const top = document.elementFromPoint({x}, {y});
        return !(top === el || el.contains(top)); }})()"""
    )
    if move_only and covered:
        # another mark drawn within a pixel of it (events a fraction of a millisecond apart) is
        # on top at that point: hover this one as the page's handler sees it (a user would zoom)
        browser.evaluate(
            f"""document.querySelector({json.dumps(selector)})
            .dispatchEvent(new MouseEvent('mouseover', {{bubbles: true}}))"""
        )
        return browser.evaluate("document.getElementById('detail').innerText")
    browser.call("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=x, y=y)
    if not move_only:
        for kind in ("mousePressed", "mouseReleased"):
            browser.call(
                "Input.dispatchMouseEvent",
                session=True,
                type=kind,
                x=x,
                y=y,
                button="left",
                clickCount=1,
            )
    return browser.evaluate("document.getElementById('detail').innerText")


def test_the_demo_timeline_draws_every_agent_and_turn_and_shows_texts(demo_db, browser, tmp_path):
    page = tmp_path / "demo.html"
    render(demo_db, page)
    check_drawn(browser, demo_db, page)
    # the writer's interrupt, its parked messages, and the settled marks are drawn
    kinds = browser.evaluate(
        "(() => { const d = JSON.parse(document.getElementById('timeline-data').textContent);"
        " return [...document.querySelectorAll('#lanes [data-m]')].map(e => d.marks[+e.dataset.m].kind); })()"
    )
    for kind in (
        "task",
        "message",
        "report",
        "notice",
        "interrupt",
        "settled",
        "resumed",
        "closed",
    ):
        assert kind in kinds, kind
    assert browser.evaluate("document.querySelectorAll('#lanes rect.wait.parked').length") == 2
    shot = browser.screenshot(tmp_path / "timeline.png")
    assert shot.startswith(b"\x89PNG") and len(shot) > 10_000

    # clicking the writer's last turn shows its input and its output
    conn = sqlite3.connect(demo_db)
    (last_c2,) = conn.execute(
        "SELECT turn_id FROM events WHERE session_id='c2' AND type='turn_end' ORDER BY seq DESC"
    ).fetchone()
    conn.close()
    text = click(browser, f'#lanes rect.turn[data-turn="{last_c2}"]')
    assert "turn of c2 “writer”" in text
    assert "Ship it today." in text
    assert "Release notes: 3 fixes." in text
    assert "completed" in text
    browser.screenshot(tmp_path / "timeline-clicked.png")
    assert browser.problems() == []

    # hovering the report (after releasing the pin) shows who reported what to whom
    click(browser, "#names")
    report = browser.evaluate(
        "(() => { const d = JSON.parse(document.getElementById('timeline-data').textContent);"
        " return d.marks.findIndex(m => m.kind === 'report'); })()"
    )
    text = click(browser, f'#lanes circle[data-m="{report}"]', move_only=True)
    assert "report: g1 “bug-finder” → c1 “researcher”" in text
    assert "Oldest open bug: #12 (2019)." in text
    # the cold resume after the restart is marked on the researcher's lane
    resumed = browser.evaluate(
        "(() => { const d = JSON.parse(document.getElementById('timeline-data').textContent);"
        " return d.marks.findIndex(m => m.kind === 'resumed'); })()"
    )
    text = click(browser, f'#lanes circle[data-m="{resumed}"]', move_only=True)
    assert "c1 “researcher” resumed" in text and "cold resume: rebuilt from storage" in text
    assert browser.problems() == []


def test_a_subtree_page_draws_only_that_tree(demo_db, browser, tmp_path):
    page = tmp_path / "c1.html"
    render(demo_db, page, "c1")
    browser.open(page.as_uri())
    assert browser.problems() == []
    assert sorted(browser.evaluate(DRAWN)["agents"]) == ["c1", "g1"]
    missing = cli("inspect", "--db", demo_db, "--html", str(tmp_path / "x.html"), "nobody")
    assert missing.returncode == 1
    assert missing.stderr == f"subagentd inspect: no agent 'nobody' in {demo_db}\n"
    assert not (tmp_path / "x.html").exists()


def test_a_thousand_agents_render_fast_and_are_all_drawn(browser, tmp_path):
    db = str(tmp_path / "large.db")
    large_run(db).store.conn.close()
    page = tmp_path / "large.html"
    took = render(db, page)
    began = time.monotonic()
    drawn = check_drawn(browser, db, page)
    loaded = time.monotonic() - began
    print(
        f"1001 agents: inspect --html {took:.2f}s, {page.stat().st_size} bytes, browser {loaded:.2f}s"
    )
    assert len(drawn["agents"]) == 1001
    assert took < 30 and loaded < 60  # generous: the machine is shared (measured ~0.5 s and ~1.5 s)
    browser.screenshot(tmp_path / "large.png")
    # folding: a click on lead-0's name hides its 49 workers' lanes, another shows them again
    count = (
        "[document.querySelectorAll('#names text[data-agent]').length,"
        " document.querySelectorAll('#lanes rect.turn').length]"
    )
    click(browser, '#names text[data-agent="lead-0"]')
    assert browser.evaluate(count) == [1001 - 49, len(drawn["turns"]) - 49]
    assert "▸ +49" in browser.evaluate(
        "document.querySelector('#names [data-agent=\"lead-0\"]').textContent"
    )
    click(browser, '#names text[data-agent="lead-0"]')
    assert browser.evaluate(count) == [1001, len(drawn["turns"])]
    click(browser, "#foldall")  # the root, its 20 leads
    assert browser.evaluate(count)[0] == 21
    browser.screenshot(tmp_path / "large-folded.png")
    click(browser, "#unfoldall")
    assert browser.evaluate(count)[0] == 1001
    assert browser.problems() == []


def test_model_written_text_stays_text(browser, tmp_path):
    """Labels, ids and messages are shown as text: no markup they carry runs or loads."""
    db = str(tmp_path / "odd.db")
    core = CoreHost(store=SqliteStore(db))
    with core.svc.transaction():
        core.open("root", label='<img src="http://example.invalid/x.png">')
        core.spawn(
            "root",
            "c1",
            label="</script><script>console.error('pwned')</script>",
            prompt="<b onmouseover=alert(1)>hi</b>",
        )
        core.end("c1", output="</script>done")
    core.svc.commit()
    core.store.conn.close()
    page = tmp_path / "odd.html"
    render(db, page)
    browser.open(page.as_uri())
    assert browser.problems() == []
    assert browser.requests() == [page.as_uri()]
    names = browser.evaluate("document.getElementById('names').textContent")
    assert '<img src="http://example.invalid/x.png">' in names
    assert "</script><script>console.error('pwned')</script>" in names
    text = click(browser, "#lanes rect.turn")
    assert "<b onmouseover=alert(1)>hi</b>" in text and "</script>done" in text
    assert (
        browser.evaluate("document.querySelectorAll('img, [onmouseover], svg script').length") == 0
    )


def test_the_console_check_sees_a_broken_page(browser, tmp_path):
    """The checks above can fail: an error, a console message and a fetch are all seen."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<html><body><img src='http://example.invalid/a.png'>"
        "<script>console.log('hello'); missing();</script></body></html>"
    )
    browser.open(page.as_uri())
    problems = browser.problems()
    assert "console.log: hello" in problems
    assert any(p.startswith("exception: ReferenceError: missing is not defined") for p in problems)
    assert "http://example.invalid/a.png" in browser.requests()


def test_inspect_html_refuses_what_it_cannot_read_or_write(demo_db, tmp_path):
    missing = cli("inspect", "--db", str(tmp_path / "none.db"), "--html", str(tmp_path / "x.html"))
    assert missing.returncode == 2
    assert missing.stderr == f"subagentd inspect: no database file at {tmp_path / 'none.db'}\n"
    not_db = tmp_path / "not.db"
    not_db.write_text("hello")
    refused = cli("inspect", "--db", str(not_db), "--html", str(tmp_path / "x.html"))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"subagentd inspect: {not_db} is not a subagentd database")
    unwritable = tmp_path / "no" / "such" / "dir.html"
    failed = cli("inspect", "--db", demo_db, "--html", str(unwritable))
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"subagentd inspect: cannot write {unwritable}: ")
    assert not (tmp_path / "x.html").exists()


def test_a_turns_usage_is_shown_with_the_turn(browser, tmp_path):
    """What a turn reported (turns/end usage) is in its details, and each agent's own sums in the
    page's data."""
    from subagentd.schema.budgets import Usage
    from subagentd.schema.host_methods import TurnEndParams

    db = str(tmp_path / "used.db")
    core = CoreHost(store=SqliteStore(db))
    with core.svc.transaction():
        core.open("root")
        core.spawn("root", "c1")
        core.svc.host.finish_turn(
            TurnEndParams(
                agent_id="c1",
                turn_id=core.turn("c1"),
                reason="completed",
                usage=Usage(input_tokens=1200, output_tokens=300, cost=0.25),
            )
        )
    core.svc.commit()
    core.store.conn.close()
    page = tmp_path / "used.html"
    render(db, page)
    browser.open(page.as_uri())
    assert browser.problems() == []
    text = click(browser, "#lanes rect.turn")
    assert "1200 in, 300 out tokens, cost 0.25" in text
