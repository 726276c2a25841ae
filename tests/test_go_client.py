"""The Go client's own suite (clients/go): `go vet` and `go test` against the shared fixtures.

CI installs Go (.ci/run); this test does not skip when `go` is missing: it fails and says so.
The module uses the standard library only, so it runs with the module proxy switched off.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "clients" / "go"
TIMEOUT = 300


def go(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("go")
    assert tool, "go is not on PATH; install it (Debian: apt-get install -y golang-go)"
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    return subprocess.run(
        [tool, *args],
        cwd=PACKAGE,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.timeout(2 * TIMEOUT + 30)  # a first build compiles the standard library packages
def test_go_client_passes_vet_and_its_tests():
    vet = go("vet", "./...")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    run = go("test", "-count=1", "-v", "./...")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20000:]
    assert "--- PASS: TestRenderMatchesTheSharedFixtures" in output, output[-20000:]
    assert "FAIL" not in output, output[-20000:]


def test_go_sources_are_gofmt_clean():
    gofmt = shutil.which("gofmt")
    assert gofmt, "gofmt is not on PATH; it comes with Go"
    run = subprocess.run(
        [gofmt, "-l", "."], cwd=PACKAGE, capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == "", f"gofmt would change: {run.stdout}"
