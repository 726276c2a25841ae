"""The Dockerfile, read (no Docker engine runs here): `docker run -i IMAGE` serves, `docker run
IMAGE inspect|stats|schema|--version` work, the database path comes from SUBAGENTD_DB."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import subagentd
from tests.spawned import TIMEOUT

ROOT = Path(__file__).resolve().parents[2]
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'


def instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    joined = text.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def last(keyword: str) -> str:
    values = [rest for kw, rest in instructions() if kw == keyword]
    assert values, f"the Dockerfile has no {keyword}"
    return values[-1]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in instructions():
        if keyword == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def test_the_entrypoint_is_just_subagentd_with_no_baked_options():
    assert json.loads(last("ENTRYPOINT")) == ["subagentd"]
    assert not [kw for kw, _ in instructions() if kw == "CMD"]


def test_the_database_path_comes_from_subagentd_db_on_the_volume():
    assert image_env()["SUBAGENTD_DB"] == "/data/subagentd.db"
    assert last("VOLUME") in ("/data", '["/data"]')
    assert last("WORKDIR") == "/data"
    assert last("USER") == "subagentd"


def test_every_file_the_build_needs_is_copied_and_not_dockerignored():
    copied = set()
    for keyword, rest in instructions():
        if keyword == "COPY":
            *sources, _dest = rest.split()
            copied.update(source.rstrip("/") for source in sources)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {"pyproject.toml", "subagentd", project["readme"], *project.get("license-files", [])}
    assert needed <= copied, f"not copied into the image: {needed - copied}"
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in copied:
        assert (ROOT / name).exists(), name
        assert not any(fnmatch.fnmatch(name, pattern) for pattern in ignored), name


@pytest.fixture
def container(tmp_path):
    """The image's command line and environment, run here: /data becomes a temporary directory."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    entrypoint = json.loads(last("ENTRYPOINT"))
    # the console script of the Python running the tests (an unactivated venv is not on PATH)
    command = shutil.which(entrypoint[0], path=os.path.dirname(sys.executable))
    assert command, "the subagentd console script is not installed"
    env = {name: value.replace("/data", str(data)) for name, value in image_env().items()}

    def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
        return subprocess.run(
            [command, *entrypoint[1:], *args],
            input=stdin,
            capture_output=True,
            timeout=TIMEOUT,
            env={**os.environ, **env},
            cwd=data,
        )

    return run, data


def test_docker_run_i_image_serves_on_the_volume_database(container):
    run, data = container
    done = run(stdin=INITIALIZE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["serverInfo"]["name"] == "subagentd"
    assert (data / "subagentd.db").is_file()
    assert f"database {data / 'subagentd.db'}" in done.stderr.decode()


def test_docker_run_image_version_schema_inspect_and_stats(container):
    run, data = container
    version = run("--version")
    assert version.stdout.decode() == (
        f"subagentd {subagentd.__version__} (protocol {subagentd.PROTOCOL})\n"
    )
    assert json.loads(run("schema").stdout)["info"]["title"] == "subagentd"
    assert run(stdin=INITIALIZE).returncode == 0  # creates the database
    inspected = run("inspect")
    assert inspected.returncode == 0, inspected.stderr
    assert "0 session(s)" in inspected.stdout.decode()
    stats = run("stats")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["sessions"] == {"running": 0, "idle": 0, "ready": 0}
    served = run("--caller", "root", stdin=INITIALIZE)  # serve options after the image name
    assert served.returncode == 0, served.stderr
    assert "database" in served.stderr.decode()
