"""The peer a user would pick instead: the official MCP Python SDK (MCPServer, née FastMCP)
serving one trivial tool over stdio."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-peer", log_level="WARNING")


@server.tool()
def list_agents(scope: str = "children") -> str:
    """Return a constant listing (the cheapest possible tool)."""
    return "(no subagents)"


if __name__ == "__main__":
    server.run("stdio")
