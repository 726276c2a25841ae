"""No `--runner` run outlives subagentd: an MCP client that closes mid-turn (the official MCP SDK's
`stdio_client`: stdin closed, SIGTERM to subagentd's group 2 s later, SIGKILL 2 s after that), a
SIGTERM during the shutdown, a SIGKILL of subagentd. Each run here ignores SIGTERM and starts a
grandchild in its own process group, so it takes longer than the client's 2 s to stop."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.spawned import ServerProcess

RUNNER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "scripts" / "runner.py")])
TIMEOUT = 60
SLOW = ["--shutdown-grace", "30", "--interrupt-grace", "30"]  # longer than the client waits


def stubborn(pid_file: Path) -> str:
    """A run that records its pid, ignores SIGTERM, starts a grandchild and sleeps."""
    steps = [{"ignore_term": True}, {"background": 600}, {"pid": str(pid_file)}, {"sleep": 600}]
    return json.dumps({"steps": steps})


def wait_for_file(path: Path) -> int:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return int(path.read_text())


def group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    alive = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(name))
    return alive


def until_group_gone(pgid: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while group_alive(pgid):
        assert time.monotonic() < deadline, f"the run's group {pgid} outlived subagentd"
        time.sleep(0.02)


def test_an_mcp_sdk_client_closing_mid_turn_leaves_no_run(tmp_path):
    pid_file = tmp_path / "run.pid"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "subagentd", "--db", str(tmp_path / "db"), "--caller", "root"]
        + ["--runner", RUNNER, *SLOW],
    )
    errlog = open(tmp_path / "stderr", "w")  # noqa: SIM115  (closed below)

    async def session() -> None:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                spawn = {"label": "stubborn", "prompt": stubborn(pid_file), "child_id": "c1"}
                result = await client.call_tool("spawn_agent", spawn)
                assert result.is_error is False
                with anyio.fail_after(TIMEOUT):
                    while not pid_file.exists():
                        await anyio.sleep(0.01)
        # the client closed stdin, signalled and killed what it started: the run is mid-turn

    try:
        anyio.run(session)
    finally:
        errlog.close()
    run = int(pid_file.read_text())
    until_group_gone(run)
    stderr = (tmp_path / "stderr").read_text()
    assert "received SIGTERM during the shutdown: stopping the runs now" in stderr
    assert stderr.rstrip().endswith("stopped")


def test_a_sigterm_during_the_shutdown_stops_the_runs_and_exits_0(tmp_path):
    pid_file = tmp_path / "run.pid"
    server = ServerProcess("--caller", "root", "--runner", RUNNER, *SLOW, db=str(tmp_path / "db"))
    host = server.host
    host.initialize()
    spawn = {"label": "stubborn", "prompt": stubborn(pid_file), "child_id": "c1"}
    result = host.call("tools/call", {"name": "spawn_agent", "arguments": spawn})
    assert result["content"] == [{"type": "text", "text": "started subagent c1"}]
    run = wait_for_file(pid_file)
    server.close_stdin()
    deadline = time.monotonic() + TIMEOUT
    while "end of input: shutting down" not in server.stderr_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert group_alive(run)  # the run ignores SIGTERM: the shutdown waits up to its grace
    server.proc.send_signal(signal.SIGTERM)
    assert server.stop() == 0
    until_group_gone(run)


def test_a_sigkill_of_subagentd_leaves_no_run(tmp_path):
    pid_file = tmp_path / "run.pid"
    server = ServerProcess("--caller", "root", "--runner", RUNNER, *SLOW, db=str(tmp_path / "db"))
    host = server.host
    host.initialize()
    spawn = {"label": "stubborn", "prompt": stubborn(pid_file), "child_id": "c1"}
    host.call("tools/call", {"name": "spawn_agent", "arguments": spawn})
    run = wait_for_file(pid_file)
    server.proc.kill()
    assert server.stop() == -signal.SIGKILL
    until_group_gone(run)  # the run and the grandchild it started
