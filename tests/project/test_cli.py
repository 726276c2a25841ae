"""The command line: serve is the default, global options go anywhere, SUBAGENTD_* variables,
checked ranges, close-match suggestions, the state-directory database, the terminal hint."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import subagentd
from tests.spawned import TIMEOUT

PYTHON = sys.executable
VERSION = f"subagentd {subagentd.__version__} (protocol {subagentd.PROTOCOL})\n"
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'


def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None, cwd=None):
    return subprocess.run(
        [PYTHON, "-m", "subagentd", *args],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    """A private XDG_STATE_HOME, so the default database lands in tmp_path."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    for name in [n for n in os.environ if n.startswith("SUBAGENTD_")]:
        monkeypatch.delenv(name)
    return home


@pytest.fixture
def demo_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    done = run("demo", "--db", str(db))
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--db", "X", "--version"],
        ["--version", "--db", "X"],
        ["--db=X", "--log-level", "debug", "--version"],
        ["serve", "--version"],
        ["--caller", "root", "--version"],
    ],
)
def test_version_is_printed_wherever_it_is_asked(argv):
    done = run(*argv)
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, VERSION, b"")


@pytest.mark.parametrize("where", ["before", "after", "variable"])
def test_db_is_accepted_before_or_after_the_command_or_from_the_environment(demo_db, where):
    argv = {
        "before": ["--db", str(demo_db), "inspect", "--json"],
        "after": ["inspect", "--json", "--db", str(demo_db)],
        "variable": ["inspect", "--json"],
    }[where]
    env = {"SUBAGENTD_DB": str(demo_db)} if where == "variable" else {}
    done = run(*argv, env=env)
    assert done.returncode == 0, done.stderr
    assert {s["id"] for s in json.loads(done.stdout)["sessions"]} == {"root", "c1", "c2", "g1"}


def test_the_command_line_wins_over_the_variable_on_either_side_of_the_command(demo_db, tmp_path):
    env = {"SUBAGENTD_DB": str(tmp_path / "missing.db")}
    for argv in (["--db", str(demo_db), "stats"], ["stats", "--db", str(demo_db)]):
        done = run(*argv, env=env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["sessions"]["ready"] == 4


def test_schema_accepts_global_options_before_it():
    done = run("--db", "X", "--log-level", "debug", "schema")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["info"]["title"] == "subagentd"


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [("inspct", "inspect"), ("serv", "serve"), ("stat", "stats"), ("prnue", "prune")],
)
def test_a_mistyped_command_is_no_such_command_with_a_suggestion(typo, suggestion):
    done = run("--db", "X", typo)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert f"Error: No such command '{typo}'. Did you mean '{suggestion}'?" in err, err
    assert done.stdout == b""


def test_an_unknown_word_gets_no_suggestion():
    done = run("frobnicate")
    assert done.returncode == 2
    assert "Error: No such command 'frobnicate'.\n" in done.stderr.decode()


def test_top_level_help_fits_one_screen_and_serve_help_lists_the_serve_options():
    done = run("--help", env={"COLUMNS": "80"})
    assert done.returncode == 0
    out = done.stdout.decode()
    assert len(out.splitlines()) <= 24 and max(map(len, out.splitlines())) <= 80, out
    for command in ("serve", "demo", "inspect", "schema", "stats", "prune", "watch", "tool"):
        assert f"\n  {command} " in out, command
    assert "`subagentd serve --help` lists the serve options" in " ".join(out.split())
    assert "--max-depth" not in out
    serve = run("serve", "--help").stdout.decode()
    for option in ("--caller", "--max-depth", "--lease-ttl", "--retention", "SUBAGENTD_MAX_DEPTH"):
        assert option in serve, option


