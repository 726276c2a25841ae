"""The process groups of runs a killed `--detach` background process left (runners/runner_pids.py):
the next one stops each group that is still the run's, whether the run itself still lives or
only what it started, and never a process that merely has a recorded pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from subagentd.runners.runner_pids import PidFiles, start_time
from tests.processes.test_detached import alive

PATIENCE = 30.0
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
# a run that starts a sleeper in its group, says its pid, then exits (or sleeps with "stay")
RUN = (
    "import subprocess, sys, time\n"
    f"p = subprocess.Popen({SLEEP!r}, stdin=subprocess.DEVNULL)\n"
    "print(p.pid, flush=True)\n"
    "if sys.argv[1:] == ['stay']:\n"
    "    time.sleep(600)\n"
)


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.02)


def run(*more: str) -> tuple[subprocess.Popen[bytes], int]:
    """A run as the runners start one (a session and group of its own), and its sleeper."""
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, *more], stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdout is not None
    with process.stdout:
        return process, int(process.stdout.readline())


def kill(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_group_whose_run_exited_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    recorded = PidFiles(str(tmp_path / "runs"))
    process, sleeper = run()
    try:
        recorded.add(process.pid)
        assert process.wait(timeout=PATIENCE) == 0  # reaped: no process has its pid now
        assert start_time(process.pid) is None and alive(sleeper)
        assert PidFiles(str(tmp_path / "runs")).sweep() == 1
        wait_gone(sleeper)
        assert os.listdir(tmp_path / "runs") == []
    finally:
        kill(sleeper)


def test_a_live_run_is_stopped_with_its_group(tmp_path: Path) -> None:
    recorded = PidFiles(str(tmp_path / "runs"))
    process, sleeper = run("stay")
    try:
        recorded.add(process.pid)
        assert PidFiles(str(tmp_path / "runs")).sweep() == 1
        assert process.wait(timeout=PATIENCE) == -signal.SIGKILL
        wait_gone(sleeper)
    finally:
        kill(process.pid, sleeper)


def test_a_recorded_pid_that_is_someone_elses_now_is_left_alone(tmp_path: Path) -> None:
    """A live process (a group leader too) whose start time is not the recorded one."""
    other = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        runs = tmp_path / "runs"
        PidFiles(str(runs))
        started = start_time(other.pid)
        assert started is not None
        (runs / str(other.pid)).write_text(str(int(started) - 1))
        assert PidFiles(str(runs)).sweep() == 0
        assert alive(other.pid)
        assert os.listdir(runs) == []  # the stale file is gone
    finally:
        other.kill()
        other.wait()


def test_a_gone_run_whose_group_is_empty_is_only_forgotten(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    recorded = PidFiles(str(runs))
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    recorded.add(process.pid)
    process.wait(timeout=PATIENCE)
    assert PidFiles(str(runs)).sweep() == 0
    assert os.listdir(runs) == []
