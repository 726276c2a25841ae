"""Background processes of `serve --detach on` as their user sees them: `subagentd detached list`
and `subagentd detached stop` driven through the real command line, their pid files trusted
only when the process is the one that wrote them, and a PostgreSQL password never written
anywhere (the pid file, the log, the listing, another client's warning)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.processes.test_detached import PATIENCE, ROOT, Detached

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
        for text in (warning, status, d.log(), command_line):
            assert PASSWORD not in text, text
        for path in Path(runtime, "subagentd").iterdir():
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), path
    finally:
        d.stop()
