"""The benchmark's TypeScript SDK peer (benchmarks/peers/ts-mcp) serves the Python SDK peer's tool:
the same name, schemas and result, so the two SDKs are measured doing the same work."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness import Server, server_command  # noqa: E402

from tests.tools import require  # noqa: E402

# what peers/mcp_sdk_server.py (the Python SDK, a `str` return) answers to the same call
PYTHON_SDK_RESULT = {
    "content": [{"type": "text", "text": "(no subagents)"}],
    "isError": False,
    "structuredContent": {"result": "(no subagents)"},
}


def test_ts_sdk_peer_answers_list_agents_like_the_python_sdk_peer():
    require("node")
    server = Server(server_command("mcp-ts"))  # `npm ci` first when node_modules is missing
    try:
        init = server.initialize()
        assert init["serverInfo"]["name"] == "bench-peer"
        (tool,) = server.call("tools/list", {})["tools"]
        assert tool["name"] == "list_agents"
        assert tool["inputSchema"]["properties"] == {
            "scope": {"type": "string", "default": "children"}
        }
        assert tool["outputSchema"]["properties"] == {"result": {"type": "string"}}
        params = {
            "name": "list_agents",
            "arguments": {"scope": "children"},
            "_meta": {"subagentd/caller": "root"},  # as run.py sends it to every peer
        }
        assert server.call("tools/call", params) == PYTHON_SDK_RESULT
        assert server.close() == 0
    finally:
        server.kill()
