"""The published ACP adapters with subagentd as their client: Claude Code's
(`@zed-industries/claude-code-acp`) and Codex's (`@zed-industries/codex-acp`), installed by
`npm ci` in tests/peers/acp-adapters (.ci/run does it). No model is reachable here, and none is
given credentials: HOME is an empty directory and the API-key variables are removed, so each
stops at its authentication check — Claude Code's after `initialize` and `session/new` (it
starts the child's `subagentd mcp` and lists its tools), Codex's at `session/new`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from subagentd.runners import tool_socket as relay
from tests.processes.test_acp_runner import AcpServer

ADAPTERS = Path(__file__).parents[1] / "peers" / "acp-adapters" / "node_modules" / ".bin"
CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY")


def adapter(name: str) -> list[str]:
    path = ADAPTERS / name
    assert path.exists(), f"{path} is missing: run `npm ci` in tests/peers/acp-adapters"
    return [str(path)]


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    if os.geteuid() == 0:  # Claude Code refuses to bypass its permission prompts as root
        monkeypatch.setenv("IS_SANDBOX", "1")  # otherwise (its own switch for containers)


def serve(tmp_path: Path, command: list[str], monkeypatch: Any) -> tuple[AcpServer, list[Any]]:
    listed: list[Any] = []
    real = relay.Relay._list

    def spy(self: relay.Relay, params: Any) -> Any:
        result = real(self, params)
        listed.append(((params.meta or {}).get("subagentd/caller"), [t.name for t in result.tools]))
        return result

    monkeypatch.setattr(relay.Relay, "_list", spy)
    monkeypatch.setenv("ACP_AGENT_STATE", str(tmp_path / "unused"))  # restored afterwards
    monkeypatch.setattr("tests.processes.test_acp_runner.AGENT", command)
    return AcpServer(tmp_path / "unused"), listed


def first_turn(tmp_path: Path, name: str, monkeypatch: Any) -> tuple[Any, Any, list[Any]]:
    """c1's first turn with the adapter as the runner: its turn_end, its events by type, and
    the tools/list calls the relay answered."""
    srv, listed = serve(tmp_path, adapter(name), monkeypatch)
    try:
        srv.spawn("c1", "Say hello.")
        end = srv.ends("c1", 1)[0]
        events = {e["type"]: e["data"] for e in srv.events("c1")}
    finally:
        srv.stop()
    return end, events, listed


def test_claude_code_acp_initializes_opens_a_session_and_lists_the_childs_tools(
    tmp_path, monkeypatch, no_credentials
):
    end, events, listed = first_turn(tmp_path, "claude-code-acp", monkeypatch)
    assert end["reason"] == "error"
    assert events["acp_session"]["loaded"] is False  # session/new answered with a session id
    assert events["acp_session"]["session_id"]
    # Claude Code started the session's MCP server, `subagentd mcp`, as c1, and listed its tools
    tools = ["send_message", "interrupt_agent", "list_agents", "report", "spawn_agent"]
    assert ("c1", [*tools, "wait_agents"]) in listed
    assert events["acp_end"] == {
        "error": "the ACP agent refused session/prompt: Authentication required"
    }


def test_codex_acp_initializes_and_asks_for_authentication_at_session_new(
    tmp_path, monkeypatch, no_credentials
):
    end, events, _ = first_turn(tmp_path, "codex-acp", monkeypatch)
    assert end["reason"] == "error"
    assert "acp_session" not in events  # initialize was answered; session/new was refused
    assert events["acp_end"] == {
        "error": "the ACP agent refused session/new: Authentication required"
    }
