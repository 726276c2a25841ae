#!/usr/bin/env python3
"""A turn runner for `subagentd --runner`: each subagent turn is one run of a command-line agent.

subagentd writes the turn to stdin as one JSON object {agent_id, turn_id, messages,
instructions?, resume?}; what this prints becomes the turn's output (and, when the subagent
finishes, its closing message to the agent that started it); exit 0 means completed, anything
else error. SIGTERM means the turn was interrupted.

AGENT_COMMAND is the agent to run, e.g. "claude -p" or "llm": any command that reads its
prompt on stdin and prints its answer. Without it this script answers "(dry run) <the last
line of the last message>", to show the plumbing. Each subagent's conversation so far is kept in
RUNNER_STATE (default: a `turns` folder beside the database) so its later turns see the
earlier ones. Messages are rendered with each sender visible (`$SUBAGENTD render`,
docs/rendering.md). The agent may act as its subagent with `$SUBAGENTD tool` (the prompt says
how; SUBAGENTD is the very subagentd that serves); an MCP-capable agent can instead be given
its tools natively (SUBAGENTD_MCP_CONFIG, e.g. AGENT_COMMAND='claude -p --mcp-config
"$SUBAGENTD_MCP_CONFIG"' run through `sh -c`).
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

SUBAGENTD = os.environ.get("SUBAGENTD", "subagentd")  # the serving subagentd (set by it)


def render(*args: str, messages: object = None) -> str:
    """`$SUBAGENTD render`: the messages fenced with their senders, or the guide (--guide)."""
    done = subprocess.run(
        [SUBAGENTD, "render", *args],
        input=json.dumps(messages),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.rstrip("\n")


def state_file(agent_id: str) -> Path:
    db = os.environ.get("SUBAGENTD_DB", "")
    default = Path(db).parent / "turns" if os.path.isabs(db) else Path(tempfile.gettempdir())
    folder = Path(os.environ.get("RUNNER_STATE") or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (hashlib.sha256(agent_id.encode()).hexdigest()[:32] + ".json")


def prompt_of(turn: dict, history: list, messages: str) -> str:
    tool = f"{shlex.quote(SUBAGENTD)} tool"
    parts = [render("--guide")]
    if turn.get("instructions"):
        parts.append(turn["instructions"])
        parts.append(f'To report, run: {tool} report \'{{"output": "<your report>"}}\'')
    if turn.get("resume"):
        parts.append(f'You are the subagent "{turn["resume"]["label"]}", resumed.')
    parts += [f"[{entry['role']}]\n{entry['text']}" for entry in history]
    parts.append(messages)
    return "\n\n".join(parts)


def main() -> int:
    turn = json.load(sys.stdin)
    path = state_file(turn["agent_id"])
    history = json.loads(path.read_text()) if path.exists() else []
    messages = render(messages=turn["messages"])
    prompt = prompt_of(turn, history, messages)
    command = os.environ.get("AGENT_COMMAND")
    if command:
        done = subprocess.run(shlex.split(command), input=prompt, capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            return done.returncode
        answer = done.stdout.strip()
    else:
        last = "\n".join(block["text"] for block in turn["messages"][-1]["content"])
        answer = "(dry run) " + last.strip().splitlines()[-1]
    history.append({"role": "Messages", "text": messages})
    history.append({"role": "You answered", "text": answer})
    path.write_text(json.dumps(history))
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
