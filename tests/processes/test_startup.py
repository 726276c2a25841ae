"""Start-up against real processes: unusable databases are refused in one line before any reply,
new ones are private, processes starting together all start, and an early SIGTERM exits 0."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

from subagentd.schema.codes import Code
from subagentd.storage.database import SqliteStore
from subagentd.storage.migrations import migrations
from subagentd.storage.opening import DatabaseRefusedError
from tests.spawned import TIMEOUT, RpcError

PYTHON = sys.executable
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18"},
}
HANDSHAKE = json.dumps(INITIALIZE).encode() + b"\n"


def run(db, *, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """subagentd with the handshake on stdin; returns once it exited."""
    return subprocess.run(
        [*prefix, PYTHON, "-m", "subagentd", "--db", str(db)],
        input=HANDSHAKE,
        capture_output=True,
        timeout=30,
    )


def refusal(proc: subprocess.CompletedProcess) -> str:
    """The one stderr line of a start-up that refused its database (and answered nothing)."""
    assert proc.returncode == 1
    assert proc.stdout == b""  # not even initialize was answered
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def make_database(path) -> None:
    SqliteStore(str(path)).close()


def without_permission_override() -> tuple[str, ...]:
    """As root, run without CAP_DAC_OVERRIDE so file modes apply as for any other account."""
    if os.geteuid() != 0:
        return ()
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")


def wait_for(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def imported_modules(db, env: dict[str, str] | None = None) -> set[str]:
    """The modules a whole run (handshake, then end of input) imported, by `-X importtime`."""
    proc = subprocess.run(
        [PYTHON, "-X", "importtime", "-m", "subagentd", "--db", str(db)],
        input=HANDSHAKE,
        capture_output=True,
        timeout=30,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.returncode == 0 and b'"result"' in proc.stdout, proc.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.decode().splitlines()
        if line.startswith("import time:")
    }


def test_serving_an_up_to_date_database_never_imports_sqlite_utils(tmp_path):
    db = tmp_path / "current.db"
    assert "sqlite_utils" in imported_modules(db)  # a new file: the migrations ran
    served = imported_modules(db)
    assert "subagentd.storage.database" in served and "jsonrpcserver" in served
    assert "sqlite_utils" not in served and "click" not in served


def test_migrating_imports_sqlite_utils_without_numpy_or_pandas_even_when_installed(tmp_path):
    """sqlite-utils imports them when it can (for column types no migration uses): numpy alone
    would stay ~14 MiB of the server's RSS. Stand-ins on the path prove they were importable."""
    installed = tmp_path / "site"
    for name in ("numpy", "pandas"):
        (installed / name).mkdir(parents=True)
        (installed / name / "__init__.py").write_text("int8 = int\n")
    env = {"PYTHONPATH": os.pathsep.join([str(installed), *sys.path])}
    probe = [PYTHON, "-c", "import numpy, pandas; print(numpy.__file__)"]
    proc = subprocess.run(probe, env={**os.environ, **env}, capture_output=True, text=True)
    assert proc.stdout.startswith(str(installed)), proc.stderr  # the stand-ins would be found
    imported = imported_modules(tmp_path / "new.db", env)
    assert "sqlite_utils" in imported  # a new file: the migrations ran
    assert "numpy" not in imported and "pandas" not in imported


def test_hiding_numpy_from_sqlite_utils_leaves_it_importable_afterwards(tmp_path):
    code = (
        "import sqlite3, sys\n"
        "from subagentd.storage.migrations import sqlite_utils_database\n"
        "sqlite_utils_database(sqlite3.connect(':memory:'))\n"
        "import sqlite_utils.db\n"
        "assert sqlite_utils.db.np is None and 'numpy' not in sys.modules\n"
        "import numpy\n"
        "print(numpy.__file__)\n"
    )
    installed = tmp_path / "site"
    (installed / "numpy").mkdir(parents=True)
    (installed / "numpy" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), *sys.path])}
    proc = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(installed / "numpy" / "__init__.py")


