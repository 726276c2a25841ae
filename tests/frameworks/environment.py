"""The LangChain environment: a virtual environment of its own (langchain-mcp-adapters needs
mcp<2; the suite's mcp is 2.x), made with uv from tests/frameworks/langchain-requirements.txt,
once per requirements file under the temp directory, and reused by later runs (a marker file
says it was completed). Its Python runs the LangChain scripts; subagentd itself runs from this
project's environment."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

HERE = Path(__file__).parent
REQUIREMENTS = HERE / "langchain-requirements.txt"


@cache
def langchain_python() -> str:
    """The LangChain environment's Python, made first if needed (minutes at most, once)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    where = Path(tempfile.gettempdir()) / f"subagentd-langchain-{digest}"
    python = where / "bin" / "python"
    ready = where / "ready"
    if ready.exists() and python.exists():
        return str(python)
    uv = [sys.executable, "-m", "uv"]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run(
        [*uv, "venv", "-q", "--clear", "-p", sys.executable, str(where)],
        check=True,
        env=env,
        timeout=600,
    )
    subprocess.run(
        [*uv, "pip", "install", "-q", "--python", str(python), "-r", str(REQUIREMENTS)],
        check=True,
        env=env,
        timeout=1200,
    )
    ready.write_text(digest)
    return str(python)


def run_script(
    name: str, *args: str, input: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run tests/frameworks/<name> with the LangChain environment's Python."""
    return subprocess.run(
        [langchain_python(), str(HERE / name), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
