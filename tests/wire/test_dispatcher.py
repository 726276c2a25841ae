"""The dispatcher without a transport: decoded messages in, reply values out (PROTOCOL.md §1, §2, §8).

Fast and in-process: a real Service on an in-memory store, jsonrpcserver running the methods as in
the server; no pipes, no event loop.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonrpcserver import Error, Success

import subagentd
from subagentd import errors
from subagentd.core.service import Outlets, Service
from subagentd.core.settings import Settings
from subagentd.schema.codes import Code
from subagentd.schema.lifecycle import SUPPORTED_VERSIONS, VERSION_META_KEY
from subagentd.server import handlers
from subagentd.server.dispatcher import Dispatcher, invoke_directly
from subagentd.server.handlers import METHODS
from subagentd.storage.database import SqliteStore
from subagentd.wire.framing import BadHeader, Oversize
from subagentd.wire.ledger import Kept, Pending
from subagentd.wire.rpc import JsonRpc
from subagentd.wire.session import Session
from tests.core_host import ManualTimers

INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"},
}


def make_dispatcher(*, initialized: bool = True, max_pending: int = 1024) -> Dispatcher:
    service = Service(SqliteStore(":memory:"), Settings())
    service.recovery.recover()
    dispatcher = Dispatcher(
        Session(),
        service.settings,
        JsonRpc(METHODS),
        service=service,
        methods=METHODS,
        max_pending=max_pending,
    )
    service.attach(Outlets(dispatcher.emit, ManualTimers()))
    if initialized:
        assert "result" in request(dispatcher, "initialize", INIT)
    return dispatcher


def request(dispatcher: Dispatcher, method: str, params: Any = None, request_id: Any = 1) -> Any:
    """The reply as the host reads it (results may be Structs until encoded), or a Pending."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return plain(dispatcher.dispatch(message))


def plain(reply: Any) -> Any:
    if isinstance(reply, Pending):
        return reply
    return msgspec.to_builtins(reply)


def error(code: Code, message: str, request_id: Any, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code.value, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "error": err, "id": request_id}


@pytest.fixture
def dispatcher() -> Dispatcher:
    return make_dispatcher()


# --- the envelope ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "text", "reply_id"),
    [
        (3, "Invalid Request: not an object", None),
        (
            {"jsonrpc": "2.0", "id": True, "method": "ping"},
            "id must be a string, a number or null",
            None,
        ),
        ({"jsonrpc": "1.0", "id": 7, "method": "ping"}, '"jsonrpc" must be "2.0"', 7),
        ({"jsonrpc": "2.0", "id": 7, "method": 5}, '"method" must be a string', 7),
        (
            {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": 1},
            '"params" must be an object or an array',
            7,
        ),
        ({"jsonrpc": "2.0", "method": 5}, '"method" must be a string', None),  # a notification too
    ],
)
def test_a_broken_envelope_is_an_invalid_request(dispatcher, message, text, reply_id):
    reply = dispatcher.dispatch(message)
    assert reply["error"]["code"] == Code.INVALID_REQUEST
    assert reply["error"]["message"].startswith("Invalid Request: ")
    assert reply["error"]["message"].endswith(text)
    assert "data" not in reply["error"] and reply["id"] == reply_id


def test_frames_that_are_no_json_are_parse_errors_and_an_oversized_one_is_invalid(dispatcher):
    reply = dispatcher.handle_frame(b'{"jsonrpc": ')
    assert reply["error"]["code"] == Code.PARSE_ERROR and reply["id"] is None
    assert reply["error"]["message"] == "Parse error" and reply["error"]["data"]  # decoder's word
    assert dispatcher.handle_frame(b"[" * 100_000) == error(
        Code.PARSE_ERROR, "Parse error", None, "JSON is nested too deeply"
    )
    assert dispatcher.handle_frame(BadHeader("missing Content-Length header")) == error(
        Code.PARSE_ERROR, "Parse error: missing Content-Length header", None
    )
    assert dispatcher.handle_frame(Oversize(64)) == error(
        Code.INVALID_REQUEST,
        "frame exceeds the limit of 64 bytes (--max-frame-bytes); it was discarded",
        None,
    )


