"""runners/process.py run_process over real processes: through the runs' epoll (`following`) and
through a task per pipe (no epoll), on asyncio and trio."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from subagentd.runners.process import Child, Follower, following, run_process
from subagentd.runners.watchdog import Watchdog

BACKENDS = ["asyncio", "trio"]


@contextlib.asynccontextmanager
async def none() -> AsyncIterator[Follower | None]:
    yield None


def run(command: list[str], data: bytes, limit: int, backend: str, followed: bool) -> Any:
    watchdog = Watchdog()
    children: list[Child] = []

    async def main() -> Any:
        async with following() if followed else none() as follower:
            assert (follower is not None) == followed
            output = await run_process(
                command, data, {"PATH": "/usr/bin:/bin"}, watchdog, limit, children.append, follower
            )
        for child in children:
            child.close()
        return output

    try:
        return anyio.run(main, backend=backend)
    finally:
        watchdog.close()


@pytest.mark.parametrize("followed", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_gets_its_whole_stdin_and_leaves_its_stdout_stderr_and_status(backend, followed):
    script = (
        "import sys; d = sys.stdin.buffer.read(); print(len(d)); "
        "sys.stderr.write('e' * 5000); sys.exit(3)"
    )
    output = run([sys.executable, "-c", script], b"x" * 300_000, 0, backend, followed)
    assert output.code == 3
    assert output.stdout == "300000"
    assert output.cut is False
    assert output.stderr == "e" * 4096  # its tail


@pytest.mark.parametrize("followed", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_stdout_past_the_limit_is_cut_and_the_rest_read(backend, followed):
    script = "import sys; sys.stdout.write('a' * 200_000)"
    output = run([sys.executable, "-c", script], b"", 1000, backend, followed)
    assert (output.code, output.stdout, output.cut, output.stderr) == (0, "a" * 1000, True, None)


@pytest.mark.parametrize("followed", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_ends_when_it_exits_though_what_it_left_behind_holds_stdout(backend, followed):
    started = time.monotonic()
    output = run(["sh", "-c", "sleep 20 & echo done"], b"", 0, backend, followed)
    assert time.monotonic() - started < 15  # the drain's second, not the 20 s
    assert (output.code, output.stdout) == (0, "done")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_killed_by_a_signal_has_its_negative_number(backend):
    output = run(["sh", "-c", "kill -9 $$"], b"", 0, backend, True)
    assert output.code == -9


def test_a_command_that_cannot_start_raises_oserror():
    with pytest.raises(FileNotFoundError, match="No such file or directory: 'no-such-command-x'"):
        run(["no-such-command-x"], b"", 0, "asyncio", True)
