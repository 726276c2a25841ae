#!/usr/bin/env python3
"""A turn runner for `subagentd --runner`: each subagent turn is one run of a command-line agent.

subagentd writes the turn to stdin as one JSON object {agent_id, turn_id, messages,
instructions?, resume?}; what this prints becomes the turn's output (and, when the subagent
finishes, its closing message to the agent that started it); exit 0 means completed, anything
else error. SIGTERM means the turn was interrupted.

AGENT_COMMAND is the agent to run, e.g. "claude -p" or "llm": any command that reads its
prompt on stdin and prints its answer. Without it this script answers "(dry run) <the last
line of the prompt>", to show the plumbing. Each subagent's conversation so far is kept in
RUNNER_STATE (default: a `turns` folder beside the database) so its later turns see the
earlier ones. The agent may act as its subagent with `subagentd tool` (the prompt says how).
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HEADINGS = {
    "coordinator": "Message from the agent that started you",
    "subagent-report": "Report from one of your subagents",
    "subagent-settled": "Notice about one of your subagents",
    "user": "Message from the user",
}


def state_file(agent_id: str) -> Path:
    db = os.environ.get("SUBAGENTD_DB", "")
    default = Path(db).parent / "turns" if os.path.isabs(db) else Path(tempfile.gettempdir())
    folder = Path(os.environ.get("RUNNER_STATE") or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (hashlib.sha256(agent_id.encode()).hexdigest()[:32] + ".json")


def prompt_of(turn: dict, history: list) -> str:
    tool = f"{shlex.quote(sys.executable)} -m subagentd tool"
    parts = []
    if turn.get("instructions"):
        parts.append(turn["instructions"])
        parts.append(f'To report, run: {tool} report \'{{"output": "<your report>"}}\'')
    if turn.get("resume"):
        parts.append(f'You are the subagent "{turn["resume"]["label"]}", resumed.')
    parts += [f"[{entry['role']}]\n{entry['text']}" for entry in history]
    for message in turn["messages"]:
        heading = HEADINGS.get(message["source"]["kind"], "Message")
        text = "\n".join(block["text"] for block in message["content"])
        parts.append(f"[{heading}]\n{text}")
    return "\n\n".join(parts)


def main() -> int:
    turn = json.load(sys.stdin)
    path = state_file(turn["agent_id"])
    history = json.loads(path.read_text()) if path.exists() else []
    prompt = prompt_of(turn, history)
    command = os.environ.get("AGENT_COMMAND")
    if command:
        done = subprocess.run(shlex.split(command), input=prompt, capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            return done.returncode
        answer = done.stdout.strip()
    else:
        answer = "(dry run) " + prompt.strip().splitlines()[-1]
    for message in turn["messages"]:
        text = "\n".join(block["text"] for block in message["content"])
        history.append({"role": HEADINGS.get(message["source"]["kind"], "Message"), "text": text})
    history.append({"role": "You answered", "text": answer})
    path.write_text(json.dumps(history))
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
