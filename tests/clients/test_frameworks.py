"""Agent frameworks nobody here wrote drive `subagentd --caller root --runner ...` from their own
loops, with a scripted model and the scripted runner (tests/scripts/runner.py): the fastmcp
Client, pydantic-ai (MCPServerStdio with a FunctionModel) and the OpenAI Agents SDK
(MCPServerStdio with a scripted Model). Each plays tests/frameworks/scenario.py: the delegation
loop, an error, a wait its client's timeout cancels, and a reconnect that finds what that wait
left queued. LangChain (mcp 1.x) is tests/clients/test_framework_langchain.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from tests.frameworks import scenario as s


def texts(content: list[Any]) -> list[str]:
    return [block.text for block in content]


def check_first_session(seen: list[list[Any]], log: Path) -> None:
    """`seen[i][j]`: the text blocks the loop got for call j of response i (None for the
    cancelled wait)."""
    for step, expected in enumerate(s.EXPECTED):
        if expected is not None:
            assert seen[step] == expected, step


# --- fastmcp ------------------------------------------------------------------------------


def test_fastmcp_client_runs_the_delegation_loop_and_reconnects(tmp_path):
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    db, log = str(tmp_path / "fastmcp.db"), tmp_path / "log"
    command, args = s.server_args(db)
    seen: list[list[Any]] = []
    errors: list[bool] = []
    structured: list[Any] = []

    async def play(steps: list[list[s.Call]], cancel_step: int | None) -> None:
        async with Client(StdioTransport(command, args, keep_alive=False)) as client:
            for step, calls in enumerate(steps):
                if steps is not s.RECONNECT and step == s.LIST_STEP:
                    s.wait_for_line(log, "waiting")
                said: list[Any] = []
                for name, arguments in calls:
                    if step == cancel_step:
                        try:
                            await client.call_tool(name, arguments, timeout=1)
                        except Exception as exc:  # the client's timeout
                            said.append(f"{type(exc).__name__}: {exc}")
                        continue
                    result = await client.call_tool(name, arguments, raise_on_error=False)
                    said.append(texts(result.content))
                    errors.append(result.is_error)
                    structured.append(result.structured_content)
                seen.append(said)

    anyio.run(play, s.delegation(log), s.CANCEL_STEP)
    assert seen[s.CANCEL_STEP] == ["MCPError: Request 'tools/call' timed out"]
    seen[s.CANCEL_STEP] = None
    check_first_session(seen, log)
    assert errors[8] is True and sum(errors) == 1  # the send to "nobody", as fastmcp has it
    assert structured[0] == {"child_id": "c1", "text": "started subagent c1"}

    seen.clear()
    anyio.run(play, s.RECONNECT, None)
    assert seen[0][0] in s.RECONNECT_WAIT
    assert seen[1] == [[s.RECONNECT_LIST]]


# --- pydantic-ai ----------------------------------------------------------------------------


def pydantic_ai_said(part: Any) -> Any:
    """What pydantic-ai put before its model for one tool call: a tool return's content, or a
    retry prompt's text (a tool error)."""
    from pydantic_ai.messages import RetryPromptPart, ToolReturnPart

    if isinstance(part, ToolReturnPart):
        return part.content
    assert isinstance(part, RetryPromptPart), part
    return ("retry", part.content)


def test_pydantic_ai_runs_the_delegation_loop_and_reconnects(tmp_path):
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    db, log = str(tmp_path / "pydantic-ai.db"), tmp_path / "log"
    command, args = s.server_args(db)

    def scripted(steps: list[list[s.Call]], seen: list[list[Any]], tools: list[list[str]]):
        def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
            step = sum(isinstance(m, ModelResponse) for m in messages)
            tools.append([t.name for t in info.function_tools])
            last = messages[-1]
            if step:  # what the previous response's calls came back as
                assert isinstance(last, ModelRequest)
                seen.append([pydantic_ai_said(p) for p in last.parts])
            if step == len(steps):
                return ModelResponse(parts=[TextPart(s.FINAL)])
            if steps is not s.RECONNECT and step == s.LIST_STEP:
                s.wait_for_line(log, "waiting")
            return ModelResponse(
                parts=[
                    ToolCallPart(name, arguments, tool_call_id=f"call-{step}-{i}")
                    for i, (name, arguments) in enumerate(steps[step])
                ]
            )

        return FunctionModel(model)

    async def play(steps: list[list[s.Call]], seen: list[list[Any]], tools: list[list[str]]):
        # the client's read timeout: longer than any step but the wait it cancels
        toolset = MCPToolset(StdioTransport(command, args, keep_alive=False), read_timeout=5)
        agent = Agent(scripted(steps, seen, tools), toolsets=[toolset])
        async with agent:
            return await agent.run("Delegate the log work.")

    first: list[list[Any]] = []
    tools: list[list[str]] = []
    try:
        anyio.run(play, s.delegation(log), first, tools)
        outcome = "finished"
    except Exception as exc:  # the cancelled wait ends the run (see below)
        outcome = f"{type(exc).__name__}: {exc}"
    assert tools, outcome
    assert {"spawn_agent", "wait_agents", "send_message", "list_agents"} <= set(tools[0])
    # pydantic-ai shows its model structuredContent: each one carries the texts
    as_text = [[r["text"] if isinstance(r, dict) else r for r in step] for step in first]
    for step, expected in enumerate(s.EXPECTED[: s.CANCEL_STEP]):
        # a tool error comes back as its text (no structuredContent), as a tool return
        wanted = ["\n".join(blocks) for blocks in expected]
        assert as_text[step] == wanted, step
    assert first[1][0]["agents"] == [
        {
            "agent_id": "c1",
            "status": "ready",
            "reason": "completed",
            "output": "done: Summarize the logs.",
        }
    ]
    assert len(first) == s.CANCEL_STEP + 1
    assert first[s.CANCEL_STEP] == ["Request 'tools/call' timed out"], outcome
    assert outcome == "finished"

    again: list[list[Any]] = []
    anyio.run(play, s.RECONNECT, again, [])
    assert again[0][0]["text"].split("\n") in ["\n".join(w).split("\n") for w in s.RECONNECT_WAIT]
    assert again[1][0]["text"] == s.RECONNECT_LIST