def test_a_bare_run_serves_the_state_directory_database_and_names_it(state_home, tmp_path):
    done = run(stdin=INITIALIZE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "subagentd"
    db = state_home / "subagentd" / "subagentd.db"
    assert db.is_file()
    assert (db.parent.stat().st_mode & 0o777) == 0o700
    assert not (tmp_path / "subagentd.db").exists()  # nothing is left in the working directory
    assert f"serving on stdin/stdout; database {db}" in done.stderr.decode()


def test_without_xdg_state_home_the_database_goes_under_home_local_state(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    from subagentd.cli.table import default_database

    assert default_database() == str(tmp_path / ".local/state/subagentd/subagentd.db")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")  # not absolute: ignored, as the spec says
    assert default_database() == str(tmp_path / ".local/state/subagentd/subagentd.db")


def test_serve_options_come_from_the_environment_over_real_pipes(state_home):
    done = run(
        stdin=INITIALIZE,
        env={"SUBAGENTD_DB": ":memory:", "SUBAGENTD_REPORT_DELIVERY": "quiet"},
    )
    assert done.returncode == 0, done.stderr
    caps = json.loads(done.stdout)["result"]["capabilities"]["experimental"]["subagentd"]
    assert caps["reportDelivery"] == "quiet"
    assert "database :memory:" in done.stderr.decode()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--interrupt-grace", "-1", "-1.0 is not in the range x>=0"),
        ("--report-rate", "-1", "-1 is not in the range x>=0"),
        ("--lease-ttl", "-1", "-1.0 is not in the range x>0"),
    ],
)
def test_negative_durations_and_rates_are_refused_before_serving(option, value, says):
    done = run("--db", ":memory:", option, value, stdin=INITIALIZE)
    assert done.returncode == 2
    assert done.stdout == b""  # nothing was served
    err = done.stderr.decode()
    assert f"Error: Invalid value for '{option}'" in err and says in err, err


def test_stdin_on_a_terminal_gets_a_one_line_hint_on_stderr(state_home):
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [PYTHON, "-m", "subagentd", "--db", ":memory:"],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(terminal)
        os.write(controller, b"\x04")  # Ctrl-D: end of input
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(controller)
    assert proc.returncode == 0, err
    assert out == b""
    hints = [line for line in err.decode().splitlines() if "meant to be spawned" in line]
    assert hints == [
        "subagentd: serving JSON-RPC on stdin/stdout (one JSON value per line); it is meant to be"
        " spawned by an agent host. Ctrl-D stops it; `subagentd --help` lists the commands."
    ]


def test_no_hint_when_stdin_is_a_pipe():
    done = run("--db", ":memory:", stdin=INITIALIZE)
    assert "meant to be spawned" not in done.stderr.decode()


def test_a_state_directory_that_cannot_be_made_is_one_cannot_start_line(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = run(stdin=INITIALIZE, env={"XDG_STATE_HOME": str(blocker)})
    assert done.returncode == 1
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "cannot start:" in lines[0], lines


def test_debug_logging_shows_one_line_per_request_with_method_id_and_duration():
    frames = (
        INITIALIZE
        + b'{"jsonrpc":"2.0","id":"two","method":"ping"}\n'
        + b'{"jsonrpc":"2.0","id":3,"method":"agents/open","params":{"agent_id":"r"}}\n'
    )
    done = run("--db", ":memory:", "--log-level", "debug", "--log-format", "json", stdin=frames)
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stderr.decode().splitlines()]
    requests = [e["message"] for e in entries if e["logger"] == "subagentd.requests"]
    assert [m.split(" handled in ")[0] for m in requests] == [
        "request initialize id=1",  # answered by the start-up fast path (server/handshake.py)
        'request ping id="two"',
        "request agents/open id=3",
    ]
    for message in requests:
        assert message.endswith(" ms") and float(message.split(" handled in ")[1][:-3]) >= 0
    for entry in entries:  # UTC with milliseconds
        assert len(entry["ts"]) == len("2026-01-01T00:00:00.000Z") and entry["ts"].endswith("Z")


def test_module_layout_keeps_the_cli_modules_short():
    for path in (Path(subagentd.__file__).parent / "cli").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 300, path


AGREEING = [
    ([], {}),
    (["serve"], {}),
    (["--db", "a.db", "--caller", "root"], {}),
    (["serve", "--db=a.db", "--max-depth", "64", "--lease-ttl", "0.5"], {}),
    (["--log-level", "debug", "--framing", "lsp"], {"SUBAGENTD_MAX_QUEUED": "0"}),
    ([], {"SUBAGENTD_DB": "b.db", "SUBAGENTD_INTERRUPT_GRACE": "0", "SUBAGENTD_REPORT_RATE": "5"}),
    (["--db", "c.db"], {"SUBAGENTD_DB": "b.db", "SUBAGENTD_DURABILITY": "full"}),
    ([], {"SUBAGENTD_DB": ""}),  # an empty variable counts as unset, as click has it
    (["--idle-timeout", "5s", "--lease-ttl", "1m", "--interrupt-grace", "500ms"], {}),
    ([], {"SUBAGENTD_IDEMPOTENCY_RETENTION": "12h", "SUBAGENTD_TREE_MAX_SECONDS": "2h"}),
]
LEFT_TO_CLICK = [
    (["--max-depth", "65"], {}),
    (["--lease-ttl", "0"], {}),
    (["--interrupt-grace", "-1"], {}),
    ([], {"SUBAGENTD_REPORT_RATE": "-1"}),
    ([], {"SUBAGENTD_FRAMING": "carrier-pigeon"}),
    (["--tools", "report"], {}),
    (["--retention", "30d"], {}),
    (["--max-depth"], {}),
    (["inspect"], {}),
    (["--help"], {}),
    (["--max-depth", "nan"], {}),
    (["--db", "x", "--frobnicate"], {}),
]


