"""Background processes of `serve --detach on` as their user sees them: `subagentd detached list`
and `subagentd detached stop` driven through the real command line, their pid files trusted
only when the process is the one that wrote them, and a PostgreSQL password never written
anywhere (the pid file, the log, the listing, another client's warning)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.processes.test_detached import PATIENCE, ROOT, Detached, alive

PASSWORD = "Pw-9f3c1e-secret"


@pytest.fixture
def runtime():
    path = tempfile.mkdtemp(prefix="sd-", dir="/tmp")  # a socket path stays short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def with_password(url: str, how: str) -> str:
    """The test server's URL with a password (its authentication is `trust`: any is taken)."""
    if how == "userinfo":
        user, at, rest = url.partition("@")
        return f"{user}:{PASSWORD}{at}{rest}"
    return f"{url}&password={PASSWORD}"


@pytest.mark.parametrize("how", ["userinfo", "parameter"])
def test_a_postgresql_password_is_in_no_file_listing_or_warning(pg_stores, runtime, how):
    db = with_password(pg_stores.url(), how)
    d = Detached(db, runtime)
    try:
        first = d.front()
        first.initialize()
        first.tool("spawn_agent", label="a", prompt="hello", child_id="a")
        other = Detached(db, runtime, "--max-running", "2")  # other options: warned
        done = subprocess.run(
            other.argv, input=b"", capture_output=True, env=other.env, cwd=ROOT, timeout=PATIENCE
        )
        warning = done.stderr.decode()
        assert "runs with the options it was started with" in warning, warning
        status = d.file("pid").read_text()
        assert json.loads(status)["db"].startswith("postgresql://postgres@")
        command_line = Path(f"/proc/{d.pid()}/cmdline").read_bytes().decode()  # `ps` shows it
        assert "postgresql://postgres@" in command_line
        listed = cli(runtime, "list").stdout + cli(runtime, "list", "--json").stdout
        assert "postgresql://postgres@" in listed
        for text in (warning, status, d.log(), command_line, listed):
            assert PASSWORD not in text, text
        for path in Path(runtime, "subagentd").iterdir():
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), path
    finally:
        d.stop()


