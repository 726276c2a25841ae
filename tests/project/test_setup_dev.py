"""scripts/setup-dev, the README's test command's first half: what it says when a program the suite
needs is missing (one line, before installing anything), and how a test that needs a missing
program fails (naming it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tools

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup-dev"


def bin_dir_with(tmp_path: Path, *commands: str) -> Path:
    """A directory holding only links to these commands (the rest of PATH left out)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for command in commands:
        found = shutil.which(command)
        assert found, command
        (directory / command).symlink_to(found)
    return directory


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SETUP), "--check"],
        env={**os.environ, "PATH": str(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_everything_the_suite_needs_is_here():
    done = subprocess.run(
        [sys.executable, str(SETUP), "--check"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == "setup-dev: everything the suite needs is installed\n"


def test_missing_programs_are_named_in_one_line_with_how_to_get_them(tmp_path):
    done = check(bin_dir_with(tmp_path, "env", "node", "npm"))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        "setup-dev: missing go, chromium, tmux; get them with: sudo apt-get install -y golang-go"
        " chromium tmux (or run this as root); then run this again\n"
    )


def test_node_is_named_with_where_to_get_it(tmp_path):
    done = check(bin_dir_with(tmp_path, "env", "go", "chromium", "tmux"))
    assert done.returncode == 1
    assert done.stderr == (
        "setup-dev: missing node; get them with: node: Node.js 20 or newer with npm, from"
        " https://nodejs.org (Debian 12's nodejs is 18); then run this again\n"
    )


def test_setup_outside_a_virtual_environment_says_how_to_make_one():
    python = Path(sys.base_prefix) / "bin" / "python3"
    done = subprocess.run([str(python), str(SETUP)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == (
        "setup-dev: no virtual environment is active: python3 -m venv .venv &&"
        " . .venv/bin/activate, then run this again\n"
    )


def test_a_test_needing_a_missing_program_fails_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "POSTGRES_BIN_DIRS", ())
    for name, line in [
        (
            "go",
            "go is missing, needed by the Go client's tests (tests/clients/test_go_client.py):"
            " apt-get install -y golang-go (Go 1.19 or newer); scripts/setup-dev installs it",
        ),
        (
            "postgresql",
            "postgresql is missing, needed by every [postgres] test (tests/pg.py starts a"
            " throwaway server): apt-get install -y postgresql-15 (the server binaries; no server"
            " needs to run); scripts/setup-dev installs it",
        ),
    ]:
        with pytest.raises(pytest.fail.Exception) as failed:
            tools.require(name)
        assert str(failed.value) == line


def test_the_readme_and_ci_run_the_setup_script():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/setup-dev && python -m pytest" in readme
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "scripts/setup-dev" in ci
    assert ci.index("scripts/setup-dev") < ci.index("python -m pytest")


FAKE_APT = """#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "apt-get.log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "install" and "tmux" in sys.argv:
    with open(os.path.join(here, "tmux"), "w") as tmux:
        tmux.write("#!/bin/sh\\n")
    os.chmod(os.path.join(here, "tmux"), 0o755)
"""


def test_a_missing_program_is_installed_with_apt_get_then_checked_again(tmp_path):
    """As root (CI); without root or sudo on PATH, the same run names what is missing."""
    directory = bin_dir_with(tmp_path, "env", "node", "npm", "go", "chromium")
    apt = directory / "apt-get"
    apt.write_text(FAKE_APT.format(python=sys.executable))
    apt.chmod(0o755)
    done = subprocess.run(
        [sys.executable, str(SETUP), "--programs"],
        env={**os.environ, "PATH": str(directory)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if os.geteuid() != 0:
        assert done.returncode == 1
        assert done.stderr.startswith("setup-dev: missing tmux; get them with: sudo apt-get")
        return
    assert done.returncode == 0, done.stderr
    assert (directory / "apt-get.log").read_text() == (
        "update -qq\ninstall -y -qq --no-install-recommends tmux\n"
    )
    assert done.stderr == (
        "setup-dev: installing tmux with apt-get\n"
        "setup-dev: everything the suite needs is installed\n"
    )


FAILING_APT = """#!/bin/sh
echo "E: Unable to locate package $5" >&2
[ "$1" = update ] || exit 100
"""


def test_a_failing_apt_get_is_one_line_and_no_traceback(tmp_path):
    directory = bin_dir_with(tmp_path, "env", "node", "npm", "go", "chromium", "sh")
    apt = directory / "apt-get"
    apt.write_text(FAILING_APT)
    apt.chmod(0o755)
    done = subprocess.run(
        [sys.executable, str(SETUP), "--programs"],
        env={**os.environ, "PATH": str(directory)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if os.geteuid() != 0:  # without root or sudo it names what is missing instead (CI is root)
        assert done.stderr.startswith("setup-dev: missing tmux; get them with: sudo apt-get")
        return
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "setup-dev: apt-get install tmux failed (exit 100); its messages are above;"
        " then run this again"
    )
    assert "Traceback" not in done.stderr


FAKE_PIP = """import os, sys
args = sys.argv[1:]
if args == ["--version"]:
    print(f"pip {os.environ['FAKE_PIP']} from /somewhere/pip (python 3.11)")
    sys.exit(0)
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if "-e" in args and os.environ.get("FAKE_PIP_FAILS"):
    print("ERROR: No matching distribution found for fastmcp-slim[server]==4.1.4", file=sys.stderr)
    sys.exit(1)
"""


def setup_with_pip(tmp_path: Path, version: str, fails: bool = False):
    """scripts/setup-dev in this venv with a stand-in `python -m pip` of that version."""
    (tmp_path / "pip").mkdir()
    (tmp_path / "pip" / "__init__.py").write_text("")
    (tmp_path / "pip" / "__main__.py").write_text(FAKE_PIP)
    log = tmp_path / "pip.log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "FAKE_PIP": version}
    env["FAKE_PIP_LOG"] = str(log)
    if fails:
        env["FAKE_PIP_FAILS"] = "1"
    done = subprocess.run(
        [sys.executable, str(SETUP)], env=env, capture_output=True, text=True, timeout=300
    )
    return done, log.read_text().splitlines() if log.exists() else []


INSTALL = "install -q --disable-pip-version-check"


def test_a_venvs_bundled_pip_too_old_for_the_extras_is_upgraded_first(tmp_path):
    """Python 3.11's venv bundles pip 23.2.1, which cannot resolve the frameworks extra."""
    done, calls = setup_with_pip(tmp_path, "23.2.1")
    assert done.returncode == 0, done.stderr
    assert calls == [f"{INSTALL} --upgrade pip", f"{INSTALL} -e .[test,frameworks]"]
    assert done.stderr.splitlines()[:2] == [
        "setup-dev: pip 23.2.1 is older than 23.3, which the test extras need: upgrading pip",
        "setup-dev: pip install -e '.[test,frameworks]'",
    ]


def test_a_recent_pip_is_left_alone(tmp_path):
    done, calls = setup_with_pip(tmp_path, "26.0.1")
    assert done.returncode == 0, done.stderr
    assert calls == [f"{INSTALL} -e .[test,frameworks]"]


def test_a_failing_pip_install_is_one_line_and_no_traceback(tmp_path):
    done, _ = setup_with_pip(tmp_path, "26.0.1", fails=True)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-2:] == [
        "ERROR: No matching distribution found for fastmcp-slim[server]==4.1.4",
        "setup-dev: pip install -e '.[test,frameworks]' failed (exit 1); its messages are above;"
        " then run this again",
    ]
    assert "Traceback" not in done.stderr


def test_ci_runs_the_readme_commands_in_a_fresh_clone_named_subagentd_with_the_bundled_pip():
    """The layout and the venv a newcomer has: `.ci/run` clones into a directory named
    subagentd, makes `.venv` inside with `python3 -m venv`, upgrades nothing by hand, runs the
    README's first command as written, then scripts/setup-dev and tests/project there."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--upgrade pip" not in ci  # setup-dev upgrades a pip too old for the extras
    block = ci[ci.index('newcomer="$(mktemp -d)/subagentd"') :]
    steps = [line.strip() for line in block.splitlines()]
    for step in (
        'git clone -q "$PWD" "$newcomer"',
        'cd "$newcomer"',
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        'bash -euo pipefail -c "$first"',
        "scripts/setup-dev",
        'python -m pytest -q -x tests/project -k "not bench"',
    ):
        assert step in steps, step
    assert steps.index("python3 -m venv .venv") < steps.index("scripts/setup-dev")
    first = re.search(
        r"^pip install -e \S+ && subagentd demo", (ROOT / "README.md").read_text(), re.M
    )
    assert first is not None  # what the step extracts and runs
