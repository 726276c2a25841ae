"""The programs the suite needs besides Python, in one table: how each is found, the Debian package
that provides it, and which tests use it.

scripts/setup-dev reads this table to install what is missing (or to say in one line what is
missing and how to get it); the tests call `require(name)`, which fails a test that needs a
missing program with a message naming the program and how to get it. Nothing here skips.

Standard library only at import time: scripts/setup-dev imports it before anything is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NamedTuple

POSTGRES_BIN_DIRS = (
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/17/bin",
)


class Tool(NamedTuple):
    name: str
    commands: tuple[str, ...]  # any one of them found means the tool is there
    apt: str | None  # the Debian package, or None when apt cannot provide a good enough one
    get: str  # how to get it, for the one-line message
    used_by: str


TOOLS = (
    Tool(
        "go",
        ("go",),
        "golang-go",
        "apt-get install -y golang-go (Go 1.19 or newer)",
        "the Go client's tests (tests/clients/test_go_client.py)",
    ),
    Tool(
        "chromium",
        ("chromium", "chromium-browser"),
        "chromium",
        "apt-get install -y chromium",
        "the HTML timeline's tests (tests/views/test_html.py)",
    ),
    Tool(
        "tmux",
        ("tmux",),
        "tmux",
        "apt-get install -y tmux",
        "the live view's tests (tests/views/test_watch.py)",
    ),
    Tool(
        "postgresql",
        ("initdb",),
        "postgresql-15",
        "apt-get install -y postgresql-15 (the server binaries; no server needs to run)",
        "every [postgres] test (tests/pg.py starts a throwaway server)",
    ),
    Tool(
        "pgbouncer",
        ("pgbouncer",),
        "pgbouncer",
        "apt-get install -y pgbouncer (the program only; no pooler needs to run)",
        "the pooler's tests (tests/processes/test_pgbouncer.py, the crash suite's pgbouncer runs)",
    ),
    Tool(
        "node",
        ("node", "npm"),
        None,
        "Node.js 20 or newer with npm, from https://nodejs.org (Debian 12's nodejs is 18)",
        "the TypeScript client's tests and the benchmarks' TypeScript peer",
    ),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


def find(name: str) -> str | None:
    """The path of the tool's (first) command, or None when it is missing."""
    tool = BY_NAME[name]
    if name == "postgresql":
        for directory in POSTGRES_BIN_DIRS:
            path = os.path.join(directory, "initdb")
            if os.access(path, os.X_OK):
                return path
        return shutil.which("initdb")
    if name == "node":  # both node and npm, and node 20 or newer
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None or node_major(node) < 20:
            return None
        return npm
    for command in tool.commands:
        found = shutil.which(command) or shutil.which(command, path="/usr/sbin:/sbin")
        if found:
            return found
    return None


def node_major(node: str) -> int:
    try:
        done = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
        return int(done.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def missing_message(name: str) -> str:
    tool = BY_NAME[name]
    then = "; scripts/setup-dev installs it" if tool.apt else ""
    return f"{tool.name} is missing, needed by {tool.used_by}: {tool.get}{then}"


def require(name: str) -> str:
    """The tool's path; a missing tool fails the calling test with one line naming it."""
    found = find(name)
    if found is None:
        try:
            import pytest
        except ImportError:  # a script outside the suite (benchmarks/run.py, docs/screenshots.py)
            raise SystemExit(missing_message(name)) from None
        pytest.fail(missing_message(name), pytrace=False)
    return found