def loaded_after(modules: str, condition: str) -> str:
    """In a fresh interpreter, after importing `modules`: the sorted names m of sys.modules for
    which `condition` holds, as printed."""
    code = f"import sys, {modules}\nprint(sorted(m for m in sys.modules if {condition}))"
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, timeout=30, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_what_answers_the_handshake_imports_neither_core_nor_jsonrpcserver():
    """The prelude is imported before the loader thread starts (server/handshake.py): whatever it
    pulls in delays the initialize reply in full."""
    imported = loaded_after(
        "subagentd.cli.serving, subagentd.server.handshake",
        "m.startswith(('subagentd.core.service', 'subagentd.core.engine',"
        " 'subagentd.server.handlers', 'subagentd.storage.leases', 'jsonrpcserver', 'anyio',"
        " 'sqlite_utils'))",
    )
    assert imported == "[]"


def test_the_path_to_the_handshake_reply_builds_no_dataclass_and_imports_no_runner_tools():
    """What a plain serve imports before the reply, on the main thread, while the host waits: a
    dataclass compiles its generated methods at import (~2 ms each; these classes are msgspec
    Structs), and shlex, shutil, tempfile and json serve only --runner and --log-format json."""
    imported = loaded_after(
        "subagentd.cli, subagentd.cli.fastpath, subagentd.cli.serving, subagentd.cli.running,"
        " subagentd.wire.loops, subagentd.storage.opening, subagentd.storage.postgres,"
        " subagentd.core.settings, subagentd.server.handshake",
        "m in ('dataclasses', 'shlex', 'shutil', 'tempfile', 'json')",
    )
    assert imported == "[]"


# --- refused at start, in one line, before any reply -------------------------------------------


