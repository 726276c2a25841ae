"""subagentd: a subagent control plane served over JSON-RPC 2.0 on stdin/stdout."""

__version__ = "0.1.0"
PROTOCOL = 1
