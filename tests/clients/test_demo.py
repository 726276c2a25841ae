"""`subagentd demo` runs a scripted host against a real subprocess and narrates the key moments."""

import os
import re
import subprocess
import sys


def run_cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )


# the console script pip installs beside this interpreter: the README's `subagentd demo`
SCRIPT = os.path.join(os.path.dirname(sys.executable), "subagentd")


def test_demo_plays_the_whole_tour_and_exits_zero():
    done = subprocess.run(
        [SCRIPT, "demo"], capture_output=True, text=True, encoding="utf-8", timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '▸ coordinator spawns "researcher" (c1) → started subagent c1' in out
    assert '  researcher: turn started with "Find the three oldest open bugs."' in out
    assert '▸ researcher spawns "bug-finder" (g1) → started subagent g1' in out
    # a child asks its parent and waits; the parent's send_message is the answer
    assert '  coordinator: turn started with "Background subagent c1 ("researcher") asks you' in out
    assert '      + "GitHub or Jira?"\n' in out
    assert (
        '▸ coordinator → researcher: "GitHub." → answer delivered to subagent c1; it continues'
        " its turn" in out
    )
    assert (
        '  researcher\'s ask_parent returns "the agent that started you answered: GitHub."' in out
    )
    # a follow-up queued behind the running turn, run after that turn ends
    assert '▸ coordinator → researcher: "Also check the closed ones." (queued)' in out
    assert 'send_message: "message queued as the next turn for subagent c1"' in out
    assert (
        'researcher: turn started with "Also check the closed ones."  (the queued follow-up)' in out
    )
    # an interrupt parks the queue; the next send_message unparks it, in order
    assert "interrupt requested for agent c2 (was running)" in out
    assert "agents/get c2 → status idle, queued 0, parked 2" in out
    parked = out.index('writer: turn started with "Use the changelog."')
    assert parked < out.index('writer: turn started with "Keep it short."')
    assert out.index('writer: turn started with "Keep it short."') < out.index(
        'writer: turn started with "Ship it today."'
    )
    # the report reaches the parent as its next turn
    assert re.search(r"accepted as message [0-9a-f]{8}…", out)
    assert (
        'researcher: turn started with "Background subagent g1 reported:"\n'
        '      + "Oldest open bug: #12 (2019)."\n' in out
    )
    # list_agents as the model sees it (U+2014 em dash)
    assert "    c1 [running] parent=root depth=1 — researcher\n" in out
    assert "    g1 [running] parent=c1 depth=2 — bug-finder\n" in out
    assert "    c2 [ready, last turn completed] parent=root depth=1 — writer\n" in out
    # settle notices
    assert "agent/settled g1 (completed)" in out
    assert (
        'coordinator wakes: subagent-settled: "Background subagent c1 finished and will do no'
        ' further work unless you send it more."' in out
    )
    # cold resume on a fresh process over the same database
    assert out.count("subagentd exits 0") == 2
    assert "agents/get c1 → status ready" in out
    assert (
        'turn/start carries resume: {"version": 1, "mode": "continuable", "label": "researcher"}'
        in out
    )
    assert out.rstrip().splitlines()[-1].startswith("Done in ")
    assert len(out.splitlines()) <= 60
    # the default database lived in a temporary directory that is gone now
    db = re.search(r"on (\S+demo\.db)\n", out).group(1)
    assert not os.path.exists(os.path.dirname(db))


def test_demo_keeps_a_given_database_for_inspect(tmp_path):
    db = tmp_path / "tour.db"
    done = run_cli("demo", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f"Look inside: subagentd inspect --db {db}" in done.stdout
    tree = run_cli("inspect", "--db", str(db))
    assert tree.returncode == 0, tree.stderr
    assert '├─ c1 "researcher" continuable, ready' in tree.stdout
    assert '│  └─ g1 "bug-finder" continuable, ready' in tree.stdout


def test_demo_refuses_a_database_that_already_has_data(tmp_path):
    db = tmp_path / "used.db"
    db.write_bytes(b"not empty")
    done = run_cli("demo", "--db", str(db))
    assert done.returncode == 2
    assert "already exists" in done.stderr or "exists" in done.stderr
    assert db.read_bytes() == b"not empty"


def test_on_postgresql_the_demo_hides_the_password_and_a_second_run_is_refused_up_front(
    pg_server,
):
    """Every command shows a URL without its password; like an existing SQLite file, a database
    that already holds the demo's agents is refused before anything is written or narrated."""
    name = pg_server.new_database()
    try:
        url = pg_server.url(name, tcp=True).replace("@", ":secret-pw@", 1)
        shown = url.replace(":secret-pw@", "@")
        first = run_cli("demo", "--db", url, timeout=240)
        assert first.returncode == 0, first.stderr
        assert "secret-pw" not in first.stdout + first.stderr
        assert "(pid " in first.stdout and f") on {shown}\n" in first.stdout
        assert f"Look inside: subagentd inspect --db {shown}" in first.stdout
        second = run_cli("demo", "--db", url, timeout=240)
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr == (
            f"subagentd demo: {shown} already holds the demo's sessions (root, c1, c2, g1);"
            " give a new database\n"
        )
    finally:
        pg_server.drop_database(name)
