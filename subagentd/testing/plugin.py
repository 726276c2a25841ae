"""The pytest plugin (entry point `pytest11: subagentd`): the fixtures of subagentd.testing."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest

from subagentd.testing.host import Reply, ScriptedHost
from subagentd.testing.served import WAIT, Served, serve


@pytest.fixture
def subagentd_args() -> list[str]:
    """Serve options for `subagentd_server` (override it: `return ["--max-depth", "2"]`)."""
    return []


@pytest.fixture
def subagentd_server(subagentd_args: list[str]) -> Iterator[Served]:
    """A fresh subagentd (`--db :memory:` unless the args name one), initialized; after the test
    its stdin is closed, and the test fails unless it exits 0."""
    served = serve(subagentd_args)
    yield served
    code = served.close(WAIT)
    if code != 0:
        tail = served.stderr_text().strip()[-2000:]
        pytest.fail(f"subagentd exited with status {code} after the test: {tail}", pytrace=False)


@pytest.fixture
def scripted_host(
    subagentd_server: Served,
) -> Callable[[Mapping[str, Sequence[Reply]]], ScriptedHost]:
    """`scripted_host({"c1": ["done", TurnOutcome("error", "boom")]})`: a ScriptedHost on
    `subagentd_server`."""

    def make(replies: Mapping[str, Sequence[Reply]]) -> ScriptedHost:
        return ScriptedHost(subagentd_server, replies)

    return make