def test_a_batch_is_answered_member_by_member_in_order_without_its_notifications(dispatcher):
    reply = plain(
        dispatcher.dispatch(
            [
                {"jsonrpc": "2.0", "id": "a", "method": "ping"},
                {"jsonrpc": "2.0", "method": "agents/open", "params": {"agent_id": "quiet"}},
                7,
                {
                    "jsonrpc": "2.0",
                    "id": "b",
                    "method": "agents/get",
                    "params": {"agent_id": "quiet"},
                },
            ]
        )
    )
    assert [r["id"] for r in reply] == ["a", None, "b"]
    assert reply[0] == {"jsonrpc": "2.0", "result": {}, "id": "a"}
    assert reply[1] == error(Code.INVALID_REQUEST, "Invalid Request: not an object", None)
    assert reply[2]["result"]["agent_id"] == "quiet"  # the notification did open it
    assert dispatcher.dispatch([]) == error(
        Code.INVALID_REQUEST, "Invalid Request: empty batch", None
    )
    assert dispatcher.dispatch([{"jsonrpc": "2.0", "method": "ping"}]) is None


def test_a_notification_runs_and_is_not_answered_even_when_it_fails(dispatcher):
    assert (
        dispatcher.dispatch(
            {"jsonrpc": "2.0", "method": "agents/open", "params": {"agent_id": "n"}}
        )
        is None
    )
    assert request(dispatcher, "agents/get", {"agent_id": "n"})["result"]["agent_id"] == "n"
    assert dispatcher.dispatch({"jsonrpc": "2.0", "method": "agents/get", "params": {}}) is None
    assert dispatcher.dispatch({"jsonrpc": "2.0", "method": "no/such"}) is None


def test_an_unknown_method_is_method_not_found_naming_it(dispatcher):
    reply = dispatcher.dispatch({"jsonrpc": "2.0", "id": "x", "method": "no/such"})
    assert reply == error(Code.METHOD_NOT_FOUND, "Method not found", "x", {"method": "no/such"})
    assert type(reply) is Kept  # it depends on no stored state


@pytest.mark.parametrize(
    "method, closest",
    [
        ("agents/spwan", "agents/spawn"),
        ("agent/open", "agents/open"),
        ("send_mesage", "send_message"),
        ("turns/ends", "turns/end"),
        ("tools/cal", "tools/call"),
    ],
)
def test_a_misspelled_method_is_answered_with_the_closest_method(dispatcher, method, closest):
    reply = dispatcher.dispatch({"jsonrpc": "2.0", "id": 1, "method": method})
    data = {"method": method, "closest": closest}
    assert reply == error(Code.METHOD_NOT_FOUND, "Method not found", 1, data)


def test_params_that_do_not_fit_the_method_are_invalid_params(dispatcher):
    reply = request(dispatcher, "agents/get", {"agent_id": 5}, 2)
    assert reply["error"]["code"] == Code.INVALID_PARAMS
    assert reply["error"]["message"].startswith("invalid params: Expected `str`, got `int`")
    assert reply["error"]["data"] == {"reason": "INVALID_PARAMS"}
    assert request(dispatcher, "agents/get", ["r"], 3) == error(
        Code.INVALID_PARAMS,
        "params must be an object, not an array",
        3,
        {"reason": "INVALID_PARAMS"},
    )


# --- domain errors: the code, the message and the data ---------------------------------------


def test_a_host_api_refusal_carries_its_code_and_reason(dispatcher):
    assert request(dispatcher, "agents/get", {"agent_id": "ghost"}, 4) == error(
        Code.UNKNOWN_AGENT, 'agent "ghost" does not exist', 4, {"reason": "UNKNOWN_AGENT"}
    )


def test_a_refused_tool_call_carries_the_model_visible_text_in_both_forms(dispatcher):
    request(dispatcher, "agents/open", {"agent_id": "root"})
    direct = request(
        dispatcher, "send_message", {"caller": "root", "subagent_id": "ghost", "message": "hi"}, 5
    )
    text = 'message not delivered: subagent "ghost" is unavailable'
    assert direct == error(
        Code.NOT_RESUMABLE, text, 5, {"reason": "UNKNOWN_AGENT", "text": f"Error: {text}"}
    )
    mcp = request(
        dispatcher,
        "tools/call",
        {
            "name": "send_message",
            "arguments": {"subagent_id": "ghost", "message": "hi"},
            "_meta": {"subagentd/caller": "root"},
        },
        6,
    )
    assert mcp["result"]["isError"] is True
    assert mcp["result"]["content"] == [{"type": "text", "text": f"Error: {text}"}]


def test_an_unexpected_failure_is_internal_error_without_detail(monkeypatch, caplog):
    def explode(call, params):
        raise RuntimeError("secret detail")

    monkeypatch.setitem(METHODS, "agents/get", handlers.Handler(explode, None, None, writes=False))
    fresh = make_dispatcher()
    assert request(fresh, "agents/get", {}, 8) == error(Code.INTERNAL_ERROR, "Internal error", 8)
    assert "secret detail" in caplog.text  # on stderr only, with its traceback


