"""The Go client's own suite (clients/go): `go vet` and `go test` against this checkout's server.

scripts/setup-dev installs Go (Debian's golang-go). This test does not skip when `go` is missing:
it fails and says what to install (tests/tools.py).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spawned import run_client_suite
from tests.tools import require

MODULE = Path(__file__).resolve().parents[2] / "clients" / "go"
TIMEOUT = 600


def run_go(*args: str) -> str:
    go = require("go")
    server = Path(sys.executable).with_name("subagentd")
    assert server.is_file(), f"{server} is missing: install the project (pip install -e .)"
    # Standard library only: no module proxy, no toolchain download.
    env = {**os.environ, "SUBAGENTD": str(server), "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    env.setdefault("GOCACHE", str(Path.home() / ".cache" / "go-build"))
    return run_client_suite([go, *args], MODULE, env, TIMEOUT)


@pytest.mark.timeout(TIMEOUT + 60)
def test_go_client_vet_and_format():
    run_go("vet", "./...")
    gofmt = os.path.join(os.path.dirname(os.path.realpath(require("go"))), "gofmt")
    listed = subprocess.run([gofmt, "-l", "."], cwd=MODULE, capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout == "", f"not gofmt-formatted:\n{listed.stdout}"


@pytest.mark.timeout(TIMEOUT + 60)
def test_go_client_go_test():
    output = run_go("test", "-count=1", "-v", "./...")
    assert "--- PASS: TestScriptedTranscripts/flows.jsonl" in output, output
    assert "--- PASS: TestRenderMatchesTheSharedFixtures" in output, output
    assert "--- PASS: TestReadmeGoSnippetsCompileAndTheHostRuns" in output, output
    # types.go is generated from clients/openrpc.json (clients/go/internal/gentypes).
    assert "--- PASS: TestTypesGoIsGeneratedFromOpenRPC" in output, output
    assert "--- FAIL" not in output, output
    assert output.rstrip().splitlines()[-1].startswith("ok "), output
