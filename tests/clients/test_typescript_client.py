"""The TypeScript client's own suite (clients/typescript): `npm test` against this checkout's server.

scripts/setup-dev runs `npm ci` in clients/typescript (CI runs it too, through .ci/run).
This test does not skip when node_modules is missing: it fails and says what to run.
"""

import os
import sys
from pathlib import Path

import pytest

from tests.spawned import run_client_suite
from tests.tools import require

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
TIMEOUT = 600


@pytest.mark.timeout(TIMEOUT + 60)
def test_typescript_client_npm_test():
    npm = require("node")
    assert (PACKAGE / "node_modules").is_dir(), (
        f"{PACKAGE}/node_modules is missing: run scripts/setup-dev (or `npm ci` in clients/typescript)"
    )
    env = {**os.environ, "SUBAGENTD_PYTHON": sys.executable}
    output = run_client_suite([npm, "test"], PACKAGE, env, TIMEOUT)
    assert "\nℹ fail 0" in output, output[-20000:]
