"""`subagentd tool NAME --caller ID 'JSON-ARGS'`: a runner's command acts as its own agent.

The call is relayed to the serving process over SUBAGENTD_SOCKET with SUBAGENTD_TOKEN (see
runners/tool_socket.py), which runs it by the tools' own rules. Exit status: 0 the tool succeeded (its
text on stdout), 1 the tool refused (its text on stderr), 2 the call was not made (usage, no
runner environment, a refused token).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

NOT_IN_RUNNER = (
    "subagentd tool: {name} is not set; this command works inside a turn that `subagentd serve"
    " --runner` started (it sets SUBAGENTD_SOCKET and SUBAGENTD_TOKEN)"
)


def call(
    name: str,
    arguments: str,
    caller: str | None,
    socket_path: str | None,
    token: str | None,
    idempotency_key: str | None = None,
) -> tuple[int, dict[str, Any] | str]:
    """The exit status, and the tool's result (or why there is none)."""
    for variable, value in (("SUBAGENTD_SOCKET", socket_path), ("SUBAGENTD_TOKEN", token)):
        if not value:
            return 2, NOT_IN_RUNNER.format(name=variable)
    if not caller:
        return 2, "subagentd tool: --caller (or SUBAGENTD_AGENT_ID) names the agent to act as"
    try:
        args = json.loads(arguments)
    except ValueError as exc:
        return 2, f"subagentd tool: JSON-ARGS is not JSON ({exc})"
    meta = {"subagentd/caller": caller, "subagentd/token": token}
    if idempotency_key is not None:
        meta["subagentd/idempotency_key"] = idempotency_key
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {  # _meta first: the relay looks for the token before reading much more
            "name": name,
            "_meta": meta,
            "arguments": args,
        },
    }
    assert socket_path is not None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(socket_path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = read_reply(conn)
    except OSError as exc:
        return 2, f"subagentd tool: cannot reach the serving subagentd at {socket_path} ({exc})"
    if reply is None:
        return 2, "subagentd tool: the serving subagentd closed the connection without answering"
    if "error" in reply:
        return 2, f"subagentd tool: {reply['error'].get('message', reply['error'])}"
    result: dict[str, Any] = reply["result"]
    return (1 if result.get("isError") else 0), result


def read_reply(conn: socket.socket) -> dict[str, Any] | None:
    """The relay's one reply line (None when it closed without one)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data.strip():
        return None
    reply: dict[str, Any] = json.loads(data)
    return reply


def show(status: int, outcome: dict[str, Any] | str, as_json: bool) -> int:
    """Print the outcome: the tool's text (or JSON) on stdout, a refusal on stderr."""
    if isinstance(outcome, str):
        sys.stderr.write(outcome + "\n")
        return status
    if as_json:
        sys.stdout.write(json.dumps(outcome) + "\n")
        return status
    text = "\n".join(
        block.get("text", "") for block in outcome.get("content", []) if block.get("type") == "text"
    )
    (sys.stdout if status == 0 else sys.stderr).write(text + "\n")
    return status
