"""The fastmcp 4 client with fastmcp-tasks (the 2026-07-28 extension `io.modelcontextprotocol/tasks`)
drives `subagentd --caller root --runner <the scripted runner>` over stdio, in two client processes
(tests/peers/fastmcp-tasks/client.py): spawn A and B as tasks, poll A to its end, subscribe to B
(`subscriptions/listen`), close the client while B runs; a new client process reads both by id,
streams a task to its end through `notifications/tasks`, makes a plain `call_tool` (answered at
once: no `_meta["subagentd/task"]`), and cancels another.

Closing the client ends its serving process, and with it the turn B was running: B's task is
found by the next client `completed` with an `isError` result carrying the stop notice (in the
extension a tool-level failure is `completed`; `failed` is for JSON-RPC errors, which no
delegation ends in). The task, its state and its result survive; B's work does not. A's result,
completed before the close, is collected by the new client. `scenario` takes extra serve options,
so the same run can go through another way of serving.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.clients.test_tasks_ts_sdk import client_process as run_client
from tests.wire.test_tasks_extension import ANSWER_FORM

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "peers" / "fastmcp-tasks" / "client.py"
RUNNER = shlex.join([sys.executable, str(ROOT / "tests" / "scripts" / "runner.py")])
TIMEOUT = 120
FINISHED = "Background subagent {} finished and will do no further work unless you send it more."
STOPPED = "Background subagent b was stopped before it finished."
CANCELLED = (
    "the task was cancelled (tasks/cancel); subagent c was asked to stop its current turn,"
    " and what it sends later reaches you through wait_agents"
)


def client_process(phase: str, config: dict[str, Any], tmp_path: Path) -> Any:
    return run_client(sys.executable, phase, config, tmp_path, SCRIPT)


def closing(child: str, output: str) -> list[str]:
    """A settled delegation's result: one block (nothing lost to a client that shows the first)."""
    lines = [
        FINISHED.format(child),
        "Its closing message:",
        output,
        "none of the subagents waited for is still working",
    ]
    return ["\n".join(lines)]


