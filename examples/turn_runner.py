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
earlier ones (else `$XDG_STATE_HOME/subagentd/turns`, else `~/.local/state/subagentd/turns`):
a directory of the user's own, mode 0700, never a shared one; a history file is opened
without following symlinks and written whole (a new 0600 file renamed into place).
Messages are rendered with each sender visible (`$SUBAGENTD render`,
docs/rendering.md). The agent may act as its subagent with `$SUBAGENTD tool` (the prompt says
how; SUBAGENTD is the very subagentd that serves); an MCP-capable agent can instead be given
its tools natively (SUBAGENTD_MCP_CONFIG, e.g. AGENT_COMMAND='claude -p --mcp-config
"$SUBAGENTD_MCP_CONFIG"' run through `sh -c`).
"""

import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
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


class PrivateStateError(Exception):
    """The state directory is not private to this user: nothing is read from or written to it."""


def state_dir() -> Path:
    """The histories' directory, created 0700; refused unless it is a real directory this user
    owns that nobody else may enter."""
    db = os.environ.get("SUBAGENTD_DB", "")
    if os.environ.get("RUNNER_STATE"):
        folder = Path(os.environ["RUNNER_STATE"])
    elif os.path.isabs(db):
        folder = Path(db).parent / "turns"
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        folder = Path(base) / "subagentd" / "turns"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise PrivateStateError(f"{folder} is not a directory (a symlink is not followed)")
    if info.st_uid != os.getuid():
        raise PrivateStateError(f"{folder} belongs to another user")
    if info.st_mode & 0o077:
        raise PrivateStateError(f"{folder} is open to group or others: chmod 700 it")
    return folder


def state_file(agent_id: str) -> Path:
    return state_dir() / (hashlib.sha256(agent_id.encode()).hexdigest()[:32] + ".json")


def read_history(path: Path) -> list:
    """The history kept at `path` (none yet: empty); a symlink or another user's file there
    is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise PrivateStateError(f"{path} cannot be read safely: {exc.strerror}") from None
    with os.fdopen(fd, encoding="utf-8") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise PrivateStateError(f"{path} is not a file of this user's")
        return json.load(file)


def write_history(path: Path, history: list) -> None:
    """A new 0600 file (created exclusively: never through a link), renamed over `path`."""
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(history, file)
    os.replace(fresh, path)


def ask_parent(question: str) -> str:
    """`$SUBAGENTD tool ask_parent`: blocks until the agent that started this one answers (or
    the question ends unanswered); its text either way."""
    done = subprocess.run(
        [SUBAGENTD, "tool", "ask_parent", json.dumps({"question": question})],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or done.stderr.strip()


def prompt_of(turn: dict, history: list, messages: str) -> str:
    tool = f"{shlex.quote(SUBAGENTD)} tool"
    parts = [render("--guide")]
    if turn.get("instructions"):
        parts.append(turn["instructions"])
        parts.append(f'To report, run: {tool} report \'{{"output": "<your report>"}}\'')
    if turn.get("resume"):
        parts.append(f'You are the subagent "{turn["resume"]["label"]}", resumed.')
    parts.append(  # the call blocks until the agent that started this one answers
        "If you cannot go on well without a decision, ask the agent that started you and wait"
        f' for its answer: {tool} ask_parent \'{{"question": "<your question>"}}\''
    )
    parts += [f"[{entry['role']}]\n{entry['text']}" for entry in history]
    parts.append(messages)
    return "\n\n".join(parts)


def main() -> int:
    turn = json.load(sys.stdin)
    try:
        path = state_file(turn["agent_id"])
        history = read_history(path)
    except PrivateStateError as exc:
        print(f"turn_runner: {exc}", file=sys.stderr)
        return 2
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
        line = last.strip().splitlines()[-1]
        if line.startswith("ask: "):  # the dry run shows a child asking its parent
            line = ask_parent(line[len("ask: ") :])
        answer = "(dry run) " + line
    history.append({"role": "Messages", "text": messages})
    history.append({"role": "You answered", "text": answer})
    write_history(path, history)
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