def record_newer_migration(db, name: str) -> None:
    """Mark `db` as written by a newer subagentd: a migration this build does not know."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
            (migrations.name, name, "2030-01-01"),
        )
    conn.close()


def test_a_database_written_by_a_newer_subagentd_is_refused_before_any_reply(tmp_path):
    db = tmp_path / "newer.db"
    make_database(db)
    record_newer_migration(db, "m999_from_the_future")
    line = refusal(run(db))
    assert line.endswith(
        f"ERROR subagentd: cannot start: database {db} was written by a newer subagentd:"
        " unknown migration m999_from_the_future"
    )


def test_a_newer_migration_is_refused_by_the_store_too(tmp_path):
    db = tmp_path / "newer.db"
    make_database(db)
    record_newer_migration(db, "m998_later")
    with pytest.raises(DatabaseRefusedError, match="unknown migration m998_later$"):
        SqliteStore(str(db))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("missing directory", "cannot be created: No such file or directory"),
        ("a directory", "is not a regular file"),
        ("not a database", "is not a SQLite database"),
    ],
)
def test_a_path_that_cannot_be_opened_fails_before_initialize_is_answered(tmp_path, kind, expected):
    db = tmp_path / "x.db"
    if kind == "missing directory":
        db = tmp_path / "no" / "such" / "x.db"
    elif kind == "a directory":
        db.mkdir()
    else:
        db.write_bytes(b"this is not SQLite\n" * 200)
        db.chmod(0o600)
    line = refusal(run(db))
    assert "ERROR subagentd: cannot start: " in line
    assert str(db) in line and line.endswith(expected), line


def test_a_read_only_file_is_refused_at_start(tmp_path):
    db = tmp_path / "ro.db"
    make_database(db)
    db.chmod(0o400)
    line = refusal(run(db, prefix=without_permission_override()))
    assert line.endswith(
        f"cannot start: database {db} is read-only: the file cannot be written"
        " (its mode or owner, an immutable flag, or a read-only mount)"
    )


def test_a_database_in_a_read_only_directory_is_refused_at_start(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "x.db"
    make_database(db)
    folder.chmod(0o500)
    try:
        line = refusal(run(db, prefix=without_permission_override()))
    finally:
        folder.chmod(0o700)
    assert line.endswith(
        f"cannot start: database {db} is read-only: its directory is not writable"
        " (SQLite keeps its -wal and -shm files beside it)"
    )


def test_an_immutable_file_is_refused_at_start(tmp_path):
    db = tmp_path / "immutable.db"
    make_database(db)
    if os.geteuid() != 0:
        pytest.skip("setting the immutable flag needs root")
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable flag")
    try:
        line = refusal(run(db))  # root itself cannot write an immutable file
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert line.endswith(
        f"cannot start: database {db} is read-only: the file cannot be written"
        " (its mode or owner, an immutable flag, or a read-only mount)"
    )


def test_a_dangling_symlink_is_refused_and_nothing_is_created_through_it(tmp_path):
    target = tmp_path / "elsewhere.db"
    link = tmp_path / "link.db"
    link.symlink_to(target)
    line = refusal(run(link))
    assert line.endswith(
        f"cannot start: database {link} is a symlink to a missing file ({target});"
        " it is not created through the link"
    )
    assert not target.exists()


def test_a_symlink_to_an_existing_database_is_used(tmp_path, spawn_process):
    target = tmp_path / "real.db"
    make_database(target)
    link = tmp_path / "link.db"
    link.symlink_to(target)
    proc = spawn_process(db=str(link))
    proc.host.initialize()
    assert proc.host.open("r")["agent_id"] == "r"


# --- private files -------------------------------------------------------------------------


def test_a_new_database_and_its_wal_and_shm_are_private_under_umask_022(tmp_path, spawn_process):
    db = tmp_path / "private.db"
    old = os.umask(0o022)
    try:
        proc = spawn_process(db=str(db))
    finally:
        os.umask(old)
    proc.host.initialize()
    proc.host.open("r")  # a write: the -wal file holds it now
    modes = {
        suffix: stat.S_IMODE(os.stat(f"{db}{suffix}").st_mode) for suffix in ("", "-wal", "-shm")
    }
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    proc.close_stdin()
    assert proc.wait() == 0
    assert "open to group or others" not in proc.stderr_text()


def test_an_existing_database_readable_by_others_gets_a_warning(tmp_path, spawn_process):
    db = tmp_path / "shared.db"
    make_database(db)
    db.chmod(0o644)
    proc = spawn_process(db=str(db))
    proc.host.initialize()
    assert proc.host.open("r")["agent_id"] == "r"  # a warning, not a refusal
    assert (
        f"WARNING subagentd: database {db} is open to group or others (mode 0644):"
        " chmod 600 it to keep its sessions private"
    ) in proc.stderr_text()


# --- the file deleted while running --------------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced by another file"])
def test_writes_are_refused_once_the_database_file_is_deleted_or_replaced(
    tmp_path, spawn_process, how
):
    db = tmp_path / "gone.db"
    proc = spawn_process("--lease-ttl", "0.3", db=str(db))  # a heartbeat every 0.1 s
    host = proc.host
    host.initialize()
    host.open("r")
    host.spawn("r", "c")
    if how == "deleted":
        db.unlink()
    else:
        other = tmp_path / "other.db"
        make_database(other)
        os.replace(other, db)
    text = (
        f"database {db} was {how} while subagentd was running;"
        " writes are refused until subagentd is restarted"
    )
    wait_for(lambda: text in proc.stderr_text(), "the heartbeat to notice")
    for i in range(50):
        with pytest.raises(RpcError) as excinfo:
            host.open(f"after{i}")
        assert excinfo.value.code == Code.DATABASE_LOST
        assert excinfo.value.message == text
        assert excinfo.value.data == {"reason": "DATABASE_LOST"}
    with pytest.raises(RpcError) as excinfo:
        host.tool("send_message", "r", subagent_id="c", message="queued?")
    assert (excinfo.value.code, excinfo.value.message) == (Code.DATABASE_LOST, text)
    refused = host.call(
        "tools/call",
        {
            "name": "send_message",
            "arguments": {"subagent_id": "c", "message": "queued?"},
            "_meta": {"subagentd/caller": "r"},
        },
    )
    assert refused == {"content": [{"type": "text", "text": f"Error: {text}"}], "isError": True}
    assert host.call("agents/get", {"agent_id": "c"})["agent_id"] == "c"  # reads still answer
    proc.close_stdin()
    assert proc.wait() == 0
    assert "Traceback" not in proc.stderr_text()  # the shutdown's refused writes: one line each


# --- several processes starting at once ----------------------------------------------------


def _open_frames(agent_id: str) -> bytes:
    frames = [
        INITIALIZE,
        {"jsonrpc": "2.0", "id": 2, "method": "agents/open", "params": {"agent_id": agent_id}},
    ]
    return b"".join(json.dumps(frame).encode() + b"\n" for frame in frames)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("rounds", "together"), [(20, 2), (5, 4)])
def test_processes_starting_together_on_a_new_database_all_start(tmp_path, rounds, together):
    for round_no in range(rounds):
        db = tmp_path / f"new{round_no}.db"
        procs = [
            subprocess.Popen(
                [PYTHON, "-m", "subagentd", "--db", str(db)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(together)
        ]
        for i, proc in enumerate(procs):
            out, err = proc.communicate(_open_frames(f"a{i}"), timeout=60)
            replies = [json.loads(line) for line in out.splitlines()]
            assert proc.returncode == 0, err.decode()
            assert [r.get("id") for r in replies] == [1, 2], err.decode()
            assert replies[1]["result"]["agent_id"] == f"a{i}", err.decode()
        conn = sqlite3.connect(db)
        names = [name for (name,) in conn.execute("SELECT name FROM _sqlite_migrations")]
        sessions = {sid for (sid,) in conn.execute("SELECT id FROM sessions")}
        conn.close()
        assert names == migrations.names  # each applied once, in order
        assert sessions == {f"a{i}" for i in range(together)}


def _open_store(path: str, barrier, results) -> None:
    barrier.wait()  # every process opens at the same moment
    try:
        SqliteStore(path).close()
        results.put("ok")
    except Exception as exc:  # reported to the test, which shows it
        results.put(repr(exc))


@pytest.mark.timeout(600)
def test_stores_opened_at_the_same_moment_on_a_new_file_all_migrate_once(tmp_path):
    """Before migrations ran under one write lock: 69 of 300 such opens failed (`table sessions
    already exists`, `duplicate column name`, `database is locked`)."""
    context = multiprocessing.get_context("fork")
    outcomes = []
    for round_no in range(30):
        path = str(tmp_path / f"same{round_no}.db")
        barrier, results = context.Barrier(3), context.Queue()
        workers = [
            context.Process(target=_open_store, args=(path, barrier, results)) for _ in range(3)
        ]
        for worker in workers:
            worker.start()
        outcomes += [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(60)
        conn = sqlite3.connect(path)
        names = [name for (name,) in conn.execute("SELECT name FROM _sqlite_migrations")]
        conn.close()
        assert names == migrations.names
    assert outcomes == ["ok"] * 90


# --- SIGTERM during start-up ---------------------------------------------------------------


def _catches(pid: int, signum: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


@pytest.mark.timeout(900)
def test_sigterm_right_after_start_exits_zero_every_time(tmp_path):
    for run_no in range(50):
        proc = subprocess.Popen(
            [PYTHON, "-m", "subagentd", "--db", str(tmp_path / f"t{run_no}.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(lambda pid=proc.pid: _catches(pid, signal.SIGTERM), "the SIGTERM handler")
            # not ordering anything: spreads the signal over start-up (imports, migrations, loader)
            time.sleep((run_no % 10) * 0.015)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, (run_no, err.decode())
        assert out == b""
        assert b"Traceback" not in err and b"Fatal Python error" not in err
