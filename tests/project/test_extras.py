"""A missing optional dependency is one `cannot start: …` line naming the extra and how to add it
from a clone or to a pipx install; every install hint in the docs names an extra that exists, in
a form that works from a clone (nothing is published to a package index)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from subagentd.extras import EXTRAS, install_hint

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DOCS = [
    ROOT / "README.md",
    ROOT / "PROTOCOL.md",
    ROOT / "SECURITY.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "clients").glob("*/README.md")),
]


def without(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command line, run with `module` unimportable (as if its extra were missing)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from subagentd.cli import main\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**env, "HOME": str(cwd), "XDG_STATE_HOME": ""},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_extra_names_a_requirement_pyproject_has():
    for extra, (_, requirement) in EXTRAS.items():
        names = [re.split(r"[<>=]", r)[0] for r in PYPROJECT["optional-dependencies"][extra]]
        for package in requirement.split():  # what pipx injects: one package or several
            assert package in names, (extra, package, names)


def test_install_hints_work_from_a_clone_and_with_pipx():
    assert install_hint("postgres") == (
        "pip install '.[postgres]' in your clone of subagentd"
        " (with pipx: pipx inject subagentd 'psycopg[binary]')"
    )
    assert install_hint("watch") == (
        "pip install '.[watch]' in your clone of subagentd (with pipx: pipx inject subagentd rich)"
    )


def test_postgres_without_psycopg_is_one_line_before_anything_is_served(tmp_path):
    done = without("psycopg", "--db", "postgresql://user@localhost/agents", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.endswith(
        "ERROR subagentd: cannot start: --db postgresql://… needs psycopg, from the postgres"
        " extra: pip install '.[postgres]' in your clone of subagentd"
        " (with pipx: pipx inject subagentd 'psycopg[binary]')"
    )
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_uvloop_missing_is_one_line(tmp_path):
    done = without("uvloop", "--db", ":memory:", "--event-loop", "uvloop", cwd=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.endswith(
        "cannot start: --event-loop uvloop needs uvloop, from the fast extra: pip install"
        " '.[fast]' in your clone of subagentd (with pipx: pipx inject subagentd uvloop)"
    )


def test_watch_without_rich_is_one_line(tmp_path):
    done = without("rich", "watch", "--db", str(tmp_path / "x.db"), "--once", cwd=tmp_path)
    assert done.returncode == 1  # as every missing extra
    assert done.stderr == (
        "cannot start: subagentd watch needs rich, from the watch extra: pip install '.[watch]'"
        " in your clone of subagentd (with pipx: pipx inject subagentd rich)\n"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_hint_only_installs_that_work_from_a_clone(doc):
    text = doc.read_text()
    assert "subagentd[" not in text, "no package index has subagentd: use '.[extra]' in a clone"
    assert not re.search(r"pip install subagentd\b", text), "no package index has subagentd"
    assert "npm install @subagentd/client" not in text, "no npm registry has the client"
    for extras in re.findall(r"pip install (?:-e )?'?\.\[([a-z,]+)\]", text):
        for extra in extras.split(","):
            assert extra in PYPROJECT["optional-dependencies"], (doc.name, extra)
    for requirement in re.findall(r"pipx inject subagentd '?([\w\[\]]+)", text):
        wanted = {r for reqs in PYPROJECT["optional-dependencies"].values() for r in reqs}
        assert any(r.startswith(requirement) for r in wanted), (doc.name, requirement)


def test_the_readme_says_subagentd_installs_from_a_clone():
    readme = (ROOT / "README.md").read_text()
    assert "subagentd is not on PyPI" in readme


def test_a2a_without_a2a_sdk_is_one_line(tmp_path):
    done = without("a2a", "a2a", "--db", str(tmp_path / "x.db"), "--caller", "r", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "cannot start: subagentd a2a needs a2a, from the a2a extra: pip install '.[a2a]' in your"
        " clone of subagentd (with pipx: pipx inject subagentd 'a2a-sdk[http-server]' uvicorn)\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_a2a_without_uvicorn_is_one_line(tmp_path):
    done = without("uvicorn", "a2a", "--db", str(tmp_path / "x.db"), "--caller", "r", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("cannot start: subagentd a2a needs uvicorn, from the a2a extra")
