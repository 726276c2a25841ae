"""JSON-RPC 2.0 conformance, MCP lifecycle (both eras) and cancellation, over the in-process server."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import subagentd
from subagentd.schema import host_methods as h
from subagentd.schema.codes import Code
from subagentd.server import handlers, lifecycle

STATELESS = "2026-07-28"
VERSION_META = "io.modelcontextprotocol/protocolVersion"
ALL_VERSIONS = {"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}


def raw(host, text: str) -> Any:
    """Send one line verbatim and return the next frame."""
    host.send_bytes(text.encode() + b"\n")
    return host.read_any()


def error(code: Code, message: str, request_id: Any = None, **extra: Any) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code.value, "message": message, **extra}
    return {"jsonrpc": "2.0", "error": err, "id": request_id}


def ok(result: Any, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": request_id}


def assert_only_reply_is_ping(host, request_id: Any = "probe") -> None:
    """Proves that nothing was written for what was sent before: the next frame is this ping's."""
    host.responses.clear()  # frames read so far were already checked by the caller
    host.notifications.clear()
    host.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    assert host.read_any() == ok({}, request_id)
    del host.responses[request_id]
    host.barrier()  # a second ping: whatever was written before its reply has been read
    assert host.responses == {}
    assert host.notifications == type(host.notifications)()


# --- parse errors and invalid requests -----------------------------------------------------


@pytest.mark.parametrize("text", ["{bad", '{"jsonrpc":"2.0","id":1,"method":"ping"', "nul", "[1,]"])
def test_malformed_json_is_answered_with_parse_error_and_null_id(host, text):
    reply = raw(host, text)
    assert reply["id"] is None
    assert reply["error"]["code"] == Code.PARSE_ERROR
    assert reply["error"]["message"] == "Parse error"
    assert set(reply) == {"jsonrpc", "error", "id"} and reply["jsonrpc"] == "2.0"
    assert_only_reply_is_ping(host)


@pytest.mark.parametrize(
    ("text", "message", "request_id"),
    [
        ("1", "Invalid Request: not an object", None),
        ('"ping"', "Invalid Request: not an object", None),
        ("null", "Invalid Request: not an object", None),
        ('{"id":1,"method":"ping"}', 'Invalid Request: "jsonrpc" must be "2.0"', 1),
        (
            '{"jsonrpc":"1.0","id":"a","method":"ping"}',
            'Invalid Request: "jsonrpc" must be "2.0"',
            "a",
        ),
        ('{"jsonrpc":2.0,"id":2,"method":"ping"}', 'Invalid Request: "jsonrpc" must be "2.0"', 2),
        ('{"jsonrpc":"2.0","id":3,"method":7}', 'Invalid Request: "method" must be a string', 3),
        ('{"jsonrpc":"2.0","id":4}', 'Invalid Request: "method" must be a string', 4),
        (
            '{"jsonrpc":"2.0","id":5,"method":"ping","params":"x"}',
            'Invalid Request: "params" must be an object or an array',
            5,
        ),
        (
            '{"jsonrpc":"2.0","id":6,"method":"ping","params":3}',
            'Invalid Request: "params" must be an object or an array',
            6,
        ),
        (
            '{"jsonrpc":"2.0","id":true,"method":"ping"}',
            "Invalid Request: id must be a string, a number or null",
            None,
        ),
        (
            '{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
            "Invalid Request: id must be a string, a number or null",
            None,
        ),
        (
            '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
            "Invalid Request: id must be a string, a number or null",
            None,
        ),
        ('{"jsonrpc":"2.0","method":5}', 'Invalid Request: "method" must be a string', None),
    ],
)
def test_invalid_request_is_answered_with_its_id_when_it_has_a_usable_one(
    host, text, message, request_id
):
    assert raw(host, text) == error(Code.INVALID_REQUEST, message, request_id)
    assert_only_reply_is_ping(host)


def test_unknown_method_is_method_not_found(host):
    reply = host.response(host.start("agents/teleport", {"agent_id": "x"}))
    assert reply["error"]["code"] == Code.METHOD_NOT_FOUND
    assert reply["error"]["message"] == "Method not found"
    assert reply["id"] == 1 + 1  # initialize used id 1


def test_wrong_param_type_is_invalid_params(host):
    request_id = host.start("agents/open", {"agent_id": 5})
    reply = host.response(request_id)
    assert reply["id"] == request_id
    assert reply["error"]["code"] == Code.INVALID_PARAMS
    assert reply["error"]["message"].startswith("invalid params: ")
    assert "$.agent_id" in reply["error"]["message"]
    assert reply["error"]["data"] == {"reason": "INVALID_PARAMS"}