def scenario(
    tmp_path: Path,
    serve_options: Sequence[str] = (),
    env: dict[str, str] | None = None,
    between: Callable[[], None] = lambda: None,
    **settings: Any,
) -> tuple[Any, Any]:
    """Both client processes against one database (`between` runs between them); what each
    saw. `settings` go to the client script's config (aPrompt, bPrompt, bFirst)."""
    db = str(tmp_path / "tasks.db")
    args = ["-m", "subagentd", "--db", db, "--caller", "root", "--runner", RUNNER, *serve_options]
    config: dict[str, Any] = {
        "command": sys.executable,
        "args": args,
        "env": {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        **settings,
    }
    first = client_process("first", config, tmp_path)
    between()
    second = client_process("second", {**config, "ids": first["ids"]}, tmp_path)
    return first, second


@pytest.mark.timeout(3 * TIMEOUT)
def test_the_fastmcp_tasks_client_polls_subscribes_reconnects_and_cancels(tmp_path):
    # only the client processes import fastmcp_tasks: importing it turns the extension on for
    # every fastmcp Client in the process (tests/clients/test_frameworks.py runs in this one)
    assert version("fastmcp").startswith("4.") and version("fastmcp-tasks").startswith("4.")
    first, second = scenario(tmp_path)
    working = {"status": "working", "ttlMs": 86_400_000, "pollIntervalMs": 1000}
    assert first["version"] == second["version"] == "2026-07-28"
    assert first["created"] == [
        {**working, "statusMessage": "subagent a is working"},
        {**working, "statusMessage": "subagent b is working"},
    ]
    ids = first["ids"]
    assert first["ack"]["notifications"] == {"taskIds": [ids["b"]]}
    assert first["polls"] >= 1
    assert first["a"] == {**working, "status": "completed", "statusMessage": FINISHED.format("a")}
    assert first["aResult"] == closing("a", "done: summarize the logs")
    assert first["b"]["status"] == "working"  # the client closes while B runs

    assert second["a"] == first["a"]
    assert second["aResult"] == first["aResult"]
    # the close stopped B's turn; the extension's word for a delegation that ended so
    assert second["b"] == {**working, "status": "completed", "statusMessage": STOPPED}
    assert second["bResult"] == {
        "isError": True,
        "texts": [
            STOPPED
            + "\nIt left no closing message.\nnone of the subagents waited for is still working"
        ],
    }
    # D streamed: its notifications/tasks is the DetailedTask tasks/get gives, stamped
    assert second["dNotice"]["status"] == "completed"
    assert [c["text"] for c in second["dNotice"]["result"]["content"]] == closing(
        "d", "done: check the disk"
    )
    assert second["dNotice"] == {k: v for k, v in second["dGet"].items() if k != "resultType"}
    assert list(second["dNoticeMeta"]) == ["io.modelcontextprotocol/subscriptionId"]
    assert second["eResult"] == ["started subagent e"]  # no hint: not a task, at once
    assert second["cancelled"] == {**working, "status": "cancelled", "statusMessage": CANCELLED}
    assert second["cResult"].endswith(" was cancelled")  # fastmcp-tasks' own text
    assert second["cancelAgain"] == "acknowledged"
    assert second["missing"] == {"code": -32602, "message": "task not found: no-such-task"}


@pytest.mark.timeout(3 * TIMEOUT)
def test_through_the_detached_process_a_task_running_at_the_close_completes_without_a_client(
    tmp_path,
):
    from tests.clients.test_tasks_ts_sdk_detached import stop_background

    runtime = tempfile.mkdtemp(prefix="sd-", dir="/tmp")  # a socket path stays short
    go = tmp_path / "go"
    b_prompt = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "b went on alone"}]})
    a_prompt = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "a went on alone"}]})
    try:
        first, second = scenario(
            tmp_path,
            ["--detach", "on"],
            env={"XDG_RUNTIME_DIR": runtime},
            between=go.touch,  # both turns end while no client is connected
            aPrompt=a_prompt,  # A is polled, B subscribed to, and both run at the close
            bPrompt=b_prompt,
            bFirst=True,
        )
    finally:
        stop_background(runtime)
    assert first["polls"] == 2 and first["a"]["status"] == "working"
    assert first["b"]["status"] == "working"  # the client closed while both ran
    assert first["ack"]["notifications"] == {"taskIds": [first["ids"]["b"]]}
    assert second["a"]["status"] == "completed"
    assert second["aResult"] == closing("a", "a went on alone")
    assert second["b"]["status"] == "completed"
    assert second["b"]["statusMessage"] == FINISHED.format("b")
    assert second["bResult"] == {"isError": False, "texts": closing("b", "b went on alone")}
    assert second["cancelled"]["status"] == "cancelled"
    assert second["eResult"] == ["started subagent e"]


@pytest.mark.timeout(2 * TIMEOUT)
def test_a_task_whose_child_asks_is_answered_by_the_elicitation_handler_with_tasks_update(
    tmp_path,
):
    """A runner child calls `subagentd tool ask_parent`; its task is `input_required` with the
    question as an `elicitation/create` in `inputRequests`; fastmcp-tasks' `ToolTask.result()`
    answers it through the client's elicitation handler with `tasks/update`, and the child's
    call returns the answer."""
    db = str(tmp_path / "ask.db")
    args = ["-m", "subagentd", "--db", db, "--caller", "root", "--runner", RUNNER]
    config = {
        "command": sys.executable,
        "args": args,
        "env": {**os.environ, "PYTHONPATH": str(ROOT)},
    }
    out = client_process("ask", config, tmp_path)
    assert out["waiting"] == {
        "status": "input_required",
        "statusMessage": "subagent q asks a question and waits for your answer",
        "ttlMs": 86_400_000,
        "pollIntervalMs": 1000,
    }
    assert out["asked"] == [
        {
            "message": 'Background subagent q ("q") asks you a question and waits for your'
            " answer; its turn goes on once you answer:\nWhich file: a.py or b.py?\nIt offers"
            ' these answers: "a.py", "b.py".',
            "schema": ANSWER_FORM,
        }
    ]
    # the question stays the root's news, as wait_agents would return it, before the closing
    [closed] = closing("q", "ask_parent -> 0: the agent that started you answered: b.py")
    how = (
        "Answer with send_message to q: your whole message is the answer (free text). If nobody"
        " answers within 600 seconds the question is cancelled."
    )
    assert out["result"] == ["\n".join([out["asked"][0]["message"], how, closed])]
    assert out["final"]["status"] == "completed"
