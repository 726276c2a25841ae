"""subagentd.testing, the pytest plugin for host authors, used here as a user's suite uses it (its
fixtures come from the `pytest11` entry point, not from this directory's conftest)."""

from __future__ import annotations

import pytest

from subagentd.client import TurnOutcome
from subagentd.testing import NotificationTimeout, ScriptedHostError, assert_replays


def test_the_fixtures_come_from_the_entry_point(request):
    plugin = request.config.pluginmanager.get_plugin("subagentd")
    assert plugin is not None and plugin.__name__ == "subagentd.testing.plugin"


def test_a_scripted_host_runs_a_tree_from_its_table(subagentd_server, scripted_host):
    srv = subagentd_server
    srv.agents_open("root")
    srv.agents_spawn("root", "researcher", "Find X.", child_id="c1")
    host = scripted_host({"c1": ["X is 42."], "root": ["thanks"]})
    turns = host.run_until_idle("root")
    assert [(t.agent_id, t.reason, t.output) for t in turns] == [
        ("c1", "completed", "X is 42."),
        ("root", "completed", "thanks"),
    ]
    assert turns[0].texts == ["Find X."]
    assert turns[1].texts == [
        "Background subagent c1 finished and will do no further work unless you send it more.",
        "Its closing message:",
        "X is 42.",
    ]
    assert host.left() == {"c1": 0, "root": 0}


def test_a_wait_matches_a_notification_received_before_it(subagentd_server, scripted_host):
    """agent/settled arrived while the host ran turns; the wait still finds it, once."""
    srv = subagentd_server
    srv.agents_open("root")
    srv.agents_spawn("root", "w", "go", child_id="c1")
    scripted_host({"c1": ["done"], "root": ["ok"]}).run_until_idle("root")
    assert srv.wait_for_notification("agent/settled", agent_id="c1") == {
        "agent_id": "c1",
        "reason": "completed",
    }
    with pytest.raises(NotificationTimeout) as missing:
        srv.wait_for_notification("agent/settled", timeout=0.2, agent_id="c1")
    assert str(missing.value) == (
        'no agent/settled notification matching {"agent_id": "c1"} within 0.2 s;'
        " the agent/settled notifications received:\n"
        '  {"agent_id": "c1", "reason": "completed"} (taken)'
    )


def test_turn_starts_the_host_took_are_still_matched(subagentd_server, scripted_host):
    srv = subagentd_server
    srv.agents_open("root")
    srv.agents_spawn("root", "w", "go", child_id="c1")
    scripted_host({"c1": ["done"], "root": ["ok"]}).run_until_idle("root")
    start = srv.wait_for_notification("turn/start", agent_id="c1")
    assert start["messages"][0]["content"] == [{"type": "text", "text": "go"}]


def test_a_turn_without_a_reply_fails_naming_the_agent_and_its_turn(
    subagentd_server, scripted_host
):
    srv = subagentd_server
    srv.agents_open("root")
    srv.agents_spawn("root", "w", "go", child_id="c1")
    host = scripted_host({"c1": [TurnOutcome("completed", "first")]})
    with pytest.raises(ScriptedHostError) as failed:
        host.run_until_idle("root")
    assert str(failed.value).startswith(
        'scripted host: agent "root" started its turn 1, but the table has 0 replies for it;'
        " the turn's input: [\""
    )
    # the turn was ended (reason error), so the server is not left waiting on it
    assert srv.agents_wait_idle("root", timeout_ms=5000).idle


def test_replies_may_call_tools_before_they_end_the_turn(subagentd_server, scripted_host):
    srv = subagentd_server
    srv.agents_open("root")
    srv.agents_spawn("root", "w", "go", child_id="c1")

    def reply(start):
        srv.report("half way", caller=start.agent_id)
        return "all done"

    turns = scripted_host({"c1": [reply], "root": ["r1", "r2"]}).run_until_idle("root")
    assert [t.agent_id for t in turns] == ["c1", "root", "root"]


@pytest.fixture
def subagentd_args():
    return ["--max-depth", "1"]


def test_subagentd_args_reach_the_server(subagentd_server):
    subagentd_server.agents_open("root")
    subagentd_server.agents_spawn("root", "w", "go", child_id="c1")
    with pytest.raises(Exception, match="depth"):
        subagentd_server.agents_spawn("c1", "g", "go", child_id="g1")


def test_assert_replays_raises_the_report(tmp_path):
    script = tmp_path / "x.jsonl"
    script.write_text('{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n{"expect": 5}\n')
    with pytest.raises(AssertionError, match=r"^x\.jsonl: line 2: the frame received does not"):
        assert_replays(script)
