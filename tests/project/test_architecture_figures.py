"""docs/architecture.md's "Figures" table: each figure is what the command beside it prints.

The commands run here as the table names them; a change that moves a figure fails this test until
the map says the new figure. (Timings are not in the map: they depend on the machine.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "architecture.md"
METHODS = ("ping", "tools/call list_agents", "send_message", "tools/call send_message")


def run(command: str) -> str:
    args = command.split()
    assert args[0] == "python", command
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def modules(output: str) -> str:
    return re.search(r"distinct subagentd modules: (\d+)", output).group(1)  # type: ignore[union-attr]


def connection_entries(output: str) -> str:
    return re.search(r"connection entered (\d+) times", output).group(1)  # type: ignore[union-attr]


def before_first_rule(output: str) -> str:
    return re.search(r"module changes before the first rule (\d+)", output).group(1)  # type: ignore[union-attr]


def calls(output: str) -> str:
    per = {m: re.search(rf"^{re.escape(m)}\s+(\d+) calls/message", output, re.M) for m in METHODS}
    assert all(per.values()), output
    return " / ".join(match.group(1) for match in per.values())  # type: ignore[union-attr]


READERS: dict[str, Callable[[str], str]] = {
    "distinct subagentd modules one `send_message` passes through": modules,
    "times that path enters `server/connection.py`": connection_entries,
    "module changes on that path before its first rule (`core/arguments.py`)": before_first_rule,
    "Python calls per `ping` / `tools/call list_agents` / `send_message` / `tools/call send_message`": calls,
    "the same, the methods run directly (`invoke_directly`)": calls,
}


def figures() -> list[tuple[str, str, str]]:
    text = MAP.read_text()
    table = text[text.index("## Figures") :]
    rows = re.findall(r"^\| (.+?) \| ([\d / ]+) \| `(python [^`]+)` \|$", table, re.M)
    return [(figure, value.strip(), command) for figure, value, command in rows]


def test_the_map_has_a_figures_table_and_every_figure_a_reader():
    assert [figure for figure, _, _ in figures()] == list(READERS)


@pytest.mark.parametrize("figure, value, command", figures(), ids=[f[0] for f in figures()])
def test_each_figure_is_what_its_command_prints(figure, value, command):
    printed = READERS[figure](run(command))
    assert printed == value, (
        f"docs/architecture.md says {value} for {figure!r}; {command} prints {printed}"
    )


def test_the_request_path_counts_only_the_package_in_a_clone_named_subagentd(tmp_path):
    """The layout the README suggests: a clone named `subagentd` with its `.venv` inside, so the
    third-party modules' paths hold `/subagentd/` too; only the package's own files count."""
    import anyio
    import jsonrpcserver
    import msgspec

    clone = tmp_path / "subagentd"
    site = clone / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name in ("subagentd", "benchmarks"):
        (clone / name).symlink_to(ROOT / name)
    for module in (anyio, jsonrpcserver, msgspec):
        (site / module.__name__).symlink_to(Path(module.__file__).parent)
    done = subprocess.run(
        [sys.executable, "benchmarks/request_path.py"],
        cwd=clone,
        env={**os.environ, "PYTHONPATH": f"{clone}{os.pathsep}{site}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    expected = {figure: value for figure, value, _ in figures()}
    assert modules(done.stdout) == expected[list(READERS)[0]]
    assert before_first_rule(done.stdout) == expected[list(READERS)[2]]