def test_missing_required_param_is_invalid_params(host):
    reply = host.response(host.start("agents/get", {}))
    assert reply["error"]["code"] == Code.INVALID_PARAMS
    assert "agent_id" in reply["error"]["message"]


def test_params_as_array_is_invalid_params(host):
    request_id = host.start("agents/open", ["r"])
    assert host.response(request_id) == error(
        Code.INVALID_PARAMS,
        "params must be an object, not an array",
        request_id,
        data={"reason": "INVALID_PARAMS"},
    )


@pytest.mark.parametrize("request_id", ["abc", "", 0, -7, 2**53, "1"])
def test_string_and_number_ids_are_echoed_exactly(host, request_id):
    host.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    assert host.read_any() == ok({}, request_id)


# --- notifications -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "ping"},
        {"jsonrpc": "2.0", "method": "no/such/method", "params": {}},
        {"jsonrpc": "2.0", "method": "agents/open", "params": {"agent_id": 5}},
        {"jsonrpc": "2.0", "method": "agents/get", "params": {"agent_id": "nobody"}},
        {"jsonrpc": "2.0", "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
    ],
)
def test_notifications_are_never_answered(host, message):
    host.send(message)
    assert_only_reply_is_ping(host)


def test_notification_is_still_executed(host):
    host.notify("agents/open", {"agent_id": "quiet"})
    assert host.call("agents/get", {"agent_id": "quiet"})["agent_id"] == "quiet"


# --- batches -------------------------------------------------------------------------------


def test_batch_of_requests_and_notifications_answers_only_the_requests_in_one_array(host):
    host.send(
        [
            {"jsonrpc": "2.0", "id": 10, "method": "ping"},
            {"jsonrpc": "2.0", "method": "ping"},
            {"jsonrpc": "2.0", "id": "eleven", "method": "no/such"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 12, "method": "agents/open", "params": {"agent_id": "b"}},
        ]
    )
    replies = host.read_any()
    assert isinstance(replies, list) and len(replies) == 3
    by_id = {r["id"]: r for r in replies}
    assert by_id[10] == ok({}, 10)
    assert by_id["eleven"]["error"]["code"] == Code.METHOD_NOT_FOUND
    assert by_id[12]["result"]["agent_id"] == "b"
    assert_only_reply_is_ping(host)


def test_all_notification_batch_gets_no_reply(host):
    host.send(
        [
            {"jsonrpc": "2.0", "method": "ping"},
            {"jsonrpc": "2.0", "method": "no/such"},
            {"jsonrpc": "2.0", "method": "agents/open", "params": {"agent_id": "n"}},
        ]
    )
    assert_only_reply_is_ping(host)


def test_empty_batch_is_one_invalid_request(host):
    assert raw(host, "[]") == error(Code.INVALID_REQUEST, "Invalid Request: empty batch")
    assert_only_reply_is_ping(host)