def test_jsonrpcserver_builds_each_reply_from_what_the_entry_returns(dispatcher):
    """The entries return Success(result) or Error(code, message, data) and jsonrpcserver's
    public dispatch builds the reply from it: an entry replaced by one answering otherwise
    changes the reply the host reads."""
    assert isinstance(dispatcher.invoke, JsonRpc)
    ping = dispatcher.invoke.entries["ping"]
    dispatcher.invoke.entries["ping"] = lambda *args, **params: Success("pong")
    dispatcher.invoke.entries["ping"].__signature__ = ping.__signature__
    assert request(dispatcher, "ping", None, 9) == {"jsonrpc": "2.0", "result": "pong", "id": 9}
    dispatcher.invoke.entries["ping"] = lambda *args, **params: Error(
        Code.INTERNAL_ERROR.value, "no", {"x": 1}
    )
    dispatcher.invoke.entries["ping"].__signature__ = ping.__signature__
    assert request(dispatcher, "ping", None, 10) == error(Code.INTERNAL_ERROR, "no", 10, {"x": 1})
    dispatcher.invoke.entries["ping"] = ping
    assert request(dispatcher, "ping", None, 11) == {"jsonrpc": "2.0", "result": {}, "id": 11}


@pytest.mark.parametrize(
    ("args", "params"),
    [((), {}), (("call",), {}), (("call", 1, [2]), {}), (("call",), {"a": 1, "args": 2})],
)
def test_an_entry_binds_every_call_exactly_as_its_generic_signature_would(args, params):
    """jsonrpcserver checks each call with `inspect.signature(entry).bind`: the entries' signature
    binds without the generic walk, to the same arguments."""
    import inspect

    entry = JsonRpc(METHODS).entries["ping"]
    signature = inspect.signature(entry)
    assert [p.kind for p in signature.parameters.values()] == [
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]
    generic = inspect.Signature(list(signature.parameters.values()))
    fast, slow = signature.bind(*args, **params), generic.bind(*args, **params)
    assert fast == slow and fast.arguments == slow.arguments
    assert fast.args == slow.args and fast.kwargs == slow.kwargs


# --- the lifecycle and the bounds ------------------------------------------------------------


def test_before_initialize_only_the_lifecycle_and_stateless_requests_are_served():
    fresh = make_dispatcher(initialized=False)
    assert request(fresh, "agents/get", {"agent_id": "r"}, 1) == error(
        Code.NOT_INITIALIZED, "server not initialized", 1
    )
    assert request(fresh, "ping", {}, 2) == {"jsonrpc": "2.0", "result": {}, "id": 2}
    version = SUPPORTED_VERSIONS[0]
    stateless = request(fresh, "ping", {"_meta": {VERSION_META_KEY: version}}, 3)
    assert stateless == {"jsonrpc": "2.0", "result": {"resultType": "complete"}, "id": 3}
    assert request(fresh, "ping", {"_meta": {VERSION_META_KEY: "2099-01-01"}}, 4) == error(
        Code.UNSUPPORTED_PROTOCOL_VERSION,
        "unsupported protocol version '2099-01-01'",
        4,
        {"supported": list(SUPPORTED_VERSIONS), "requested": "2099-01-01"},
    )
    assert request(fresh, "initialize", INIT, 5)["result"]["serverInfo"]["name"] == "subagentd"
    assert request(fresh, "initialize", INIT, 6) == error(
        Code.INVALID_REQUEST,
        "initialize was already called on this connection",
        6,
        {"reason": "INVALID_REQUEST"},
    )


def closing(dispatcher: Dispatcher, root: str, request_id: Any) -> Any:
    """agents/close of a root whose child's first turn is still running: the reply waits."""
    request(dispatcher, "agents/open", {"agent_id": root})
    request(dispatcher, "agents/spawn", {"caller": root, "label": "t", "prompt": "go"})
    return request(dispatcher, "agents/close", {"agent_id": root}, request_id)


