"""LangChain (`create_agent` with a scripted chat model) drives subagentd through
langchain-mcp-adapters on mcp 1.x, in an environment of its own (tests/frameworks/environment.py:
the adapters need mcp<2): the delegation loop of tests/frameworks/scenario.py on a persistent
`client.session()`, an error, a wait its client's timeout cancels, a reconnect, and one call in
the adapters' default mode (a session per call). mcp 1.x logs nothing: subagentd sends an MCP
connection no host notification and writes nothing after its input ends."""

from __future__ import annotations

import json
import sys

from tests.frameworks import scenario as s
from tests.frameworks.environment import run_script


def blocks(answer: dict) -> list[str]:
    return [block["text"] for block in answer["content"]]


def test_langchain_runs_the_delegation_loop_and_reconnects_on_mcp_1(tmp_path):
    db, log = str(tmp_path / "langchain.db"), tmp_path / "log"
    done = run_script("langchain_loop.py", sys.executable, db, str(log))
    assert done.returncode == 0, done.stderr[-5000:]
    said = json.loads(done.stdout)
    first, again = said["first"], said["again"]
    assert {"spawn_agent", "wait_agents", "send_message", "list_agents"} <= set(first["tools"])
    # LangChain shows its model the content blocks; a tool error is a message with status error
    for step, expected in enumerate(s.EXPECTED[: s.CANCEL_STEP]):
        assert [blocks(a) for a in first["seen"][step]] == expected, step
        statuses = [a["status"] for a in first["seen"][step]]
        assert statuses == ["error" if step == 7 else "success"] * len(expected), step
    # mcp 1.x's read timeout ends LangChain's loop with the exception (no tool message); the
    # session then closes, and subagentd ends the wait unanswered: it consumed nothing
    assert len(first["seen"]) == s.CANCEL_STEP
    assert first["outcome"] == (
        "McpError: Timed out while waiting for response to ClientRequest. Waited 5.0 seconds."
    )
    assert again["outcome"] == "finished" and again["final"] == s.FINAL
    assert blocks(again["seen"][0][0]) in [list(w) for w in s.RECONNECT_WAIT]
    assert blocks(again["seen"][1][0]) == [s.RECONNECT_LIST]
    # the default mode: the spawn is answered, not an ExceptionGroup(BrokenResourceError)
    assert [b["text"] for b in said["per_call"]] == ["started subagent c4"]
    assert said["warnings"] == []  # no validation warning of a host notification


def test_langchain_sessions_per_call_through_the_detached_process_collect_work_done_meanwhile(
    tmp_path,
):
    import tempfile

    from tests.clients.test_tasks_ts_sdk_detached import stop_background

    runtime = tempfile.mkdtemp(prefix="sd-", dir="/tmp")  # a socket path stays short
    db, go = str(tmp_path / "per-call.db"), tmp_path / "go"
    try:
        done = run_script("langchain_per_call.py", sys.executable, db, runtime, str(go))
    finally:
        stop_background(runtime)
    assert done.returncode == 0, done.stderr[-5000:]
    said = json.loads(done.stdout)
    assert said["a"] == ["started subagent a"] and said["b"] == ["started subagent b"]
    assert said["listed"] == ["a [running] — a\nb [running] — b"]  # after their calls closed
    finished = (
        "Background subagent {} finished and will do no further work unless you send it more."
    )
    text = "\n".join(said["waited"])
    for child in ("a", "b"):
        assert f"{finished.format(child)}\nIts closing message:\nwent on alone" in text
    assert len(said["waited"]) == 1  # one block: nothing lost to a client that shows the first
    assert text.endswith("\nnone of the subagents waited for is still working")