def test_batch_with_bad_members_still_answers_the_others(host):
    host.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            5,
            {"jsonrpc": "1.0", "id": 2, "method": "ping"},
            {"jsonrpc": "2.0", "id": 3, "method": "agents/open", "params": {"agent_id": []}},
            {"jsonrpc": "2.0", "id": 4, "method": "agents/open", "params": {"agent_id": "ok"}},
            {"jsonrpc": "2.0", "id": 5, "method": "agents/get", "params": {"agent_id": "ghost"}},
        ]
    )
    replies = host.read_any()
    assert len(replies) == 6
    assert replies[0] == ok({}, 1)
    assert replies[1] == error(Code.INVALID_REQUEST, "Invalid Request: not an object")
    assert replies[2] == error(Code.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', 2)
    assert replies[3]["id"] == 3 and replies[3]["error"]["code"] == Code.INVALID_PARAMS
    assert replies[4]["id"] == 4 and replies[4]["result"]["agent_id"] == "ok"
    assert replies[5]["id"] == 5 and replies[5]["error"]["code"] == Code.UNKNOWN_AGENT


def test_batch_of_only_invalid_members_is_answered_member_by_member(host):
    assert raw(host, "[1, 2]") == [
        error(Code.INVALID_REQUEST, "Invalid Request: not an object"),
        error(Code.INVALID_REQUEST, "Invalid Request: not an object"),
    ]


# --- frame size ----------------------------------------------------------------------------


def test_over_long_frame_is_answered_and_next_request_works(make_server):
    host = make_server(max_frame_bytes=300).host
    host.send({"jsonrpc": "2.0", "id": 1, "method": "agents/open", "params": {"label": "x" * 400}})
    assert host.read_any() == error(
        Code.INVALID_REQUEST,
        "frame exceeds the limit of 300 bytes (--max-frame-bytes); it was discarded",
    )
    assert host.call("agents/open", {"agent_id": "small"})["agent_id"] == "small"
    with pytest.raises(Exception) as excinfo:
        host.call("agents/get", {"agent_id": "x" * 10})
    assert excinfo.value.code == Code.UNKNOWN_AGENT  # the oversized open did not happen


# --- unexpected failures -------------------------------------------------------------------


def test_unexpected_failure_is_internal_error_without_detail_on_the_wire(
    make_server, monkeypatch, caplog
):
    def explode(call, params):
        raise RuntimeError("secret detail")

    monkeypatch.setitem(
        handlers.METHODS, "agents/get", handlers.Handler(explode, h.AgentParams, None)
    )
    host = make_server().host
    with caplog.at_level(logging.ERROR, logger="subagentd"):
        request_id = host.start("agents/get", {"agent_id": "r"})
        assert host.response(request_id) == error(Code.INTERNAL_ERROR, "Internal error", request_id)
    host.send([{"jsonrpc": "2.0", "id": "b", "method": "agents/get", "params": {"agent_id": "r"}}])
    assert host.read_any() == [error(Code.INTERNAL_ERROR, "Internal error", "b")]
    assert host.call("ping") == {}
    wire = b"\n".join(host.raw)
    assert b"secret detail" not in wire and b"Traceback" not in wire
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1])


def test_failed_write_handler_leaves_no_effect_and_the_connection_keeps_working(
    make_server, monkeypatch
):
    def open_then_fail(call, params):
        call.service.host.open(h.OpenParams(agent_id="half"))
        raise RuntimeError("boom")

    monkeypatch.setitem(
        handlers.METHODS, "agents/open", handlers.Handler(open_then_fail, h.OpenParams, None)
    )
    host = make_server().host
    reply = host.response(host.start("agents/open", {}))
    assert reply["error"] == {"code": Code.INTERNAL_ERROR.value, "message": "Internal error"}
    reply = host.response(host.start("agents/get", {"agent_id": "half"}))
    assert reply["error"]["code"] == Code.UNKNOWN_AGENT


# --- lifecycle: handshake era --------------------------------------------------------------


def test_request_before_initialize_is_not_initialized(make_server):
    host = make_server(initialize=False).host
    host.send(
        {"jsonrpc": "2.0", "id": "early", "method": "agents/open", "params": {"agent_id": "r"}}
    )
    assert host.read_any() == error(Code.NOT_INITIALIZED, "server not initialized", "early")
    host.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert host.read_any() == error(Code.NOT_INITIALIZED, "server not initialized", 2)


def test_any_other_request_before_initialize_is_not_initialized_even_an_unknown_one(make_server):
    host = make_server(initialize=False).host
    reply = host.response(host.start("no/such"))
    assert reply["error"] == {"code": Code.NOT_INITIALIZED, "message": "server not initialized"}
    host.initialize()
    assert host.response(host.start("no/such"))["error"]["code"] == Code.METHOD_NOT_FOUND


def test_notification_before_initialize_is_ignored(make_server):
    host = make_server(initialize=False).host
    host.notify("agents/open", {"agent_id": "early"})
    assert_only_reply_is_ping(host)
    host.initialize()
    with pytest.raises(Exception) as excinfo:
        host.call("agents/get", {"agent_id": "early"})
    assert excinfo.value.code == Code.UNKNOWN_AGENT