def test_a_waiting_reply_is_owed_and_cancelling_it_answers_request_cancelled():
    dispatcher = make_dispatcher()
    pending = closing(dispatcher, "root", "close")
    assert isinstance(pending, Pending) and dispatcher.ledger.pending == {"close": pending}
    assert request(dispatcher, "agents/close", {"agent_id": "root"}, "close") == error(
        Code.INVALID_REQUEST,
        'Invalid Request: id "close" is already used by a request that is still waiting',
        "close",
    )
    dispatcher.ledger.answer(pending)  # as the connection does: owed until done or cancelled
    assert dispatcher.ledger.frames == []
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": "close"},
    }
    assert dispatcher.dispatch(cancel) is None
    assert [msgspec.json.decode(f) for f in dispatcher.ledger.frames] == [
        error(Code.REQUEST_CANCELLED, "request cancelled", "close")
    ]
    assert dispatcher.ledger.pending == {}


def test_beyond_the_bound_on_waiting_replies_a_request_is_overloaded():
    dispatcher = make_dispatcher(max_pending=1)
    assert isinstance(closing(dispatcher, "r1", "c1"), Pending)
    assert closing(dispatcher, "r2", "c2") == error(
        Code.OVERLOADED,
        "too many requests waiting (1); retry with backoff",
        "c2",
        {"reason": "OVERLOADED"},
    )


def test_the_start_up_path_answers_the_handshake_exactly_as_the_server_does():
    settings = Settings()
    direct = Dispatcher(Session(), settings, invoke_directly, methods=METHODS)
    served = make_dispatcher(initialized=False)
    for method, params in (("ping", {}), ("server/discover", {}), ("initialize", INIT)):
        assert msgspec.json.encode(request(direct, method, params, 9)) == msgspec.json.encode(
            request(served, method, params, 9)
        )
    assert direct.session.initialized and served.session.initialized


# --- frames read together ----------------------------------------------------------------------


def replies_together(dispatcher: Dispatcher, frames: list[bytes]) -> list[Any]:
    """The reply to each frame, read in one chunk (handle_frames), in order; None: unanswered."""
    replies: list[Any] = []
    dispatcher.handle_frames(frames, deliver=lambda reply: replies.append(plain(reply)))
    return replies


VOLATILE = frozenset({"activation_id", "message_id", "created_at", "updated_at"})


