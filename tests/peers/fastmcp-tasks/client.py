"""One client process of tests/clients/test_tasks_fastmcp.py: the fastmcp 4 client with
fastmcp-tasks (the 2026-07-28 extension `io.modelcontextprotocol/tasks`) over stdio.

`python client.py first|second|ask <config.json>` prints one JSON line of what it saw. Tasks are
made with `fastmcp_tasks.call_tool_task` (a ToolTask handle: status, wait, result, cancel) with
`_meta["subagentd/task"]: true`; the plain `Client.call_tool` (no hint) is answered at once. A task
is subscribed to with `subscriptions/listen` (`notifications.taskIds`): fastmcp-tasks only
polls, so the request is sent with the SDK session's `send_request`, and `notifications/tasks`
reach the client through a `NotificationBinding` on a subclass of fastmcp-tasks' own client
extension (the SDK's public extension API; a user extension of the same identifier replaces the
built-in one). The second process reads the first's tasks by id with fastmcp-tasks' wire models.
`ask` runs a task whose child asks its parent, answered through the elicitation handler.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, Literal

import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams
from mcp.client.extension import NotificationBinding
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict

TERMINAL = {"completed", "failed", "cancelled"}
WAIT_TERM = json.dumps({"steps": [{"wait_term": True}]})


class TaskNotice(BaseModel):
    """`notifications/tasks` params: a DetailedTask (kept as the wire gave it)."""

    model_config = ConfigDict(extra="allow")


class ListenParams(mcp_types.RequestParams):
    notifications: dict[str, Any]


class ListenRequest(mcp_types.Request[ListenParams, Literal["subscriptions/listen"]]):
    method: Literal["subscriptions/listen"] = "subscriptions/listen"
    params: ListenParams


class TasksWithNotices(TasksClientExtension):
    """fastmcp-tasks' client extension, also observing `notifications/tasks`."""

    def __init__(self, seen: list[dict[str, Any]]) -> None:
        super().__init__(None)
        self.seen = seen

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        async def record(params: TaskNotice) -> None:
            self.seen.append(params.model_dump(by_alias=True))

        return (
            NotificationBinding(
                method="notifications/tasks", params_type=TaskNotice, handler=record
            ),
        )


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content]


def brief(task: Any) -> dict[str, Any]:
    return {
        "status": task.status,
        "statusMessage": task.status_message,
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    }


async def get(client: Client, task_id: str) -> ClientGetTaskResult:
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, ClientGetTaskResult)


async def spawn(client: Client, child: str, prompt: str) -> Any:
    arguments = {"label": child, "prompt": prompt, "child_id": child}
    # subagentd runs a delegation as a task when the call asks for it in its _meta
    return await call_tool_task(client, "spawn_agent", arguments, meta={"subagentd/task": True})


async def listen(client: Client, acks: list[Any], task_ids: list[str]) -> asyncio.Task[Any]:
    """A `subscriptions/listen` stream for these tasks (open until the client closes)."""
    before = len(acks)
    request = ListenRequest(params=ListenParams(notifications={"taskIds": task_ids}))
    stream = asyncio.ensure_future(client.session.send_request(request, mcp_types.Result))
    while len(acks) == before:  # the server acknowledges what it will send
        await asyncio.sleep(0.02)
    return stream


async def notice(seen: list[dict[str, Any]], task_id: str, status: str) -> dict[str, Any]:
    while True:
        for note in seen:
            if note["taskId"] == task_id and note["status"] == status:
                return note
        await asyncio.sleep(0.02)


ASK = {
    "tool": "ask_parent",
    "args": {"question": "Which file: a.py or b.py?", "options": ["a.py", "b.py"]},
}


async def ask_phase(client: Client, asked: list[dict[str, Any]]) -> dict[str, Any]:
    """A task whose runner child asks its parent (the client's root): `ToolTask.result()` polls
    it to `input_required`, answers its `inputRequests` through the client's elicitation
    handler with `tasks/update`, and polls on to the end."""
    task = await spawn(client, "q", json.dumps({"steps": [ASK]}))
    result = await task.wait(state="input_required", timeout=60)
    out: dict[str, Any] = {"waiting": brief(result)}
    done = await task.result()
    out["asked"] = asked
    out["result"] = texts(done)
    out["final"] = brief(await task.status())
    return out


