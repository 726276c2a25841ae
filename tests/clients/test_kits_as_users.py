"""The test kits as a user meets them: a fresh project outside the repository per language, made of
the files docs/testing.md shows, against the built packages (the wheel installed into a new venv;
`npm pack` of the client installed into a new Node project; the Go module by a replace
directive). Each project's test passes, and the same test fails on a deliberately broken host
(it names its researchers `researcher-N`) with the kit's message naming the agent, its turn and
its input.

Installing the wheel's dependencies into the new venv uses the package index, as a user's
`pip install` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"
BROKEN = (
    'scripted host: agent "researcher-1" started its turn 1, but the table has 0 replies for it;'
    ' the turn\'s input: ["Q1?"] while the tree of "lead" is busy'
)
pytestmark = pytest.mark.timeout(900)


def files(language: str) -> dict[str, str]:
    """The files of a language's example project, as docs/testing.md shows them."""
    blocks = re.finditer(
        rf"<!-- file: {language}/(\S+) -->\n```\w*\n(.*?)```", DOC.read_text(), re.S
    )
    return {m.group(1): m.group(2) for m in blocks}


def write(project: Path, language: str, replace: tuple[str, str] = ("", "")) -> None:
    for name, text in files(language).items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(*replace) if replace[0] else text)


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A new venv with the built wheel and pytest installed: its bin/ holds `subagentd` too."""
    work = tmp_path_factory.mktemp("wheel")
    code, out = run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(work)], work
    )
    assert code == 0, out
    (wheel,) = work.glob("subagentd-*.whl")
    env_dir = work / "venv"
    code, out = run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], work)
    assert code == 0, out
    python = env_dir / "bin" / "python"
    code, out = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)]
        + ["pytest"],
        work,
    )
    assert code == 0, out
    return env_dir / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """PATH starts with the venv's bin (its `subagentd`); nothing points into this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SUBAGENTD"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_python_kit_in_a_fresh_project(venv, tmp_path):
    project = tmp_path / "my-host"
    write(project, "python")
    assert sorted(files("python")) == ["host.py", "test_host.py", "test_time.py"]
    code, out = run([str(venv / "pytest"), "-q", "-p", "no:cacheprovider"], project, user_env(venv))
    assert code == 0, out
    assert "2 passed" in out  # test_time.py: --clock manual, the interrupt grace
    write(project, "python", ('child_id=f"r{number}"', 'child_id=f"researcher-{number}"'))
    code, out = run([str(venv / "pytest"), "-q", "-p", "no:cacheprovider"], project, user_env(venv))
    assert code == 1, out
    assert "1 failed, 1 passed" in out
    assert f"E       subagentd.testing.host.ScriptedHostError: {BROKEN}" in out
    assert "test_host.py:7: ScriptedHostError" in out  # the test's own line, not the kit's


def test_node_kit_in_a_fresh_project(venv, tmp_path):
    npm = shutil.which("npm")
    assert npm, "npm is not on PATH"
    package = ROOT / "clients" / "typescript"
    assert (package / "node_modules").is_dir(), "run `npm ci` in clients/typescript"
    clone = tmp_path / "typescript"  # the package without dist/ (prepack builds it)
    shutil.copytree(package, clone, ignore=shutil.ignore_patterns("node_modules", "dist"))
    (clone / "node_modules").symlink_to(package / "node_modules")
    code, out = run([npm, "pack", "--silent", "--pack-destination", str(tmp_path)], clone)
    assert code == 0, out
    (tarball,) = tmp_path.glob("subagentd-client-*.tgz")
    project = tmp_path / "my-host"
    write(project, "node")
    code, out = run([npm, "install", "--offline", "--no-audit", "--no-fund", str(tarball)], project)
    assert code == 0, out
    code, out = run(["node", "--test"], project, user_env(venv))
    assert code == 0, out
    assert "# pass 1" in out
    write(project, "node", ("child_id: `r${index + 1}`", "child_id: `researcher-${index + 1}`"))
    code, out = run(["node", "--test"], project, user_env(venv))
    assert code == 1, out
    assert f"error: `{BROKEN}" in out
    assert "test/host.test.js:13" in out  # the test's own line in the stack


def test_go_kit_in_a_fresh_project(venv, tmp_path):
    go = shutil.which("go")
    assert go, "go is not on PATH"
    project = tmp_path / "my-host"
    write(project, "go", ("SUBAGENTD_CLIENTS_GO", str(ROOT / "clients" / "go")))
    env = user_env(venv) | {"GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    env.setdefault("GOCACHE", str(Path.home() / ".cache" / "go-build"))
    code, out = run([go, "test", "-count=1", "./..."], project, env)
    assert code == 0, out
    assert out.startswith("ok  \texample.com/myhost"), out
    host = project / "host.go"
    host.write_text(host.read_text().replace('"r%d"', '"researcher-%d"'))
    code, out = run([go, "test", "-count=1", "./..."], project, env)
    assert code == 1, out
    assert f"    host_test.go:24: {BROKEN}" in out