def steady(value: Any) -> Any:
    """A reply with what differs between two services (new ids, clock readings) blanked."""
    if isinstance(value, dict):
        return {k: "…" if k in VOLATILE else steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def frame(method: str, params: Any = None, request_id: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not None:
        message["id"] = request_id
    return msgspec.json.encode(message)


MIXED = [
    frame("agents/open", {"agent_id": "r"}, 1),
    frame("agents/spawn", {"caller": "r", "label": "t", "prompt": "go", "child_id": "c"}, 2),
    frame("agents/get", {"agent_id": "nobody"}, 3),  # refused inside the run
    frame("agents/get", {"agent_id": 5}, 4),  # invalid params inside the run
    b'{"jsonrpc": ',  # a parse error ends the run
    frame("tools/call", {"name": "list_agents", "_meta": {"subagentd/caller": "r"}}, 5),
    frame("send_message", {"caller": "r", "subagent_id": "c", "message": "hi"}, 6),
    frame("agents/open", {"agent_id": "quiet"}),  # a notification ends the run
    frame("ping", None, 7),
    frame("no/such", None, 8),  # no such method: refused before anything runs
    frame("agents/get", {"agent_id": "quiet"}, 9),
    b"[" + frame("ping", None, 10) + b"]",  # a batch frame is answered as one
    frame("agents/get", {"agent_id": "r"}, 11),
    frame("agents/get", {"agent_id": "c"}, 12),
]


def test_requests_read_together_are_answered_as_one_by_one():
    together = make_dispatcher()
    one_by_one = make_dispatcher()
    got = replies_together(together, MIXED)
    expected = [plain(one_by_one.handle_frame(f)) for f in MIXED]
    assert len(got) == len(expected) == len(MIXED)
    assert steady(got) == steady(expected)
    assert got[2] == error(
        Code.UNKNOWN_AGENT, got[2]["error"]["message"], 3, got[2]["error"]["data"]
    )
    assert got[3]["error"]["code"] == Code.INVALID_PARAMS.value
    assert got[7] is None and got[9] == error(
        Code.METHOD_NOT_FOUND, "Method not found", 8, {"method": "no/such"}
    )
    assert got[12]["result"]["agent_id"] == "r" and got[13]["result"]["agent_id"] == "c"


def test_frames_read_together_read_other_processes_leases_once_while_nothing_is_written():
    """The chunk is one snapshot for what other processes hold (core/agents.py `elsewhere`):
    three listings read the leases once; a chunk of one frame is not a snapshot; a write in the
    chunk makes the next listing read again; the snapshot ends with the chunk. (Descendants:
    a children listing reads the leases with its rows, in its one statement.)"""
    dispatcher = make_dispatcher()
    assert dispatcher.service is not None
    store, agents = dispatcher.service.store, dispatcher.service.agents
    request(dispatcher, "agents/open", {"agent_id": "r"})
    dispatcher.service.commit()  # as the connection does after each chunk
    reads: list[bool] = []
    foreign_leases = store.foreign_leases

    def counted(owner: str, now: float) -> list:
        reads.append(agents.in_snapshot)
        return foreign_leases(owner, now)

    store.foreign_leases = counted
    listing = {
        "name": "list_agents",
        "arguments": {"scope": "descendants"},
        "_meta": {"subagentd/caller": "r"},
    }
    three = [frame("tools/call", listing, i) for i in range(3)]
    assert all("result" in reply for reply in replies_together(dispatcher, three))
    assert reads == [True] and agents.in_snapshot is False
    replies_together(dispatcher, three[:1])
    assert reads == [True, False]
    spawn = {"caller": "r", "label": "t", "prompt": "go", "child_id": "c"}
    mixed = [three[0], frame("agents/spawn", spawn, 9), three[1], three[2]]
    got = replies_together(dispatcher, mixed)
    assert "result" in got[1] and reads == [True, False, True, True, True]
    assert got[3]["result"]["structuredContent"]["agents"][0]["id"] == "c"


def test_frames_read_together_each_see_the_state_the_ones_before_left():
    """Admission is frame by frame: the second close with the same id is refused while the
    first waits, and the bound on waiting replies counts the ones admitted earlier in the chunk."""
    dispatcher = make_dispatcher(max_pending=2)
    for root in ("a", "b", "c"):
        request(dispatcher, "agents/open", {"agent_id": root})
        request(dispatcher, "agents/spawn", {"caller": root, "label": "t", "prompt": "go"})
    frames = [
        frame("agents/close", {"agent_id": "a"}, "x"),
        frame("agents/close", {"agent_id": "b"}, "x"),
        frame("agents/close", {"agent_id": "b"}, "y"),
        frame("agents/close", {"agent_id": "c"}, "z"),
    ]
    got = replies_together(dispatcher, frames)
    assert isinstance(got[0], Pending) and isinstance(got[2], Pending)
    assert got[1] == error(
        Code.INVALID_REQUEST,
        'Invalid Request: id "x" is already used by a request that is still waiting',
        "x",
    )
    assert got[3] == error(
        Code.OVERLOADED,
        "too many requests waiting (2); retry with backoff",
        "z",
        {"reason": "OVERLOADED"},
    )


def test_an_unexpected_failure_among_frames_read_together_is_answered_alone(monkeypatch, caplog):
    def explode(call, params):
        raise RuntimeError("secret detail")

    monkeypatch.setitem(METHODS, "agents/get", handlers.Handler(explode, None, None, writes=False))
    dispatcher = make_dispatcher()
    got = replies_together(
        dispatcher, [frame("ping", None, 1), frame("agents/get", {}, 2), frame("ping", None, 3)]
    )
    assert got == [
        {"jsonrpc": "2.0", "result": {}, "id": 1},
        error(Code.INTERNAL_ERROR, "Internal error", 2),
        {"jsonrpc": "2.0", "result": {}, "id": 3},
    ]
    assert "secret detail" in caplog.text


# --- the error table ---------------------------------------------------------------------------


def test_every_code_has_exactly_one_exception_class():
    classes = [
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.SubagentdError)
    ]
    owners = {code: [c for c in classes if c.__dict__.get("code") == code] for code in Code}
    assert {code.name: len(found) for code, found in owners.items()} == {c.name: 1 for c in Code}
    for code in Code:
        assert type(errors.error_for(code, "x")).code == code


def test_every_exception_class_is_raised_somewhere():
    """No dead entries in the table: each class is constructed by subagentd's own code, or its
    code is named where core's tool rules pick the class by code (errors.error_for)."""
    package = Path(subagentd.__file__).parent
    constructed: set[str] = set()
    by_code: set[str] = set()
    for path in package.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                constructed.add(node.func.id)
                if node.func.id in ("error_for", "_not_delivered"):
                    first = node.args[0]
                    if isinstance(first, ast.Attribute):  # not the helper passing `code` on
                        by_code.add(first.attr)
    unused = [
        name
        for name, cls in vars(errors).items()
        if isinstance(cls, type)
        and issubclass(cls, errors.SubagentdError)
        and name not in constructed
        and cls.code.name not in by_code
    ]
    assert unused == []