async def main(phase: str, config: dict[str, Any]) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []
    acks: list[Any] = []
    asked: list[dict[str, Any]] = []

    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append({"message": message, "schema": params.requested_schema})
        return {"answer": "b.py"}

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/subscriptions/acknowledged":
            acks.append(root.params.model_dump(by_alias=True, exclude_none=True))

    transport = StdioTransport(command=config["command"], args=config["args"], env=config["env"])
    client = Client(
        transport,
        extensions=[TasksWithNotices(seen)],
        message_handler=on_message,
        elicitation_handler=elicit,
    )
    out: dict[str, Any] = {}
    async with client:
        out["version"] = client.session.protocol_version
        if phase == "ask":
            out.update(await ask_phase(client, asked))
        elif phase == "first":
            a = await spawn(client, "a", config.get("aPrompt", "summarize the logs"))
            b = await spawn(client, "b", config.get("bPrompt", WAIT_TERM))
            out["created"] = [brief(a.create_result), brief(b.create_result)]
            stream = await listen(client, acks, [b.task_id])  # stream B
            out["ack"] = acks[-1]
            # poll A as its pollIntervalMs says, until it is terminal
            polled, out["polls"] = a.create_result, 0
            while polled.status not in TERMINAL:
                if config.get("aPrompt") and out["polls"] == 2:
                    break  # A goes on after the close
                await asyncio.sleep(polled.poll_interval_ms / 1000)
                polled = await a.status()
                out["polls"] += 1
            out["a"] = brief(polled)
            if not config.get("aPrompt"):
                out["aResult"] = texts(await a.result())
            out["b"] = brief(await b.status())
            out["ids"] = {"a": a.task_id, "b": b.task_id}
            stream.cancel()
        else:
            ids = config["ids"]
            for child in ("a", "b") if config.get("bFirst") else ():
                while (await get(client, ids[child])).status not in TERMINAL:
                    await asyncio.sleep(0.1)  # its turn may still be going on without a client
            a, b = await get(client, ids["a"]), await get(client, ids["b"])
            assert a.result is not None and b.result is not None  # both ended: results inline
            out["a"] = brief(a)
            out["aResult"] = [c["text"] for c in a.result["content"]]
            out["b"] = brief(b)
            out["bResult"] = {
                "isError": b.result["isError"],
                "texts": [c["text"] for c in b.result["content"]],
            }
            # stream D to its end through notifications/tasks
            d = await spawn(client, "d", "check the disk")
            stream = await listen(client, acks, [d.task_id])
            told = await asyncio.wait_for(notice(seen, d.task_id, "completed"), 60)
            out["dNotice"] = {k: v for k, v in told.items() if k != "_meta"}
            out["dNoticeMeta"] = told.get("_meta")
            out["dGet"] = (await get(client, d.task_id)).model_dump(
                by_alias=True, exclude_none=True
            )
            stream.cancel()
            # the plain call_tool (no hint): answered at once, as without the extension
            plain = await client.call_tool(
                "spawn_agent", {"label": "e", "prompt": "count the files", "child_id": "e"}
            )
            out["eResult"] = texts(plain)
            # cancel a third task while its child runs
            c = await spawn(client, "c", WAIT_TERM)
            await c.cancel()
            out["cancelled"] = brief(await c.wait(timeout=60))
            try:
                await c.result()
            except ToolError as error:
                out["cResult"] = str(error)
            await c.cancel()  # again: cooperative, acknowledged
            out["cancelAgain"] = "acknowledged"
            try:
                await get(client, "no-such-task")
            except MCPError as error:
                out["missing"] = {"code": error.error.code, "message": error.error.message}
    return out


if __name__ == "__main__":
    phase, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        config = json.load(f)
    print(json.dumps(asyncio.run(main(phase, config))))
