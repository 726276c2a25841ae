"""The README's runnable blocks run: each is marked `<!-- runs -->` (sh blocks run in a temporary
directory against this checkout's `subagentd`, python blocks as scripts, the MCP config is
parsed and its arguments given to the real command line); its links stay inside the repository."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RUNS = re.compile(r"<!-- runs -->\n```(\w+)\n(.*?)```", re.S)
BLOCKS = RUNS.findall(README)
BIN = os.path.dirname(sys.executable)  # where pip put this checkout's `subagentd`
TIMEOUT = 180


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    return {**clean, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCKS if lang == language]


def test_the_runnable_blocks_are_all_found():
    assert README.count("<!-- runs -->") == len(BLOCKS) == 5
    assert [lang for lang, _ in BLOCKS] == ["sh", "python", "json", "json", "json"]


def installed_by_the_readme(tmp_path: Path) -> dict[str, str]:
    """env() as after the README's own install command (`pip install -e … && subagentd demo`):
    the modules of the extras it does not install cannot be imported."""
    from subagentd.extras import EXTRAS

    match = re.search(r"^pip install -e (\S+) && subagentd demo", README, re.M)
    assert match, "the README's first command installs this clone"
    extras = re.findall(r"[\w-]+", match[1].partition("[")[2])
    hidden = [
        name
        for extra, (modules, _) in EXTRAS.items()
        if extra not in extras
        for name in modules.split()
    ]
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nsys.modules.update(dict.fromkeys({hidden!r}))\n"
    )
    return {**env(), "PYTHONPATH": str(tmp_path)}


def test_the_readme_install_leaves_out_the_extras_it_does_not_name(tmp_path):
    from subagentd.extras import EXTRAS

    env = installed_by_the_readme(tmp_path)
    importable = {}
    for extra, (module, _) in EXTRAS.items():
        imports = "; ".join(f"import {name}" for name in module.split())
        done = subprocess.run([sys.executable, "-c", imports], env=env)
        importable[extra] = done.returncode == 0
    assert importable == {
        "postgres": False,
        "watch": True,
        "fast": False,
        "otel": False,
        "a2a": False,
    }


def test_the_sh_block_runs_against_this_checkout(tmp_path):
    """As written, after the README's own install command (the extras it installs, no other)."""
    (body,) = blocks("sh")
    (tmp_path / "site").mkdir()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body],
        cwd=tmp_path,
        env=installed_by_the_readme(tmp_path / "site"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "4 session(s) in demo.db" in done.stdout
    assert '"ready": 4' in done.stdout  # subagentd stats
    assert "pruned 0 settled tree(s)" in done.stdout  # nothing is 30 days old yet
    assert (tmp_path / "demo.db").is_file()
    assert "wrote demo.html: 4 agent(s)" in done.stderr
    assert (tmp_path / "demo.html").read_text().startswith("<!DOCTYPE html>")
    assert "subagentd watch demo.db  4 agent(s): 0 in a turn, 4 ready" in done.stdout


def run_script(tmp_path, body: str) -> list[str]:
    """A README Python block run as a script in a temporary directory: its stdout lines."""
    script = tmp_path / "readme_block.py"
    script.write_text(body)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_stdlib_example_runs_as_a_script_twice_in_a_row(tmp_path):
    assert "(examples/stdlib_host.py)" in README
    for _ in range(2):
        lines = run_script(tmp_path, (ROOT / "examples" / "stdlib_host.py").read_text())
        assert lines == [
            "c1 was asked: Find the oldest open bug.",
            "root was told: Background subagent c1 finished and will do no further work unless"
            " you send it more.",
        ]


@pytest.mark.parametrize("body", blocks("json"), ids=["plain", "runner", "acp"])
def test_the_mcp_config_uses_absolute_paths_and_options_the_cli_accepts(body):
    server = json.loads(body)["mcpServers"]["subagentd"]
    assert os.path.isabs(server["command"]) and server["command"].endswith("/subagentd")
    args = server["args"]
    assert os.path.isabs(args[args.index("--db") + 1])
    done = subprocess.run(
        [os.path.join(BIN, "subagentd"), *args, "--version"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("subagentd ")


def test_ci_runs_the_readme_test_command():
    commands = [line for line in README.splitlines() if "# the tests" in line]
    assert len(commands) == 1
    test_command = commands[0].split("#")[0].strip().rsplit("&&", 1)[1].strip()
    assert test_command == "python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci


@pytest.mark.parametrize("target", re.findall(r"\]\(([^)]+)\)", README))
def test_every_link_stays_inside_the_repository(target):
    assert "://" not in target and not target.startswith("/"), target
    assert (ROOT / target.split("#")[0]).exists(), target


def test_no_internal_notes_or_outside_paths():
    for marker in ("/work/", "TODO", "FIXME", "http://", "https://", "SEMANTICS.md"):
        assert marker not in README, marker
    assert "\n## A Python host\n" in README


def test_the_python_host_block_runs_its_agents_turns(tmp_path):
    """The "A Python host" block: the client spawns this checkout's subagentd and AgentHost runs
    the child's turn, the parent's turn for its report, and the parent's turn for its settling."""
    body = blocks("python")[0]
    assert "from subagentd.client import" in body
    assert run_script(tmp_path, body) == [
        "researcher: Oldest open bug: #12.",
        "root: noted",
        "root: noted",
    ]


def test_the_runner_config_runs_the_example_runner_with_absolute_paths():
    runner_config = json.loads(blocks("json")[1])["mcpServers"]["subagentd"]
    args = runner_config["args"]
    python, script = shlex.split(args[args.index("--runner") + 1])
    assert os.path.isabs(python) and os.path.isabs(script)
    assert script.endswith("/examples/turn_runner.py")
    assert (ROOT / "examples" / "turn_runner.py").is_file()
    assert args[args.index("--caller") + 1] == "root"
    assert "AGENT_COMMAND" in runner_config["env"]