def test_ping_and_discover_are_allowed_before_initialize(make_server):
    host = make_server(initialize=False).host
    assert host.call("ping") == {}
    assert host.call("server/discover")["serverInfo"]["name"] == "subagentd"


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
def test_initialize_echoes_a_supported_version(make_server, version):
    host = make_server(initialize=False).host
    result = host.call("initialize", {"protocolVersion": version, "clientInfo": {"name": "t"}})
    assert result == {
        "protocolVersion": version,
        "serverInfo": {"name": "subagentd", "version": subagentd.__version__},
        "capabilities": {
            "tools": {"listChanged": False},
            "resources": {"subscribe": True, "listChanged": False},
            "experimental": {"subagentd": {"protocol": 1, "reportDelivery": "wakeup"}},
            # MCP tasks are in the core of 2025-11-25 only
            **(
                {"tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}
                if version == "2025-11-25"
                else {}
            ),
        },
        "instructions": lifecycle.INSTRUCTIONS,
    }


@pytest.mark.parametrize(
    "params", [{"protocolVersion": "1999-01-01"}, {}, {"protocolVersion": STATELESS}]
)
def test_initialize_with_an_unknown_version_answers_the_newest_handshake_version(
    make_server, params
):
    host = make_server(initialize=False).host
    assert host.call("initialize", params)["protocolVersion"] == "2025-11-25"


def test_initialize_opens_the_host_api(make_server):
    host = make_server(initialize=False).host
    host.call("initialize", {"protocolVersion": "2025-03-26"})
    host.notify("notifications/initialized")
    assert host.call("agents/open", {"agent_id": "r"})["agent_id"] == "r"


def test_second_initialize_is_invalid_request(host):
    request_id = host.start("initialize", {"protocolVersion": "2025-06-18"})
    reply = host.response(request_id)
    assert reply["id"] == request_id
    assert reply["error"]["code"] == Code.INVALID_REQUEST
    assert reply["error"]["message"] == "initialize was already called on this connection"


def test_initialize_with_wrong_param_types_is_invalid_params_and_does_not_initialize(make_server):
    host = make_server(initialize=False).host
    reply = host.response(host.start("initialize", {"protocolVersion": 2025}))
    assert reply["error"]["code"] == Code.INVALID_PARAMS
    reply = host.response(host.start("agents/open", {}))
    assert reply["error"]["code"] == Code.NOT_INITIALIZED


# --- lifecycle: stateless era --------------------------------------------------------------


def meta(version: str = STATELESS, **params: Any) -> dict[str, Any]:
    return {**params, "_meta": {VERSION_META: version}}


def test_stateless_request_is_served_without_initialize_and_says_complete(make_server):
    host = make_server(initialize=False).host
    result = host.call("agents/open", meta(agent_id="r"))
    assert result["agent_id"] == "r"
    assert result["resultType"] == "complete"
    assert host.call("agents/get", meta(agent_id="r"))["resultType"] == "complete"
    assert host.call("ping", meta()) == {"resultType": "complete"}


def test_stateless_request_without_version_after_it_is_still_not_initialized(make_server):
    host = make_server(initialize=False).host
    host.call("ping", meta())
    reply = host.response(host.start("agents/get", {"agent_id": "r"}))
    assert reply["error"]["code"] == Code.NOT_INITIALIZED


def test_unsupported_stateless_version_is_refused_with_the_supported_list(make_server):
    host = make_server(initialize=False).host
    request_id = host.start("agents/open", meta("2099-01-01", agent_id="r"))
    reply = host.response(request_id)
    assert reply["id"] == request_id
    err = reply["error"]
    assert err["code"] == Code.UNSUPPORTED_PROTOCOL_VERSION
    assert err["message"] == "unsupported protocol version '2099-01-01'"
    assert set(err["data"]) == {"supported", "requested"}
    assert err["data"]["requested"] == "2099-01-01"
    assert set(err["data"]["supported"]) == ALL_VERSIONS
    host.notify("agents/open", meta("2099-01-01", agent_id="n"))
    assert_only_reply_is_ping(host)


def test_unsupported_stateless_version_is_refused_even_after_initialize(host):
    reply = host.response(host.start("ping", meta("2099-01-01")))
    assert reply["error"]["code"] == Code.UNSUPPORTED_PROTOCOL_VERSION


def test_discover_lists_both_eras_and_says_complete(make_server):
    host = make_server(initialize=False).host
    for params in (None, meta()):
        result = host.call("server/discover", params)
        assert set(result["supportedVersions"]) == ALL_VERSIONS
        assert result["resultType"] == "complete"
        assert result["serverInfo"] == {"name": "subagentd", "version": subagentd.__version__}
        assert result["capabilities"]["tools"] == {"listChanged": False}
        assert result["capabilities"]["experimental"]["subagentd"]["protocol"] == 1
        assert {"supportedVersions", "capabilities", "serverInfo", "resultType"} <= set(result)


# --- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cancel",
    [
        ("notifications/cancelled", "requestId", 424242),
        ("notifications/cancelled", "requestId", "nope"),
        ("$/cancelRequest", "id", 424242),
        ("notifications/cancelled", "requestId", None),
        ("notifications/cancelled", "other", 1),
    ],
)
def test_cancelling_an_unknown_request_is_ignored(host, cancel):
    method, key, value = cancel
    host.notify(method, {key: value})
    assert_only_reply_is_ping(host)