# --- the OpenAI Agents SDK ----------------------------------------------------------------------


def test_openai_agents_runs_the_delegation_loop_and_reconnects(tmp_path):
    from agents import Agent, Runner
    from agents.items import ModelResponse
    from agents.mcp import MCPServerStdio
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    db, log = str(tmp_path / "openai-agents.db"), tmp_path / "log"
    command, args = s.server_args(db)

    class Scripted(Model):
        """A model that answers from a script, and keeps what it was shown for each call."""

        def __init__(self, steps: list[list[s.Call]]) -> None:
            self.steps = steps
            self.step = 0
            self.seen: list[list[Any]] = []
            self.tools: list[list[str]] = []

        async def get_response(
            self, system_instructions, input, model_settings, tools, *rest, **kw
        ):
            self.tools.append([t.name for t in tools])
            if self.step:  # the outputs of the previous response's calls, in order
                wanted = {
                    f"call-{self.step - 1}-{i}" for i in range(len(self.steps[self.step - 1]))
                }
                outputs = {
                    item["call_id"]: item["output"]
                    for item in input
                    if isinstance(item, dict) and item.get("type") == "function_call_output"
                }
                self.seen.append([outputs[c] for c in sorted(wanted)])
            step, self.step = self.step, self.step + 1
            if step == len(self.steps):
                text = ResponseOutputText(type="output_text", text=s.FINAL, annotations=[])
                message = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed", content=[text]
                )
                return ModelResponse(output=[message], usage=Usage(), response_id=None)
            if self.steps is not s.RECONNECT and step == s.LIST_STEP:
                s.wait_for_line(log, "waiting")
            calls = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call-{step}-{i}",
                    name=name,
                    arguments=json.dumps(arguments),
                )
                for i, (name, arguments) in enumerate(self.steps[step])
            ]
            return ModelResponse(output=calls, usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    async def play(model: Scripted) -> Any:
        # the SDK's default timeout is 5 s, below any useful wait: raise it (README, MCP section);
        # here 5 s is kept, longer than every step but the wait it cancels
        server = MCPServerStdio(
            params={"command": command, "args": args}, client_session_timeout_seconds=5
        )
        async with server:
            agent = Agent(
                name="delegator", instructions="Delegate.", model=model, mcp_servers=[server]
            )
            return await Runner.run(agent, "Delegate the log work.", max_turns=20)

    first = Scripted(s.delegation(log))
    result = anyio.run(play, first)
    assert result.final_output == s.FINAL
    assert {"spawn_agent", "wait_agents", "send_message", "list_agents"} <= set(first.tools[0])
    # the SDK hands its model the content blocks (text only), an error's text as a tool output
    blocks = [
        [[b["text"] for b in out] if isinstance(out, list) else out for out in step]
        for step in first.seen
    ]
    for step, expected in enumerate(s.EXPECTED):
        if expected is not None:
            assert blocks[step] == expected, step
    # its client timeout: the model is told to try again (the wait consumed nothing)
    assert blocks[s.CANCEL_STEP] == ["An error occurred while running the tool. Please try again."]

    again = Scripted(s.RECONNECT)
    assert anyio.run(play, again).final_output == s.FINAL
    waited, listed = [[b["text"] for b in out] for out in again.seen[0]], again.seen[1]
    assert waited[0] in [list(w) for w in s.RECONNECT_WAIT]
    assert [b["text"] for b in listed[0]] == [s.RECONNECT_LIST]
