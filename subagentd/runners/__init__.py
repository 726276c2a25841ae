"""The turn runners: what runs an agent's turn outside subagentd.

The process runner (`--runner`: claims, FIFO slots, processes, signals) and its watchdog,
the `subagentd tool` relay socket, what a turn's agent is handed (`SUBAGENTD`, the MCP
config), the ACP client and runner, the detached background process. They drive a
served connection (server/) as a host would.
"""
