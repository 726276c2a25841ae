"""Run in the LangChain environment (mcp 1.x): LangChain's `create_agent` with a scripted chat
model drives subagentd through langchain-mcp-adapters, on a persistent `client.session()`, and
plays tests/frameworks/scenario.py; then one tool call in the adapters' default mode (a session
per call). Prints, as one JSON object, what the agent loop saw and every warning the mcp SDK
logged. argv: the project's Python (it runs subagentd), the database, the runner log."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402

from tests.frameworks import scenario as s  # noqa: E402

python, db, log = sys.argv[1], sys.argv[2], Path(sys.argv[3])
warnings: list[str] = []


class Collect(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        warnings.append(f"{record.name}: {record.getMessage()[:200]}")


logging.getLogger().addHandler(Collect(level=logging.WARNING))


class Scripted(BaseChatModel):
    """A chat model answering from a script; it keeps the tool messages it was shown."""

    steps: list[Any]
    seen: list[Any] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any):
        step = sum(isinstance(m, AIMessage) for m in messages)
        if step:
            answers: list[Any] = []
            for m in messages[::-1]:
                if not isinstance(m, ToolMessage):
                    break
                answers.insert(0, {"content": m.content, "status": m.status})
            self.seen.append(answers)
        if step == len(self.steps):
            message = AIMessage(content=s.FINAL)
        else:
            if self.steps is not s.RECONNECT and step == s.LIST_STEP:
                s.wait_for_line(log, "waiting")
            calls = [
                {"name": name, "args": arguments, "id": f"call-{step}-{i}", "type": "tool_call"}
                for i, (name, arguments) in enumerate(self.steps[step])
            ]
            message = AIMessage(content="", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


def client() -> MultiServerMCPClient:
    command, args = s.server_args(db, python)
    # mcp 1.x's read timeout: longer than every step but the wait it cancels
    kwargs = {"read_timeout_seconds": timedelta(seconds=5)}
    connection = {"transport": "stdio", "command": command, "args": args, "session_kwargs": kwargs}
    return MultiServerMCPClient({"subagentd": connection})


async def play(steps: list[Any]) -> dict[str, Any]:
    model = Scripted(steps=steps, seen=[])
    outcome = "finished"
    async with client().session("subagentd") as session:  # one session for the whole run
        tools = await load_mcp_tools(session)
        agent = create_agent(model, tools)
        try:
            result = await agent.ainvoke({"messages": [HumanMessage("Delegate the log work.")]})
            final = result["messages"][-1].content
        except Exception as exc:  # how a timed-out call ends LangChain's loop
            outcome, final = f"{type(exc).__name__}: {exc}", None
    return {
        "seen": model.seen,
        "outcome": outcome,
        "final": final,
        "tools": [t.name for t in tools],
    }


async def per_call() -> Any:
    """The adapters' default: each tool call opens (and closes) a session of its own."""
    tools = {t.name: t for t in await client().get_tools()}
    return await tools["spawn_agent"].ainvoke(
        {"label": "alone", "prompt": "Count.", "child_id": "c4"}
    )


first = asyncio.run(play(s.delegation(log)))
again = asyncio.run(play(s.RECONNECT))
spawned = asyncio.run(per_call())
print(json.dumps({"first": first, "again": again, "per_call": spawned, "warnings": warnings}))
