"""A hostile ACP agent for the tests: raw JSON-RPC lines on stdin and stdout, no SDK, so it can
do what a well-behaved agent never does.

At start it writes its pid to ACP_AGENT_STATE/pids (one a line). If ACP_AGENT_STATE/silent-initialize
exists, the first process to remove it never answers `initialize` (it keeps reading). Sessions are
`s-1`, `s-2`, … Each `session/prompt` acts on the text of its last content block (the fence lines
of a rendered message dropped): plain text is answered `done: <text>`; a JSON object is one of
  {"silent": true}         never answer the prompt, ignore `session/cancel` (the session id is
                           appended to ACP_AGENT_STATE/silent)
  {"flood": n}             n `tool_call` updates, then end_turn
  {"noise": n}             n lines that are not JSON, then say "after the noise", end_turn
  {"chunks": n, "size": s, "char"?: c}
                           n message chunks of s characters c (default "x"), then end_turn
  {"title": s}             a tool call whose title is s bytes, then end_turn
  {"line": s}              one message chunk on a line of about s bytes, then end_turn
  {"stale": n}             n updates of the session opened before this one (its turn ended),
                           then say "after the stale updates", end_turn
  {"permissions": n, "name": s}
                           n `session/request_permission`s at once, each with an option `allow`
                           whose name is s characters and an option `reject`; each answer is
                           appended to ACP_AGENT_STATE/answers (one JSON line); the prompt ends
                           end_turn once all n are answered (or cancelled on `session/cancel`)
Any other prompt ends cancelled on `session/cancel`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STATE = Path(os.environ.get("ACP_AGENT_STATE", "."))
out = sys.stdout.buffer


def send(message: dict) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def update(session: str, body: dict) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session, "update": body},
        }
    )


def say(session: str, text: str) -> None:
    update(
        session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    )


def end(request_id: object, reason: str = "end_turn") -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": reason}})


def last_text(params: dict) -> str:
    blocks = params.get("prompt") or [{}]
    lines = str(blocks[-1].get("text", "")).splitlines()
    if len(lines) >= 2 and lines[0].startswith("<message-") and lines[-1].startswith("</message-"):
        return "\n".join(lines[1:-1])
    return "\n".join(lines)


def prompt(request_id: object, session: str, text: str) -> bool:
    """Act on the prompt; False when it stays open (cancelled later, or never answered)."""
    try:
        command = json.loads(text)
    except ValueError:
        command = None
    if not isinstance(command, dict):
        say(session, f"done: {text}")
        end(request_id)
        return True
    if command.get("silent"):
        silent.add(request_id)
        with open(STATE / "silent", "a") as log:
            log.write(f"{session}\n")
        return False
    if "flood" in command:
        for n in range(command["flood"]):
            update(session, {"sessionUpdate": "tool_call", "toolCallId": f"t{n}", "title": "flood"})
    elif "noise" in command:
        out.write(b"this is not JSON\n" * command["noise"])
        say(session, "after the noise")
    elif "chunks" in command:
        for _ in range(command["chunks"]):
            say(session, command.get("char", "x") * command["size"])
    elif "title" in command:
        update(
            session,
            {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "T" * command["title"]},
        )
    elif "line" in command:
        say(session, "y" * command["line"])
    elif "permissions" in command:
        options = [
            {"optionId": "allow", "name": "A" * command["name"], "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ]
        for n in range(command["permissions"]):
            call = {"toolCallId": f"p{n}", "title": f"step {n}", "kind": "edit"}
            params = {"sessionId": session, "toolCall": call, "options": options}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": f"perm-{n}",
                    "method": "session/request_permission",
                    "params": params,
                }
            )
        asking[request_id] = command["permissions"]
        return False
    elif "stale" in command:
        before = f"s-{int(session.split('-')[1]) - 1}"
        for n in range(command["stale"]):
            update(before, {"sessionUpdate": "tool_call", "toolCallId": f"l{n}", "title": "late"})
        say(session, "after the stale updates")
    else:
        return False
    end(request_id)
    return True


silent: set[object] = set()
asking: dict[object, int] = {}  # a prompt's id -> its permission requests not yet answered


def main() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")
    try:
        (STATE / "silent-initialize").unlink()
        mute_initialize = True
    except FileNotFoundError:
        mute_initialize = False
    sessions = 0
    open_prompts: dict[str, object] = {}  # session -> the id of its prompt still open
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            if not mute_initialize:
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "result": {"protocolVersion": 1, "agentCapabilities": {}},
                    }
                )
        elif method == "session/new":
            sessions += 1
            send({"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": f"s-{sessions}"}})
        elif method == "session/prompt":
            session = params["sessionId"]
            if not prompt(request_id, session, last_text(params)):
                open_prompts[session] = request_id
        elif method == "session/cancel":
            waiting = open_prompts.pop(str(params.get("sessionId")), None)
            if waiting is not None and waiting not in silent:
                end(waiting, "cancelled")
        elif method is None and str(request_id).startswith("perm-"):
            with open(STATE / "answers", "a") as log:
                log.write(json.dumps({"id": request_id, **message.get("result", {})}) + "\n")
            for prompt_id, left in list(asking.items()):
                asking[prompt_id] = left - 1
                if left == 1:
                    del asking[prompt_id]
                    if prompt_id in open_prompts.values():
                        session = next(s for s, p in open_prompts.items() if p == prompt_id)
                        del open_prompts[session]
                        end(prompt_id)
        elif request_id is not None and method is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}})


if __name__ == "__main__":
    main()