@pytest.mark.parametrize(("argv", "env"), AGREEING)
def test_the_fast_path_reads_a_plain_serve_line_exactly_as_click_does(argv, env, monkeypatch):
    from subagentd.cli.commands import cli
    from subagentd.cli.fastpath import read_serve

    for name in [n for n in os.environ if n.startswith("SUBAGENTD_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fast = read_serve(argv, os.environ)
    assert fast is not None and fast.pop("version") is False
    seen = {}

    def record(options):
        seen.update(options)
        return 0

    monkeypatch.setattr("subagentd.cli.serving.serve", record)
    monkeypatch.setenv("XDG_STATE_HOME", "/nowhere")
    assert cli.main(args=argv, prog_name="subagentd", standalone_mode=False) == 0
    fast["db"] = fast["db"] or "/nowhere/subagentd/subagentd.db"
    assert fast == seen


@pytest.mark.parametrize(("argv", "env"), LEFT_TO_CLICK)
def test_the_fast_path_leaves_anything_unusual_to_click(argv, env):
    from subagentd.cli.fastpath import read_serve

    assert read_serve(argv, env) is None


def test_a_plain_serve_reaches_serve_without_importing_click():
    code = (
        "import sys, runpy; sys.argv = ['subagentd', '--db', ':memory:'];"
        "import subagentd.cli.serving as s; serve = s.serve;"
        "s.serve = lambda o: (sys.stderr.write("
        "'CLICK LOADED\\n' if 'click' in sys.modules else 'NO CLICK\\n'), serve(o))[1];"
        "runpy.run_module('subagentd', run_name='__main__')"
    )
    done = subprocess.run(
        [PYTHON, "-c", code], input=INITIALIZE, capture_output=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert "NO CLICK" in done.stderr.decode()
    assert json.loads(done.stdout)["result"]["serverInfo"]["name"] == "subagentd"


def test_command_options_have_variables_too(demo_db, tmp_path):
    env = {"SUBAGENTD_DB": str(demo_db), "SUBAGENTD_JSON": "1"}
    inspected = run("inspect", env=env)
    assert inspected.returncode == 0, inspected.stderr
    assert len(json.loads(inspected.stdout)["sessions"]) == 4
    copy = tmp_path / "copy.db"
    copy.write_bytes(demo_db.read_bytes())
    pruned = run("prune", env={"SUBAGENTD_DB": str(copy), "SUBAGENTD_OLDER_THAN": "30d"})
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.decode().startswith("pruned 0 settled tree(s)")


@pytest.mark.parametrize(
    ("option", "value", "dest", "read"),
    [
        ("--idle-timeout", "5s", "idle_timeout", 5.0),
        ("--idle-timeout", "5", "idle_timeout", 5.0),  # a bare number: the option's SECONDS
        ("--shutdown-grace", "2m", "shutdown_grace", 120.0),
        ("--interrupt-grace", "250ms", "interrupt_grace", 0.25),
        ("--lease-ttl", "1h", "lease_ttl", 3600.0),
        ("--report-window", "1w", "report_window", 7 * 86400.0),
        ("--acp-permission-timeout", "10m", "acp_permission_timeout", 600.0),
        ("--db-connect-timeout", "3s", "db_connect_timeout", 3.0),
        ("--tree-max-seconds", "1d", "tree_max_seconds", 86400.0),
        ("--idempotency-retention", "12h", "idempotency_retention", 0.5),  # DAYS
        ("--idempotency-retention", "3", "idempotency_retention", 3.0),
        ("--retention", "30d", "retention", 30 * 86400.0),
    ],
)
def test_every_duration_option_takes_a_unit(option, value, dest, read):
    from subagentd.cli.commands import serve

    assert serve.make_context("serve", [option, value]).params[dest] == read


def test_a_duration_option_says_what_it_cannot_read():
    done = run("--idle-timeout", "5 minutes")
    assert done.returncode == 2
    assert (
        "Invalid value for '--idle-timeout' (env var: 'SUBAGENTD_IDLE_TIMEOUT'): '5 minutes' is"
        " not a duration such as 30d, 12h, 90m, 45s or 500ms"
    ) in done.stderr.decode()
    done = run("--lease-ttl", "0s")
    assert done.returncode == 2 and "0.0 is not in the range x>0" in done.stderr.decode()
