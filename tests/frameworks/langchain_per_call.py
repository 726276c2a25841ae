"""Run in the LangChain environment (mcp 1.x): langchain-mcp-adapters' default mode, a session
per tool call (each call starts `subagentd … --detach on` as a new front process), drives two
children that work on after the call that spawned them returned and its session closed; a later
call's `wait_agents` collects both. Prints, as one JSON object, what each call answered.
argv: the project's Python (it runs subagentd), the database, the runtime directory, the file
that lets the children finish."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402

from tests.frameworks import scenario as s  # noqa: E402

python, db, runtime, go = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
command, args = s.server_args(db, python)
connection = {
    "transport": "stdio",
    "command": command,
    "args": [*args, "--detach", "on"],
    "env": {**os.environ, "XDG_RUNTIME_DIR": runtime},  # mcp 1.x passes only a few by default
}


async def call(name: str, arguments: dict[str, Any]) -> list[str]:
    """One tool call in the adapters' default mode: its own session, opened and closed."""
    tools = {t.name: t for t in await MultiServerMCPClient({"sd": connection}).get_tools()}
    answer = await tools[name].ainvoke(arguments)
    return [block["text"] for block in answer] if isinstance(answer, list) else [str(answer)]


async def main() -> dict[str, Any]:
    prompt = json.dumps({"steps": [{"wait_file": str(go)}, {"print": "went on alone"}]})
    said: dict[str, Any] = {}
    said["a"] = await call("spawn_agent", {"label": "a", "prompt": prompt, "child_id": "a"})
    said["b"] = await call("spawn_agent", {"label": "b", "prompt": prompt, "child_id": "b"})
    said["listed"] = await call("list_agents", {})
    go.touch()  # both finish while no session is open
    said["waited"] = await call("wait_agents", {"agent_ids": ["a", "b"], "mode": "all"})
    return said


print(json.dumps(asyncio.run(main())))
