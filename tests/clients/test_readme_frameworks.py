"""The README's agent-framework snippets (MCP section, each marked `<!-- runs: NAME -->`) run
against this checkout's `subagentd`: pydantic-ai, the OpenAI Agents SDK and fastmcp here,
LangChain in its own environment (tests/frameworks/environment.py: mcp 1.x). Each prints
list_agents' text for a new root."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frameworks.environment import langchain_python
from tests.project.test_readme import README, TIMEOUT, env

SNIPPETS = dict(re.findall(r"<!-- runs: ([\w-]+) -->\n```python\n(.*?)```", README, re.S))


def test_there_is_a_snippet_per_framework():
    assert list(SNIPPETS) == ["pydantic-ai", "openai-agents", "fastmcp", "langchain"]


@pytest.mark.parametrize("name", ["pydantic-ai", "openai-agents", "fastmcp", "langchain"])
def test_the_snippet_connects_and_lists(tmp_path, name):
    script = tmp_path / "snippet.py"
    script.write_text(SNIPPETS[name])
    python = langchain_python() if name == "langchain" else sys.executable
    done = subprocess.run(
        [python, str(script)],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.splitlines()[-1] == "(no subagents)"
    assert Path(tmp_path / "agents.db").is_file()
    timeouts = re.findall(r"(?:timeout_seconds=|timeout=|seconds=)(\d+)", SNIPPETS[name])
    assert all(int(t) > 50 for t in timeouts)  # above wait_agents' longest wait
