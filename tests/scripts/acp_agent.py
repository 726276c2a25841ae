"""A scripted ACP agent for the tests, built on the `agent-client-protocol` SDK (its Agent side).

It keeps each session in ACP_AGENT_STATE/sessions/<id>.json (so a restarted agent can load them),
appends its pid to ACP_AGENT_STATE/initialized.log at each `initialize`, and advertises
`loadSession` unless ACP_AGENT_NO_LOAD is set. Each prompt acts on the text of its
last content block (the last message, rendered: its fence lines are dropped): plain text is
answered `done: <text>`; a JSON object {"acp": [...]} runs each step in order:
  {"say": s}              an agent message, streamed as two chunks
  {"think": s}            a thought chunk
  {"plan": [s, ...]}      a plan update
  {"tool": name, "args": {...}}
                          call the tool through the session's MCP server (the official MCP SDK
                          client), reported as a tool call with the result's text as its content
  {"tools": true}         say the tools the session's MCP server lists
  {"permission": title, "kind"?: k, "options"?: [[id, name, kind], ...], "write"?: path}
                          ask the client (default options: yes/Allow/allow_once and
                          no/Reject/reject_once); say `permission <outcome> <option id>`; with
                          "write", the request is for a tool call writing "done" to path, which
                          runs (`wrote <file name>`) only when an allow option was selected
                          (else `not written`); with "log", the outcome is appended to that file
  {"elicit": message, "schema"?: {...}, "url"?: u}
                          ask the client with `elicitation/create` (a form of that requested
                          schema, session-scoped; with "url", a URL elicitation instead); say
                          `elicited <action> <content as sorted JSON>`
  {"wait_cancel": path}   append "waiting" to path, wait for session/cancel, stop `cancelled`
  {"stop": reason}        stop with that stopReason now
  {"pid": path}           write this process's pid to path
  {"spawn": path}         start a process in this one's group that sleeps (what a real agent
                          starts, a tool or an MCP server, and that outlives it); its pid to path
  {"history": true}       say how many prompts this session had before, and their last lines
  {"usage": {...}}        the prompt's reply carries this `usage` (ACP field names, e.g.
                          inputTokens: the session's running totals, as the schema says)
  {"cost": [amount, currency]}
                          a `usage_update` with that cumulative session cost
Every prompt is kept in the session's history (session/load replays them as user chunks), with
all its blocks (`blocks`: what a model would have been shown).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import plan_entry
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    ClientCapabilities,
    Cost,
    HttpMcpServer,
    Implementation,
    McpServerStdio,
    PermissionOption,
    SseMcpServer,
    ToolCallStatus,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio

STATE = Path(os.environ.get("ACP_AGENT_STATE", "."))


def load_session(session_id: str) -> dict[str, Any] | None:
    path = STATE / "sessions" / f"{session_id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def save_session(session_id: str, session: dict[str, Any]) -> None:
    folder = STATE / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{session_id}.json.tmp").write_text(json.dumps(session))
    (folder / f"{session_id}.json.tmp").replace(folder / f"{session_id}.json")


def last_message(prompt: list[Any]) -> str:
    text = getattr(prompt[-1], "text", "") if prompt else ""
    lines = text.splitlines()
    if len(lines) >= 2 and lines[0].startswith("<message-") and lines[-1].startswith("</message-"):
        return "\n".join(lines[1:-1])
    return text


class ScriptedAgent(Agent):
    def __init__(self) -> None:
        self.conn: Any = None
        self.servers: dict[str, Any] = {}  # session id -> its MCP server (McpServerStdio)
        self.cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        STATE.mkdir(parents=True, exist_ok=True)
        with open(STATE / "initialized.log", "a") as log:
            log.write(f"{os.getpid()}\n")
        loads = not os.environ.get("ACP_AGENT_NO_LOAD")
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=loads),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = "s-" + uuid.uuid4().hex[:12]
        save_session(session_id, {"cwd": cwd, "prompts": [], "blocks": []})
        self.servers[session_id] = mcp_servers[0] if mcp_servers else None
        return NewSessionResponse(session_id=session_id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        session = load_session(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id})
        self.servers[session_id] = mcp_servers[0] if mcp_servers else None
        for text in session["prompts"]:
            await self.conn.session_update(session_id, update_user_message_text(text))
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def say(self, session_id: str, text: str) -> None:
        half = len(text) // 2
        for part in (text[:half], text[half:]):
            await self.conn.session_update(session_id, update_agent_message_text(part))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = load_session(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id})
        history = list(session["prompts"])
        text = last_message(prompt)
        session["prompts"].append(text)
        session["blocks"].append([getattr(block, "text", None) for block in prompt])
        save_session(session_id, session)
        self.cancelled[session_id] = asyncio.Event()
        try:
            plan = json.loads(text)
        except ValueError:
            plan = None
        if not isinstance(plan, dict) or "acp" not in plan:
            await self.say(session_id, f"done: {text}")
            return PromptResponse(stop_reason="end_turn")
        usage = None
        for step in plan["acp"]:
            if "usage" in step:
                usage = Usage.model_validate(step["usage"])
            elif "cost" in step:
                amount, currency = step["cost"]
                cost = Cost(amount=amount, currency=currency)
                update = UsageUpdate(session_update="usage_update", used=1, size=1000, cost=cost)
                await self.conn.session_update(session_id, update)
            elif "say" in step:
                await self.say(session_id, step["say"])
            elif "think" in step:
                await self.conn.session_update(session_id, update_agent_thought_text(step["think"]))
            elif "plan" in step:
                entries = [plan_entry(e, priority="medium", status="pending") for e in step["plan"]]
                await self.conn.session_update(session_id, update_plan(entries))
            elif "tool" in step:
                call_id = "call-" + uuid.uuid4().hex[:8]
                name = step["tool"]
                await self.conn.session_update(
                    session_id, start_tool_call(call_id, name, kind="other", status="in_progress")
                )
                said, failed = await self.call_tool(session_id, name, step.get("args", {}))
                status: ToolCallStatus = "failed" if failed else "completed"
                content = [tool_content(text_block(said))]
                await self.conn.session_update(
                    session_id, update_tool_call(call_id, status=status, content=content)
                )
            elif "tools" in step:
                names = await self.list_tools(session_id)
                await self.say(session_id, "tools: " + ",".join(names))
            elif "permission" in step:
                await self.ask_permission(session_id, step)
            elif "elicit" in step:
                await self.elicit(session_id, step)
            elif "wait_cancel" in step:
                await self.say(session_id, "waiting")
                with open(step["wait_cancel"], "a") as f:
                    f.write("waiting\n")
                await self.cancelled[session_id].wait()
                return PromptResponse(stop_reason="cancelled")
            elif "stop" in step:
                return PromptResponse(stop_reason=step["stop"], usage=usage)
            elif "pid" in step:
                Path(step["pid"]).write_text(str(os.getpid()))
            elif "spawn" in step:
                sleeper = subprocess.Popen(
                    [sys.executable, "-c", "import time; time.sleep(600)"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                Path(step["spawn"]).write_text(str(sleeper.pid))
            elif "history" in step:
                lines = [h.splitlines()[-1] if h else "" for h in history]
                await self.say(session_id, f"history: {len(history)}: " + " | ".join(lines))
        return PromptResponse(stop_reason="end_turn", usage=usage)

    async def elicit(self, session_id: str, step: dict[str, Any]) -> None:
        from acp.schema import ElicitationFormSessionMode, ElicitationUrlSessionMode

        mode: Any
        if "url" in step:
            mode = ElicitationUrlSessionMode.model_validate(
                {"sessionId": session_id, "elicitationId": "e1", "url": step["url"]}
            )
        else:
            mode = ElicitationFormSessionMode.model_validate(
                {"sessionId": session_id, "requestedSchema": step["schema"]}
            )
        answer = await self.conn.create_elicitation(step["elicit"], mode)
        content = json.dumps(getattr(answer, "content", None), sort_keys=True)
        await self.say(session_id, f"elicited {answer.action} {content}")

    async def ask_permission(self, session_id: str, step: dict[str, Any]) -> None:
        given = step.get("options") or [
            ["yes", "Allow", "allow_once"],
            ["no", "Reject", "reject_once"],
        ]
        options = [PermissionOption(option_id=i, name=n, kind=k) for i, n, k in given]
        call_id = "perm-" + uuid.uuid4().hex[:8]
        kind = step.get("kind")
        if "write" in step:
            await self.conn.session_update(
                session_id, start_tool_call(call_id, step["permission"], kind=kind or "edit")
            )
        call = ToolCallUpdate(tool_call_id=call_id, title=step["permission"], kind=kind)
        answer = await self.conn.request_permission(
            session_id=session_id, tool_call=call, options=options
        )
        outcome = answer.outcome
        chosen = getattr(outcome, "option_id", "-")
        await self.say(session_id, f"permission {outcome.outcome} {chosen}")
        if "log" in step:
            with open(step["log"], "a") as log:
                log.write(f"{outcome.outcome} {chosen}\n")
        if "write" not in step:
            return
        allowed = any(o.option_id == chosen and o.kind.startswith("allow") for o in options)
        if allowed:
            Path(step["write"]).write_text("done")
        status: ToolCallStatus = "completed" if allowed else "failed"
        await self.conn.session_update(session_id, update_tool_call(call_id, status=status))
        await self.say(
            session_id, f"wrote {Path(step['write']).name}" if allowed else "not written"
        )

    def _params(self, session_id: str) -> Any:
        from mcp.client.stdio import StdioServerParameters

        server = self.servers[session_id]
        env = {"PATH": os.environ.get("PATH", "")}
        env.update({v.name: v.value for v in server.env})
        return StdioServerParameters(command=server.command, args=list(server.args), env=env)

    async def call_tool(self, session_id: str, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        from mcp import Client

        async with Client(self._params(session_id)) as client:
            result = await client.call_tool(name, args)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return text, bool(result.is_error)

    async def list_tools(self, session_id: str) -> list[str]:
        from mcp import Client

        async with Client(self._params(session_id)) as client:
            tools = await client.list_tools()
        return [tool.name for tool in tools.tools]


if __name__ == "__main__":
    sys.stderr.write("scripted ACP agent started\n")
    # acp's Agent is a Protocol subclassed for its defaults: the methods this script does not
    # answer (authenticate, set_session_mode, ...) keep the Protocol's bodies, which mypy counts
    # as abstract; at run time the class instantiates (the ACP runner tests start it).
    asyncio.run(run_agent(ScriptedAgent()))  # type: ignore[abstract]
