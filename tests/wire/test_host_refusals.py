"""Precise refusals on the host API: a field a host method does not have is refused naming it and
the closest field it has; a method that does not exist is answered with the closest method's
name; send_message tells the host a target that does not exist from one that cannot be resumed,
while the model-visible texts stay those docs/semantics.md fixes."""

from __future__ import annotations

import msgspec
import pytest

from subagentd.client import RpcError
from subagentd.schema.base import HostParams
from subagentd.schema.codes import Code
from subagentd.server.handlers import METHODS


def rpc_error(host, method, params) -> RpcError:
    with pytest.raises(RpcError) as caught:
        host.call(method, params)
    return caught.value


def test_a_misspelled_optional_field_is_refused_and_nothing_is_spawned(spawn_process):
    host = spawn_process("--db", ":memory:").host
    host.initialize()
    host.open("root")
    params = {"caller": "root", "child_id": "c1", "label": "l", "prompt": "p", "mdoe": "one-shot"}
    error = rpc_error(host, "agents/spawn", params)
    assert error.code == Code.INVALID_PARAMS
    assert error.message == 'invalid params: unknown field "mdoe"; did you mean "mode"?'
    assert error.data == {"reason": "INVALID_PARAMS", "field": "mdoe", "closest": "mode"}
    assert rpc_error(host, "agents/get", {"agent_id": "c1"}).code == Code.UNKNOWN_AGENT


def test_an_unknown_field_with_nothing_close_is_named_alone(host):
    error = rpc_error(host, "agents/open", {"agent_id": "root", "colour": "blue"})
    assert error.message == 'invalid params: unknown field "colour"'
    assert error.data == {"reason": "INVALID_PARAMS", "field": "colour"}
    assert rpc_error(host, "agents/get", {"agent_id": "root"}).code == Code.UNKNOWN_AGENT


HOST_METHODS = sorted(
    name
    for name, handler in METHODS.items()
    if handler.params is not None and issubclass(handler.params, HostParams)
)


def test_every_host_method_with_params_refuses_unknown_fields():
    assert {
        "agents/open",
        "agents/spawn",
        "agents/followup",
        "turns/end",
        "transcript/append",
        "server/stats",
    } <= set(HOST_METHODS)
    mcp = {"initialize", "tools/list", "tools/call", "ping"}
    assert not mcp & set(HOST_METHODS)


@pytest.mark.parametrize("method", HOST_METHODS)
def test_each_host_method_names_the_unknown_field(host, method):
    fields = [f.encode_name for f in msgspec.structs.fields(METHODS[method].params)]
    params = {"agent_id": "nobody", "unexpected_field": 1}
    error = rpc_error(host, method, params)
    assert error.code == Code.INVALID_PARAMS
    if "agent_id" in fields:
        assert error.data == {"reason": "INVALID_PARAMS", "field": "unexpected_field"}
    else:  # agent_id is unknown too: the first unknown field is named
        assert error.data["field"] == "agent_id"


def test_mcp_methods_and_the_tools_keep_tolerating_extra_fields(host):
    host.open("root")
    assert host.call("ping", {"extra": 1}) == {}
    listed = host.call("tools/list", {"cursor": None, "_meta": {"subagentd/caller": "root"}})
    assert listed["tools"]
    # docs/semantics.md section 3: an unknown argument is refused, naming the closest known one
    error = rpc_error(host, "list_agents", {"caller": "root", "scop": "descendants"})
    assert (error.code, error.message) == (
        Code.INVALID_PARAMS,
        'invalid arguments: unknown property "scop"; did you mean "scope"?',
    )
    error = rpc_error(host, "interrupt_agent", {"caller": "root", "subagent_id": "c1"})
    assert error.message == (
        'invalid arguments: missing required property "agent_id"; unknown property'
        ' "subagent_id"; did you mean "agent_id"?'
    )
    assert host.call("list_agents", {"caller": "root"})["text"] == "(no subagents)"  # still serves


@pytest.mark.parametrize(
    "method, closest",
    [("agents/spwan", "agents/spawn"), ("agents/follow_up", "agents/followup")],
)
def test_an_unknown_method_over_the_pipes_names_the_closest(host, method, closest):
    error = rpc_error(host, method, {})
    assert (error.code, error.message) == (Code.METHOD_NOT_FOUND, "Method not found")
    assert error.data == {"method": method, "closest": closest}


def test_an_unknown_method_with_nothing_close_names_only_itself(host):
    error = rpc_error(host, "xyzzy", {})
    assert error.data == {"method": "xyzzy"}


def test_send_message_tells_the_host_a_missing_target_from_one_that_cannot_resume(host):
    host.open("root")
    host.spawn("root", "once", mode="one-shot")
    missing = rpc_error(
        host, "send_message", {"caller": "root", "subagent_id": "ghost", "message": "m"}
    )
    assert missing.code == Code.NOT_RESUMABLE
    assert missing.message == 'message not delivered: subagent "ghost" is unavailable'
    assert missing.data == {"reason": "UNKNOWN_AGENT", "text": f"Error: {missing.message}"}
    one_shot = rpc_error(
        host, "send_message", {"caller": "root", "subagent_id": "once", "message": "m"}
    )
    assert one_shot.code == Code.NOT_RESUMABLE
    assert one_shot.message == (
        'message not delivered: subagent "once" has no supported continuation state and cannot'
        " be resumed; do not retry send_message with this id"
    )
    assert one_shot.data == {"reason": "NOT_RESUMABLE", "text": f"Error: {one_shot.message}"}


def test_the_model_sees_the_same_text_through_tools_call(host):
    host.open("root")
    params = {
        "name": "send_message",
        "arguments": {"subagent_id": "ghost", "message": "m"},
        "_meta": {"subagentd/caller": "root"},
    }
    assert host.call("tools/call", params) == {
        "content": [
            {
                "type": "text",
                "text": 'Error: message not delivered: subagent "ghost" is unavailable',
            }
        ],
        "isError": True,
    }


def test_interrupting_an_unknown_agent_stays_an_accepted_no_op_and_the_host_api_says_more(host):
    host.open("root")
    result = host.call("interrupt_agent", {"caller": "root", "agent_id": "ghost"})
    assert result == {"accepted": True, "text": "interrupt requested for agent ghost"}
    error = rpc_error(host, "agents/interrupt", {"agent_id": "ghost"})
    assert (error.code, error.data) == (Code.UNKNOWN_AGENT, {"reason": "UNKNOWN_AGENT"})
