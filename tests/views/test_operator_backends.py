"""The operator commands on PostgreSQL: `inspect` (tree, transcript, JSON, `--html`), `watch`,
`stats` and `prune` give what they give on SQLite for one history (a SQLite database a real
server wrote, its rows copied into PostgreSQL: tests/backend_copy.py); `watch` follows a running
server by the snapshot signal and reads nothing while nothing changed; unreachable databases are
refused in one line without their password."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import psycopg
import pytest

from subagentd.storage.postgres.store import shown
from subagentd.storage.reader import StoreReader
from subagentd.view.snapshot import Snapshot
from tests.backend_copy import copy_into_postgres
from tests.spawned import TIMEOUT, ServerProcess
from tests.view_runs import busy_run

NOW = 4_102_444_800.0  # a fixed clock for the frames compared (2100-01-01)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "LINES": "50", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=TIMEOUT,
        env=env,
    )


def busy_history(path: str) -> None:
    """A server's leftovers: a turn left open, queued and parked messages, a settled one-shot,
    a closed root, and a second tree three deep that settled and was closed."""
    srv = ServerProcess(db=path)
    try:
        host = srv.host
        host.initialize()
        busy_run(host)
        host.open("other")
        a = host.spawn("other", "a", prompt="deep", mode="one-shot")
        host.end_turn("a", a["turn_id"], "completed", "done a")
        host.notification("agent/settled", agent_id="a")
        host.call("transcript/append", {"agent_id": "other", "events": [{"type": "note"}]})
        host.call("agents/close", {"agent_id": "other"})
    finally:
        srv.stop()


@pytest.fixture(scope="module", params=["busy", "demo"])
def history(request, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("history") / "history.db")
    if request.param == "busy":
        busy_history(path)
    else:
        done = cli("demo", "--db", path)
        assert done.returncode == 0, done.stderr
    return path


@pytest.fixture
def both(history, pg_stores) -> tuple[str, str]:
    """The history as a SQLite file and as a PostgreSQL URL."""
    url = pg_stores.url()
    copy_into_postgres(history, url)
    return history, url


def same_output(args: list[str], db: str, url: str) -> tuple[str, str]:
    on_sqlite, on_postgres = cli(*args, "--db", db), cli(*args, "--db", url)
    assert on_sqlite.returncode == on_postgres.returncode == 0, (on_sqlite, on_postgres)
    assert on_sqlite.stderr == on_postgres.stderr.replace(shown(url), db)
    return on_sqlite.stdout, on_postgres.stdout.replace(shown(url), db)


def test_inspect_gives_the_same_tree_transcripts_and_json_on_both_backends(both):
    db, url = both
    ids = [row["id"] for row in json.loads(cli("inspect", "--db", db, "--json").stdout)["sessions"]]
    assert len(ids) >= 4
    for args in [[], ["--json"], *([i] for i in ids), *([i, "--json"] for i in ids)]:
        sqlite_out, postgres_out = same_output(["inspect", *args], db, url)
        assert sqlite_out == postgres_out, args
    assert "postgresql://" in cli("inspect", "--db", url).stdout.splitlines()[0]


def test_inspect_html_is_the_same_page_on_both_backends(both, tmp_path):
    db, url = both
    pages = []
    for source in (db, url):
        out = tmp_path / f"{len(pages)}.html"
        done = cli("inspect", "--db", source, "--html", str(out))
        assert done.returncode == 0, done.stderr
        pages.append(out.read_text(encoding="utf-8"))
    assert "&quot;" not in shown(url)  # the title holds the name as it is
    assert pages[0] == pages[1].replace(shown(url), db)
    assert '"agents":[' in pages[0]


def test_watch_draws_the_same_frame_on_both_backends(both):
    from rich.console import Console

    from subagentd.view.screen import frame

    db, url = both
    drawn = []
    for source in (db, url):
        reader = StoreReader(source)
        try:
            console = Console(file=io.StringIO(), width=160, height=40, color_system=None)
            console.print(frame(Snapshot(reader), "subagentd watch", 40, now=NOW))
            drawn.append(console.file.getvalue())
        finally:
            reader.close()
    assert drawn[0] == drawn[1]
    assert "agent(s)" in drawn[0]
    sqlite_out, postgres_out = same_output(["watch", "--once"], db, url)  # the command itself
    clock = re.compile(r"\d+\.\ds|\d+m\d\ds|\d+h\d\dm|\d\d:\d\d:\d\d")
    assert clock.sub("T", sqlite_out) == clock.sub("T", postgres_out)


def test_stats_gives_the_same_figures_on_both_backends(both):
    db, url = both
    sqlite_out, postgres_out = same_output(["stats"], db, url)
    on_sqlite, on_postgres = json.loads(sqlite_out), json.loads(postgres_out)
    assert on_postgres["database_bytes"] > 0 and on_postgres["free_bytes"] == 0
    ages = [figures.pop("oldest_queued_age_s", None) for figures in (on_sqlite, on_postgres)]
    if ages[0] is None or ages[1] is None:
        assert ages == [None, None]
    else:  # the two commands ran a moment apart: the same age, give or take that moment
        assert abs(ages[0] - ages[1]) < 5, ages
    for figures in (on_sqlite, on_postgres):
        del figures["database_bytes"], figures["free_bytes"]  # each backend's own measure
    assert on_sqlite == on_postgres


def test_prune_deletes_the_same_rows_on_both_backends_and_inspect_agrees_after(both):
    db, url = both
    on_sqlite, on_postgres = (
        cli("prune", "--older-than", "0s", "--db", db),
        cli("prune", "--older-than", "0s", "--db", url),
    )
    assert on_sqlite.returncode == on_postgres.returncode == 0, (on_sqlite, on_postgres)
    counted = re.compile(
        r"pruned \d+ settled tree\(s\) untouched for \w+: \d+ event\(s\), \d+ message\(s\);"
    )
    sqlite_line, postgres_line = on_sqlite.stdout, on_postgres.stdout
    assert counted.match(sqlite_line).group(0) == counted.match(postgres_line).group(0)
    assert not sqlite_line.startswith("pruned 0 ")
    assert re.fullmatch(
        counted.pattern + rf" \d+ bytes of rows deleted from {re.escape(shown(url))}"
        r" \(reused by later writes once VACUUM, or autovacuum, has run\)\n",
        postgres_line,
    ), postgres_line
    for args in ([], ["--json"]):
        sqlite_out, postgres_out = same_output(["inspect", *args], db, url)
        assert sqlite_out == postgres_out


def test_watch_on_postgresql_follows_a_server_and_reads_no_table_while_nothing_changes(
    pg_stores,
):
    url = pg_stores.url()
    srv = ServerProcess(db=url)
    try:
        host = srv.host
        host.initialize()
        host.open("root", label="coordinator")
        reader = StoreReader(url)
        statements: list[str] = []
        execute = reader.conn.execute

        def counted(sql, params=None):
            statements.append(sql)
            return execute(sql, params)

        reader.conn.execute = counted
        try:
            snapshot = Snapshot(reader)
            assert list(snapshot.sessions) == ["root"]
            statements.clear()
            # a lease renewal may move the snapshot once; then nothing does
            for _ in range(3):
                snapshot.refresh()
            statements.clear()
            assert [snapshot.refresh() for _ in range(5)] == [False] * 5
            assert statements == ["SELECT pg_current_snapshot()::text"] * 5
            host.spawn("root", "c1", label="researcher", prompt="look")
            assert snapshot.refresh() is True
            assert snapshot.sessions["c1"].status == "open turn"
            assert snapshot.last["c1"].kind in ("turn_start", "message")
        finally:
            reader.close()
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize(
    ("args", "status", "prefix"),
    [
        (["stats"], 1, "subagentd stats: "),
        (["prune", "--older-than", "1d"], 1, "subagentd prune: "),
        (["inspect"], 2, "subagentd inspect: "),
        (["inspect", "--html", "x.html"], 2, "subagentd inspect: "),
        (["watch", "--once"], 2, "subagentd watch: "),
    ],
)
def test_an_unreachable_postgresql_is_refused_in_one_line_without_its_password(
    args, status, prefix, tmp_path
):
    url = "postgresql://someone:s3cret@127.0.0.1:1/nowhere"
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", *args, "--db", url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (status, "")
    assert done.stderr.startswith(
        prefix + "database postgresql://someone@127.0.0.1:1/nowhere cannot be opened: "
    ), done.stderr
    assert done.stderr.count("\n") == 1 and "s3cret" not in done.stderr
    assert not (tmp_path / "x.html").exists()


def test_a_postgresql_database_without_subagentd_tables_is_refused(pg_server):
    name = f"empty{os.getpid()}_{int(time.time() * 1000) % 100000}"
    pg_server.execute(f"CREATE DATABASE {name}")
    try:
        url = pg_server.url(name)
        done = cli("inspect", "--db", url)
        assert done.returncode == 2
        assert done.stderr == (
            f"subagentd inspect: {shown(url)} is not a subagentd database (no sessions table)\n"
        )
        with psycopg.connect(url) as conn:  # nothing was created
            assert conn.execute("SELECT to_regclass('sessions')").fetchone() == (None,)
    finally:
        pg_server.drop_database(name)


def test_serve_retention_prunes_a_postgresql_database_at_start_up(both):
    db, url = both
    expected = cli("prune", "--older-than", "0s", "--db", db).stdout.split(";")[0]
    proc = ServerProcess("--retention", "0s", "--log-level", "info", db=url)
    try:
        proc.host.initialize()
        proc.close_stdin()
        assert proc.wait() == 0
        trees, rest = expected.removeprefix("pruned ").split(" settled tree(s) untouched for 0s: ")
        logged = f"--retention: pruned {trees} settled tree(s), {rest}"  # SQLite's counts
        assert logged in proc.stderr_text(), proc.stderr_text()
    finally:
        proc.stop()
