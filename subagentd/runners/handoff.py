"""What a runner hands a turn's agent so it acts as itself (PROTOCOL.md section 11).

The same subagentd that serves (`SUBAGENTD`: one executable path), its agent's own tools as an
MCP stdio server (`subagentd mcp`): the exact command (`SUBAGENTD_MCP_COMMAND`), a ready MCP
configuration file (`SUBAGENTD_MCP_CONFIG`, the `mcpServers` shape Claude Code, Gemini CLI and
most MCP clients read), and the same server as an ACP `mcpServers` entry for a session.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys

SERVER_NAME = "subagentd"  # the MCP server's name in the configurations handed out


def subagentd_executable(directory: str, argv0: str | None = None) -> str:
    """The executable of the subagentd that runs now: its own script when it was started as
    one (`subagentd`, e.g. a pipx or venv script), else a wrapper written into `directory`
    that runs this interpreter's `-m subagentd` (so a child finds this very installation)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    path = os.path.abspath(argv0) if argv0 else ""
    name = os.path.basename(path)
    if name.startswith("subagentd") and not name.endswith(".py") and os.access(path, os.X_OK):
        return path
    wrapper = os.path.join(directory, "subagentd")
    with open(wrapper, "w", encoding="utf-8") as out:
        out.write(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m subagentd "$@"\n')
    os.chmod(wrapper, 0o700)
    return wrapper


class Handoff:
    """The per-turn environment of a runner's processes, and the ACP session's MCP server."""

    def __init__(self, directory: str, executable: str, environment: dict[str, str]) -> None:
        self.directory = directory  # private (0700): the config files hold the tokens
        self.executable = executable
        self.environment = environment  # SUBAGENTD_DB and SUBAGENTD_SOCKET
        self._mcp_command = shlex.join([executable, "mcp"])

    def identity(self, agent_id: str, token: str) -> dict[str, str]:
        """What `subagentd mcp` (and `subagentd tool`) need to act as the agent."""
        return {
            "SUBAGENTD_SOCKET": self.environment["SUBAGENTD_SOCKET"],
            "SUBAGENTD_TOKEN": token,
            "SUBAGENTD_AGENT_ID": agent_id,
        }

    def turn_environment(self, agent_id: str, token: str) -> dict[str, str]:
        """SUBAGENTD, SUBAGENTD_MCP_COMMAND and SUBAGENTD_MCP_CONFIG (the file is written now)."""
        config = {
            "mcpServers": {
                SERVER_NAME: {
                    "type": "stdio",
                    "command": self.executable,
                    "args": ["mcp"],
                    "env": self.identity(agent_id, token),
                }
            }
        }
        digest = hashlib.sha256(agent_id.encode()).hexdigest()[:32]
        path = os.path.join(self.directory, f"mcp-{digest}.json")
        data = json.dumps(config).encode()
        # written over the agent's file of its last turn, then cut to length: O_TRUNC (a
        # journalled truncation on ext4) costs ~20x more than the write itself
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
        return {
            "SUBAGENTD": self.executable,
            "SUBAGENTD_MCP_COMMAND": self._mcp_command,
            "SUBAGENTD_MCP_CONFIG": path,
        }

    def acp_server(self, agent_id: str, token: str) -> dict[str, object]:
        """The agent's tools as an ACP `McpServerStdio` (session/new, session/load)."""
        return {
            "name": SERVER_NAME,
            "command": self.executable,
            "args": ["mcp"],
            "env": [{"name": k, "value": v} for k, v in self.identity(agent_id, token).items()],
        }