@pytest.mark.parametrize(
    "method,key", [("notifications/cancelled", "requestId"), ("$/cancelRequest", "id")]
)
def test_cancelling_a_completed_request_is_ignored(host, method, key):
    request_id = host.start("agents/open", {"agent_id": "done"})
    assert host.response(request_id)["result"]["agent_id"] == "done"
    host.notify(method, {key: request_id})
    assert_only_reply_is_ping(host)


def open_root_with_busy_child(host) -> str:
    host.open("r")
    child = host.spawn("r", "c")
    return child["turn_id"]


def test_close_waits_for_the_drain_and_answers_after_the_last_turn_ends(host):
    turn_id = open_root_with_busy_child(host)
    close_id = host.start("agents/close", {"agent_id": "r"})
    host.barrier()
    assert close_id not in host.responses
    host.end_turn("c", turn_id)
    assert host.response(close_id) == ok({}, close_id)
    assert host.notification("agent/settled", agent_id="c")


@pytest.mark.parametrize(
    "method,key", [("notifications/cancelled", "requestId"), ("$/cancelRequest", "id")]
)
def test_cancelled_pending_close_is_answered_at_once_and_the_drain_still_completes(
    host, method, key
):
    turn_id = open_root_with_busy_child(host)
    close_id = host.start("agents/close", {"agent_id": "r"})
    host.barrier()
    assert close_id not in host.responses
    host.notify(
        method, {key: close_id, "reason": "user gave up"} if key == "requestId" else {key: close_id}
    )
    assert host.response(close_id) == error(Code.REQUEST_CANCELLED, "request cancelled", close_id)
    host.end_turn("c", turn_id)
    assert host.notification("agent/settled", agent_id="c")
    host.barrier()
    assert close_id not in host.responses, "a cancelled request was answered twice"
    host.notify(method, {key: close_id})  # cancelling again is a no-op
    assert_only_reply_is_ping(host)


def test_cancelled_pending_close_in_a_batch_answers_the_batch(host):
    turn_id = open_root_with_busy_child(host)
    host.send(
        [
            {
                "jsonrpc": "2.0",
                "id": "close",
                "method": "agents/close",
                "params": {"agent_id": "r"},
            },
            {"jsonrpc": "2.0", "id": "p", "method": "ping"},
        ]
    )
    host.barrier()
    assert "p" not in host.responses and "close" not in host.responses
    host.notify("notifications/cancelled", {"requestId": "close"})
    batch = host.read_any()
    while not isinstance(batch, list):
        batch = host.read_any()
    assert batch == [error(Code.REQUEST_CANCELLED, "request cancelled", "close"), ok({}, "p")]
    host.end_turn("c", turn_id)
    assert host.notification("agent/settled", agent_id="c")


def test_wire_frames_are_plain_json_lines(host):
    host.call("ping")
    for line in host.raw:
        assert isinstance(json.loads(line), dict | list)


# --- robustness of the frame loop ----------------------------------------------------------


def test_deeply_nested_json_is_a_parse_error_and_the_connection_survives(host):
    reply = raw(host, "[" * 100_000 + "]" * 100_000)
    assert reply["id"] is None
    assert reply["error"]["code"] == Code.PARSE_ERROR
    assert reply["error"]["message"] == "Parse error"
    assert_only_reply_is_ping(host)


def test_unencodable_result_is_internal_error_and_the_connection_survives(
    make_server, monkeypatch, caplog
):
    class Opaque:
        def __repr__(self) -> str:
            return "secret detail"

    monkeypatch.setitem(
        handlers.METHODS,
        "agents/get",
        handlers.Handler(lambda call, params: {"x": Opaque()}, h.AgentParams, None, writes=False),
    )
    host = make_server().host
    with caplog.at_level(logging.ERROR, logger="subagentd"):
        host.start("agents/get", {"agent_id": "r"})
        assert host.read_any() == error(Code.INTERNAL_ERROR, "Internal error")
    assert host.call("agents/open", {"agent_id": "after"})["agent_id"] == "after"
    assert b"secret detail" not in b"\n".join(host.raw)
    assert any(r.exc_info for r in caplog.records)