def cli(runtime: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`subagentd detached …` as a user runs it, beside the background processes' files."""
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime, "PYTHONPATH": str(ROOT)}
    for name in [n for n in env if n.startswith("SUBAGENTD_")]:
        del env[name]
    return subprocess.run(
        [sys.executable, "-m", "subagentd", "detached", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=PATIENCE + 30,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def two_databases(request, tmp_path):
    if request.param == "sqlite":
        return [str(tmp_path / "one.db"), str(tmp_path / "two.db")]
    stores = request.getfixturevalue("pg_stores")
    return [stores.url(), stores.url()]


class Server(Detached):
    """A background process's fronts and files where others share its directory."""

    def file(self, suffix: str) -> Path:
        db = self.db if self.db.startswith("postgresql:") else os.path.abspath(self.db)
        key = hashlib.sha256(f"{db}\0root".encode()).hexdigest()[:16]  # PROTOCOL.md §11
        return Path(self.runtime, "subagentd", f"{key}.{suffix}")


SERVER_FIELDS = {"key", "pid", "db", "root", "age_s", "clients", "directory", "log"}


def test_list_shows_each_server_and_stop_stops_one_with_its_runs(two_databases, runtime, tmp_path):
    one, two = (Server(db, runtime) for db in two_databases)
    try:
        first = one.front()
        first.initialize()
        started = tmp_path / "started"
        steps = [{"append": str(started), "text": "started"}, {"sleep": 600}]
        first.tool("spawn_agent", label="a", prompt=json.dumps({"steps": steps}), child_id="a")
        deadline = time.monotonic() + PATIENCE
        while not started.exists():  # its run started
            assert time.monotonic() < deadline, "the runner did not start"
            time.sleep(0.05)
        (run_file,) = one.file("runs").iterdir()
        run = int(run_file.name)
        second = two.front()
        second.initialize()

        listed = cli(runtime, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        shown = json.loads(listed.stdout)
        where = str(Path(runtime, "subagentd"))
        assert shown["directory"] == where and shown["removed"] == []
        servers = {s["pid"]: s for s in shown["servers"]}
        assert set(servers) == {one.pid(), two.pid()}
        for d in (one, two):
            server = servers[d.pid()]
            assert set(server) == SERVER_FIELDS
            assert server["key"] == d.file("pid").name.split(".")[0]
            assert server["db"] == json.loads(d.file("pid").read_text())["db"]
            assert (server["root"], server["clients"], server["directory"]) == ("root", 1, where)
            assert server["log"] == str(d.file("log")) and 0 <= server["age_s"] < PATIENCE * 2
        table = cli(runtime, "list").stdout.splitlines()
        assert table[0].split() == ["KEY", "PID", "AGE", "CLIENTS", "ROOT", "DATABASE"]
        assert sorted(line.split()[1] for line in table[1:3]) == sorted(str(p) for p in servers)
        assert table[3] == f"files: {where}"

        ambiguous = cli(runtime, "stop")
        assert ambiguous.returncode == 1
        assert (
            ambiguous.stderr.startswith(
                "subagentd detached stop: 2 background processes match; name one by its key"
            )
            and len(ambiguous.stderr.splitlines()) == 1
        ), ambiguous.stderr
        unknown = cli(runtime, "stop", "zzzz")
        assert unknown.returncode == 1
        assert (
            unknown.stderr.startswith(
                "subagentd detached stop: no background process matches key zzzz; running: "
            )
            and len(unknown.stderr.splitlines()) == 1
        ), unknown.stderr

        key, background = servers[one.pid()]["key"], one.pid()
        stopped = cli(runtime, "stop", "--db", two_databases[0], "--json")
        assert stopped.returncode == 0, stopped.stderr
        report = json.loads(stopped.stdout)
        assert report["stopped"] == {
            k: servers[background][k] for k in ("key", "pid", "db", "root")
        }
        assert (report["runs_stopped"], report["log"], report["removed"]) == (1, None, [])
        assert not alive(background) and not alive(run)
        assert [p.name for p in Path(where).iterdir() if p.name.startswith(key)] == []
        assert first.proc.wait(timeout=PATIENCE) is not None
        (left,) = json.loads(cli(runtime, "list", "--json").stdout)["servers"]
        assert left["pid"] == two.pid()

        last = cli(runtime, "stop")  # the only one left: no need to name it
        assert last.returncode == 0, last.stderr
        assert re.fullmatch(
            rf"stopped the background process {left['key']} \(pid {left['pid']}, root root,"
            r" db [^)]+\) and its 0 run process\(es\) in [0-9.]+ s\n",
            last.stdout,
        ), last.stdout
        assert list(Path(where).iterdir()) == []
    finally:
        one.stop()
        two.stop()


def stale_files(runtime: str, key: str, pid: int, process_start: str | None) -> Path:
    """The files of a background process that is gone, its pid file naming `pid`."""
    where = Path(runtime, "subagentd")
    where.mkdir(mode=0o700, exist_ok=True)
    status = {
        "pid": pid,
        "started": time.time() - 60,
        "process_start": process_start,
        "db": "/somewhere/gone.db",
        "root": "root",
        "options": "serve",
        "clients": 0,
    }
    (where / f"{key}.pid").write_text(json.dumps(status))
    for suffix in ("lock", "sock", "start"):
        (where / f"{key}.{suffix}").touch()
    (where / f"{key}.log").write_text("how it ended\n")
    (where / f"{key}.runs").mkdir()
    return where


@pytest.mark.parametrize("start", ["its own", "another"])
def test_a_stale_pid_file_is_never_signalled_and_its_files_are_removed(runtime, start):
    """A live unrelated process has the recorded pid (even with the recorded start time: the
    lock nobody holds shows the server is gone)."""
    other = subprocess.Popen(["sleep", "600"])
    try:
        started = Path(f"/proc/{other.pid}/stat").read_text().rpartition(")")[2].split()[19]
        recorded = started if start == "its own" else str(int(started) - 1)
        where = stale_files(runtime, "0123456789abcdef", other.pid, recorded)
        stopped = cli(runtime, "stop", "0123")
        assert stopped.returncode == 1
        assert stopped.stderr.splitlines() == [
            "subagentd detached: removed the files of a background process that is gone"
            f" (key 0123456789abcdef, pid {other.pid}); its log is kept:"
            f" {where}/0123456789abcdef.log",
            "subagentd detached stop: no background process is running",
        ]
        assert alive(other.pid)
        assert [p.name for p in where.iterdir()] == ["0123456789abcdef.log"]
        listed = json.loads(cli(runtime, "list", "--json").stdout)
        assert (listed["servers"], listed["removed"]) == ([], [])
        assert alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_a_pid_file_whose_lock_is_held_but_whose_process_is_another_is_left_alone(runtime):
    """As while a background process starts: its lock held, its pid file not yet its own."""
    other = subprocess.Popen(["sleep", "600"])
    try:
        where = stale_files(runtime, "fedcba9876543210", other.pid, "1")
        with open(where / "fedcba9876543210.lock", "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            listed = cli(runtime, "list", "--json")
            assert json.loads(listed.stdout)["servers"] == []
            assert json.loads(listed.stdout)["removed"] == []
            stopped = cli(runtime, "stop", "--json")
            assert stopped.returncode == 1
            assert stopped.stderr == "subagentd detached stop: no background process is running\n"
        assert alive(other.pid)
        assert (where / "fedcba9876543210.pid").exists()  # not removed under its holder
    finally:
        other.kill()
        other.wait()


def test_list_json_shape_with_no_server(runtime):
    listed = cli(runtime, "list", "--json")
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == {
        "directory": str(Path(runtime, "subagentd")),
        "servers": [],
        "removed": [],
    }
    assert cli(runtime, "list").stdout == (
        f"no background process is running (files: {Path(runtime, 'subagentd')})\n"
    )
