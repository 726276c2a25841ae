"""Bad input, property-based: the framer and the dispatcher never lose a request.

Every property runs against the real code: `FrameReader` directly, and the real `Connection`
through `InProcessServer` (one server per test function, shared by all of its examples, never
reset) or `python -m subagentd` for the memory bound. Budgets keep the default run short; set
`HYPOTHESIS_PROFILE=long` for a run with twenty times the examples.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subagentd.core.settings import TOOL_NAMES
from subagentd.schema.base import HostParams
from subagentd.schema.codes import Code
from subagentd.server.handlers import METHODS
from subagentd.wire.framing import _MAX_HEADER, BadHeader, FrameReader, Oversize
from tests.spawned import InProcessServer, ServerProcess, rss_kib

# --- budgets ---------------------------------------------------------------------------------

_LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("subagentd-fuzz", deadline=None, suppress_health_check=_QUIET)
settings.register_profile(
    "subagentd-fuzz-long", deadline=None, suppress_health_check=_QUIET, max_examples=2000
)


def budget(examples: int) -> settings:
    """Settings for one property: `examples` by default, twenty times more with the long profile."""
    return settings(
        settings.get_profile("subagentd-fuzz"),
        max_examples=examples * 20 if _LONG else examples,
    )


# --- the framer --------------------------------------------------------------------------------


def _feed_all(reader: FrameReader, chunks: list[bytes]) -> list[Any]:
    frames: list[Any] = []
    for chunk in chunks:
        frames += reader.feed(chunk)
    return frames + reader.finish()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def _lsp(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


_ndjson_piece = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"\n", b"\r\n", b" ", b"\n\n", b"{}", b'{"a":1}']),
    st.integers(0, 200).map(lambda n: b"x" * n),  # around and past the (small) limit
)
ndjson_streams = st.lists(_ndjson_piece, max_size=30).map(b"".join)

_lsp_piece = st.one_of(
    st.binary(max_size=80).map(_lsp),  # a well-formed frame, maybe over the limit
    st.just(_lsp(b"")),
    st.sampled_from(
        [
            b"Content-Length: x\r\n\r\n",
            b"Content-Length: -3\r\n\r\n",
            b"X-Other: 1\r\n\r\n",
            b"no colon\r\n\r\n",
            b"Content-Type: a\r\nContent-Length: 2\r\n\r\n{}",
        ]
    ),
    st.binary(max_size=20),  # junk: desynchronises the stream, which must stay deterministic
)
# Kept under the header allowance: longer header blocks have a test of their own below.
lsp_streams = st.lists(_lsp_piece, max_size=25).map(b"".join).filter(lambda b: len(b) < _MAX_HEADER)


@budget(300)
@given(
    mode=st.sampled_from(["ndjson", "auto"]),
    limit=st.integers(1, 64),
    data=ndjson_streams,
    cuts=st.lists(st.integers(0, 2000), max_size=20),
)
def test_ndjson_frames_do_not_depend_on_chunk_boundaries(mode, limit, data, cuts):
    whole = _feed_all(FrameReader(mode, limit), [data])
    chunked = _feed_all(FrameReader(mode, limit), _split(data, cuts))
    assert chunked == whole
    for frame in whole:
        if isinstance(frame, bytes):
            assert 0 < len(frame) <= limit and b"\n" not in frame


@budget(300)
@given(
    mode=st.sampled_from(["lsp", "auto"]),
    limit=st.integers(0, 64),
    data=lsp_streams,
    cuts=st.lists(st.integers(0, 8000), max_size=20),
)
def test_lsp_frames_do_not_depend_on_chunk_boundaries(mode, limit, data, cuts):
    if mode == "auto":
        data = b"Content-Length: 2\r\n\r\n{}" + data  # auto must detect LSP from the first bytes
    whole = _feed_all(FrameReader(mode, limit), [data])
    chunked = _feed_all(FrameReader(mode, limit), _split(data, cuts))
    assert chunked == whole
    for frame in whole:
        if isinstance(frame, bytes):
            assert len(frame) <= limit


def test_lsp_header_block_over_the_allowance_is_treated_alike_in_one_read_or_two():
    data = b"X-Pad: " + b"a" * 9000 + b"\r\nContent-Length: 2\r\n\r\n{}"
    whole = _feed_all(FrameReader("lsp", 100), [data])
    chunked = _feed_all(FrameReader("lsp", 100), [data[:8500], data[8500:]])
    assert chunked == whole


@budget(200)
@given(
    mode=st.sampled_from(["ndjson", "lsp", "auto"]),
    limit=st.integers(1, 4096),
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=3000),
            st.integers(0, 20000).map(lambda n: b"z" * n),  # long runs with no newline
            st.integers(0, 9000).map(lambda n: b"Content-Length: %d\r\n\r\n" % n),
        ),
        max_size=20,
    ),
)
def test_random_bytes_never_raise_and_never_grow_the_buffer_past_the_limit(mode, limit, chunks):
    reader = FrameReader(mode, limit)
    bound = max(limit, _MAX_HEADER) if mode != "ndjson" else limit
    for chunk in chunks:
        for frame in reader.feed(chunk):
            assert isinstance(frame, bytes | Oversize | BadHeader)
            if isinstance(frame, bytes):
                assert len(frame) <= limit
        assert len(reader._buf) <= bound
    for frame in reader.finish():
        assert not isinstance(frame, bytes) or len(frame) <= limit


# --- a model of what the dispatcher must answer -------------------------------------------------


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or type(value) is int


def _answer_for(message: Any) -> tuple[bool, Any]:
    """(must be answered, id of the answer) for one JSON-RPC message object, by the spec."""
    if not isinstance(message, dict):
        return True, None
    request_id = message.get("id")
    if not _valid_id(request_id):
        return True, None
    if (
        message.get("jsonrpc") != "2.0"
        or not isinstance(message.get("method"), str)
        or ("params" in message and not isinstance(message["params"], dict | list))
    ):
        return True, request_id
    return "id" in message, request_id


def expected(line: bytes) -> tuple[Any, ...] | None:
    """What one frame must produce: None, ("one", id[, code]) or ("batch", [ids])."""
    text = line.strip()
    if not text:
        return None
    try:
        message = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):  # too deep to decode is a parse error too
        return ("one", None, Code.PARSE_ERROR)
    if isinstance(message, list):
        if not message:
            return ("one", None, Code.INVALID_REQUEST)
        ids = [rid for answered, rid in map(_answer_for, message) if answered]
        return ("batch", ids) if ids else None
    answered, request_id = _answer_for(message)
    return ("one", request_id, None) if answered else None


def _same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def assert_well_formed(response: Any) -> None:
    assert isinstance(response, dict), response
    assert response.get("jsonrpc") == "2.0", response
    assert set(response) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), response
    assert _valid_id(response["id"]), response
    if "error" in response:
        error = response["error"]
        assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, error
        assert type(error["code"]) is int and isinstance(error["message"], str), error


def assert_answers(lines: list[bytes], frames: list[Any]) -> list[dict[str, Any]]:
    """Each line got exactly what the model says, in order; returns every response object."""
    wanted = [e for e in map(expected, lines) if e is not None]
    assert len(frames) == len(wanted), (lines, frames)
    responses: list[dict[str, Any]] = []
    for want, got in zip(wanted, frames, strict=True):
        if want[0] == "one":
            assert_well_formed(got)
            assert _same_id(got["id"], want[1]), (want, got)
            if want[2] is not None:
                assert got["error"]["code"] == want[2], got
            responses.append(got)
        else:
            assert isinstance(got, list), (want, got)
            for response in got:
                assert_well_formed(response)
            key = lambda v: (type(v).__name__, v)  # noqa: E731 - 1 and "1" are different ids
            assert Counter(key(r["id"]) for r in got) == Counter(key(i) for i in want[1])
            responses += got
    return responses


_sentinels = itertools.count()


def exchange(host, payload: bytes | list[bytes]) -> list[Any]:
    """Write the bytes (in pieces when given a list), then a ping; every frame before its reply."""
    sentinel = f"sentinel-{next(_sentinels)}"
    pieces = payload if isinstance(payload, list) else [payload]
    for piece in pieces:
        host.send_bytes(piece)
    host.send({"jsonrpc": "2.0", "id": sentinel, "method": "ping"})
    frames = []
    while True:
        frame = host.read_any(timeout=30)
        if isinstance(frame, dict) and frame.get("id") == sentinel:
            assert frame == {"jsonrpc": "2.0", "result": {}, "id": sentinel}
            break
        if isinstance(frame, dict) and "method" in frame and "id" not in frame:
            continue  # a notification to the host
        frames.append(frame)
    host.responses.clear()
    host.notifications.clear()
    host.raw.clear()
    return frames


# --- a small world that rejected requests must not change --------------------------------------

ROOT = "fuzz-root-5b0d0a6e"
CHILD = "fuzz-child-9c41f2"
ONE_SHOT = "fuzz-oneshot-7e13aa"


class World:
    def __init__(self, server: InProcessServer) -> None:
        self.server = server
        self.host = host = server.host
        host.open(ROOT, label="fuzz")
        child = host.spawn(ROOT, CHILD, label="kept")
        host.end_turn(CHILD, child["turn_id"], output="done")
        sent = host.tool("send_message", ROOT, subagent_id=CHILD, message="again")
        start = host.notification("turn/start", agent_id=CHILD)
        host.end_turn(CHILD, start["turn_id"])
        one_shot = host.spawn(ROOT, ONE_SHOT, label="quick", mode="one-shot")
        host.call("transcript/append", {"agent_id": ROOT, "events": [{"type": "note"}]})
        self.messages = [child["message_id"], sent["message_id"], one_shot["message_id"]]
        self.agents = [ROOT, CHILD, ONE_SHOT]
        host.drain_notifications()

    def snapshot(self) -> dict[str, Any]:
        call = self.host.call
        return {
            "tree": call("agents/list", {"root_id": ROOT, "scope": "descendants"}),
            "agents": [call("agents/get", {"agent_id": a}) for a in self.agents],
            "events": [
                len(call("transcript/read", {"agent_id": a, "limit": 100000})["events"])
                for a in self.agents
            ],
            "messages": [call("messages/get", {"message_id": m}) for m in self.messages],
        }


@pytest.fixture
def world():
    server = InProcessServer()
    server.host.initialize()
    yield World(server)
    server.stop()


# --- strategies for JSON and for request-like frames ---------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Methods a random frame may name. agents/close is left out (its reply is deferred by design) and so
# are the cancellation notifications (a test of their own below covers them sent as requests).
FUZZ_METHODS = sorted(set(METHODS) - {"agents/close"})
ids = st.one_of(
    st.integers(-(2**70), 2**70), st.text(max_size=8), st.none(), st.sampled_from([1, 2, "a"])
)
requestish = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), st.just("2.0"), json_scalars),
        "id": st.one_of(ids, ids, json_values),
        "method": st.one_of(st.sampled_from([*FUZZ_METHODS, "nope"]), json_scalars),
        "params": st.one_of(
            st.dictionaries(st.text(max_size=10), json_values, max_size=4),
            st.lists(json_values, max_size=3),
            json_scalars,
        ),
        "extra": json_values,
    },
)
well_formed = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(["ping", "tools/list", "nope"])},
    optional={"id": st.sampled_from([1, 2, "a", None, 0])},  # few ids: duplicates are frequent
)


def _line(value: Any) -> bytes:
    return json.dumps(value).encode()


def _nested(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def _truncated(data: st.DataObject) -> bytes:
    text = _line(data.draw(requestish))
    return text[: data.draw(st.integers(0, max(0, len(text) - 1)))]


def _invalid_utf8(data: st.DataObject) -> bytes:
    text = _line({"jsonrpc": "2.0", "id": data.draw(ids), "method": "ping", "params": {"s": "ab"}})
    bad = data.draw(
        st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"])
    )
    return text.replace(b"ab", b"a" + bad + b"b", 1)


@st.composite
def bad_lines(draw: Any) -> bytes:
    """One frame's bytes (no newline): garbage, truncated, invalid UTF-8, nested, odd requests."""
    data = draw(st.data())
    kind = draw(
        st.sampled_from(["bytes", "truncated", "utf8", "nested", "request", "batch", "scalar"])
    )
    if kind == "bytes":
        return draw(st.binary(max_size=200)).replace(b"\n", b" ")
    if kind == "truncated":
        return _truncated(data)
    if kind == "utf8":
        return _invalid_utf8(data)
    if kind == "nested":
        inner = _nested(draw(st.integers(1, 400)), draw(st.sampled_from(["array", "object"])))
        if draw(st.booleans()):
            return inner  # a batch of a batch of ...
        return b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"deep":' + inner + b"}}"
    if kind == "request":
        return _line(draw(requestish))
    if kind == "batch":
        return _line(draw(st.lists(st.one_of(requestish, well_formed, json_scalars), max_size=6)))
    return _line(draw(json_values))


# --- the dispatcher: every request answered exactly once, the server stays up --------------------


def test_bad_frames_get_exactly_one_answer_each_and_leave_state_alone(world):
    before = world.snapshot()

    @budget(80)
    @given(
        lines=st.lists(bad_lines(), min_size=1, max_size=12), cuts=st.lists(st.integers(0, 4000))
    )
    def burst(lines, cuts):
        payload = b"".join(line + b"\n" for line in lines)
        frames = exchange(world.host, _split(payload, cuts))
        assert_answers(lines, frames)

    burst()
    assert world.server.thread.is_alive()
    assert world.snapshot() == before


def test_interleaved_batches_with_duplicate_ids_are_each_answered_in_full(world):
    @budget(100)
    @given(
        frames=st.lists(
            st.one_of(well_formed, st.lists(st.one_of(well_formed, requestish), max_size=8)),
            min_size=1,
            max_size=10,
        ),
        cuts=st.lists(st.integers(0, 3000)),
    )
    def interleaved(frames, cuts):
        lines = [_line(f) for f in frames]
        payload = b"".join(line + b"\n" for line in lines)
        responses = assert_answers(lines, exchange(world.host, _split(payload, cuts)))
        for response in responses:
            assert response.get("error", {}).get("code") != Code.INTERNAL_ERROR, response

    interleaved()


@pytest.mark.parametrize("where", ["id", "method", "agent_id", "unknown_field", "batch"])
def test_strings_of_a_few_megabytes_are_answered(world, where):
    big = "\u00e9x" * (3 * 1024 * 1024 // 3)  # 3 MiB of UTF-8, well under --max-frame-bytes
    request: Any = {"jsonrpc": "2.0", "id": 1, "method": "agents/get", "params": {"agent_id": ROOT}}
    if where == "id":
        request["id"] = big
    elif where == "method":
        request["method"] = big
    elif where == "agent_id":
        request["params"]["agent_id"] = big
    elif where == "unknown_field":
        request["params"]["blob"] = big
    else:
        request = [request, {"jsonrpc": "2.0", "method": "ping", "params": {"blob": big}}]
    line = _line(request)
    assert len(line) < 16 * 1024 * 1024
    frames = exchange(world.host, line + b"\n")
    [response] = assert_answers([line], frames)
    if where == "id":
        assert response["id"] == big
    elif where == "method":
        assert response["error"]["code"] == Code.METHOD_NOT_FOUND
    elif where == "agent_id":
        assert response["error"]["data"]["reason"] == "UNKNOWN_AGENT"
    elif where == "unknown_field":  # a host method refuses a field it does not have
        assert response["error"]["data"] == {"reason": "INVALID_PARAMS", "field": "blob"}
    else:
        assert response["result"]["agent_id"] == ROOT  # ping tolerates unknown fields


# --- wrong types in every param of every method ------------------------------------------------

OPENRPC = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "clients" / "openrpc.json").read_text()
)
_SCHEMAS = OPENRPC["components"]["schemas"]
_KIND_VALUES = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(-(2**70), 2**70),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    "string": st.text(max_size=10),
    "array": st.lists(json_scalars, max_size=3),
    "object": st.dictionaries(st.text(max_size=6), json_scalars, max_size=3),
}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = _SCHEMAS[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _accepted_kinds(schema: dict[str, Any]) -> set[str] | None:
    """JSON kinds a schema accepts; None when it accepts anything."""
    schema = _resolve(schema)
    if "anyOf" in schema:
        kinds: set[str] = set()
        for option in schema["anyOf"]:
            accepted = _accepted_kinds(option)
            if accepted is None:
                return None
            kinds |= accepted
        return kinds
    if "enum" in schema:
        return {"string"}
    if "type" in schema:
        return {schema["type"], "integer"} if schema["type"] == "number" else {schema["type"]}
    return None


def _not_in(values: Any) -> Callable[[str], bool]:
    return lambda s: s not in values


def _with_others(name: str, others: dict[str, Any]) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {**others, name: v}


def wrong_values(schema: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    """Values of a JSON type the schema refuses (and refused items or properties inside it)."""
    kinds = _accepted_kinds(schema)
    if kinds is None:
        return None
    options = [strategy for kind, strategy in _KIND_VALUES.items() if kind not in kinds]
    resolved = [_resolve(o) for o in _resolve(schema).get("anyOf", [schema])]
    for option in resolved:
        if "enum" in option:
            options.append(st.text(max_size=10).filter(_not_in(option["enum"])))
        if option.get("type") == "array" and "items" in option:
            item = wrong_values(option["items"])
            if item is not None:
                options.append(st.lists(item, min_size=1, max_size=2))
        for name, prop in option.get("properties", {}).items():
            inner = wrong_values(prop)
            if inner is not None:
                others = {r: "t" for r in option.get("required", []) if r != name}
                options.append(inner.map(_with_others(name, others)))
    return st.one_of(options)


TOOL_METHODS = set(TOOL_NAMES)  # the tools' direct methods


def valid_base(method: str, world: World) -> dict[str, Any]:
    """Params that would be accepted (and would change state) but for the one wrong field."""
    values = {
        "agent_id": ROOT,
        "root_id": ROOT,
        "caller": ROOT,
        "subagent_id": CHILD,
        "message_id": world.messages[0],
        "turn_id": "no-such-turn",
        "message": "m",
        "label": "l",
        "prompt": "p",
        "output": "o",
        "question": "q?",
        "name": "list_agents",
        "events": [{"type": "fuzz"}],
        "reason": "completed",
        "uri": f"subagentd://agent/{ROOT}",
        "seconds": 1,  # clock/advance (refused without --clock manual, after its params)
        "taskId": "no-such-task",  # tasks/* (not found, after its params)
        "question_id": "no-such-question",  # question/answer (not open, after its params)
        "action": "cancel",
    }
    spec = next(m for m in OPENRPC["methods"] if m["name"] == method)
    return {
        p["name"]: values[p["name"]]
        for p in spec["params"]
        if p.get("required") or p["name"] == "caller"
    }


WRONG_TYPE_CASES = [
    (m["name"], p["name"], p["schema"])
    for m in OPENRPC["methods"]
    if m["name"] in METHODS and not m["name"].startswith("notifications/")
    for p in m["params"]
    if wrong_values(p["schema"]) is not None
]


_REQUIRED = {
    (m["name"], p["name"]) for m in OPENRPC["methods"] for p in m["params"] if p.get("required")
}


def _null_means_absent(method: str, name: str, value: Any) -> bool:
    # The tools treat a null argument as an absent one (core/arguments.py): null for an optional
    # argument (list_agents' scope) means its default, and a null caller means the default caller.
    return method in TOOL_METHODS and value is None and (method, name) not in _REQUIRED


def test_a_wrong_type_in_any_param_of_any_method_is_invalid_params(world):
    before = world.snapshot()

    @budget(200)
    @given(st.data())
    def wrong_type(data):
        method, name, schema = data.draw(st.sampled_from(WRONG_TYPE_CASES))
        value = data.draw(
            wrong_values(schema).filter(lambda v: not _null_means_absent(method, name, v))
        )
        params = {**valid_base(method, world), name: value}
        line = _line({"jsonrpc": "2.0", "id": 41, "method": method, "params": params})
        [response] = assert_answers([line], exchange(world.host, line + b"\n"))
        assert response.get("error", {}).get("code") == Code.INVALID_PARAMS, (params, response)
        assert response["error"]["data"]["reason"] == "INVALID_PARAMS"

    wrong_type()
    assert world.snapshot() == before


def test_every_method_and_param_refuses_one_value_of_each_wrong_type(world):
    """The exhaustive sweep behind the property above: each (method, param, wrong JSON type)."""
    before = world.snapshot()
    samples = {"null": None, "boolean": True, "integer": 7, "number": 1.5, "string": "s"}
    samples |= {"array": [1], "object": {"k": 1}}
    failures = []
    for method, name, schema in WRONG_TYPE_CASES:
        for kind, value in samples.items():
            if kind in (_accepted_kinds(schema) or set()) or _null_means_absent(
                method, name, value
            ):
                continue
            params = {**valid_base(method, world), name: value}
            line = _line({"jsonrpc": "2.0", "id": 42, "method": method, "params": params})
            [response] = assert_answers([line], exchange(world.host, line + b"\n"))
            if response.get("error", {}).get("code") != Code.INVALID_PARAMS:
                failures.append((method, name, value, response))
    assert failures == []
    assert world.snapshot() == before


@pytest.mark.parametrize("method", sorted(TOOL_METHODS))
def test_a_wrong_type_of_meta_on_a_direct_tool_method_is_invalid_params(world, method):
    params = {**valid_base(method, world), "_meta": 7}
    if method == "send_message":
        params["message"] = "must not be queued"
    line = _line({"jsonrpc": "2.0", "id": 43, "method": method, "params": params})
    [response] = assert_answers([line], exchange(world.host, line + b"\n"))
    assert response.get("error", {}).get("code") == Code.INVALID_PARAMS, response


# --- unknown fields: tolerated by MCP methods and tools, refused by host methods; none changes
# --- anything ----------------------------------------------------------------------------------


HOST_PARAMS_METHODS = {
    name
    for name, handler in METHODS.items()
    if handler.params is not None and issubclass(handler.params, HostParams)
}


def _read_only_requests(world: World) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("ping", {}),
        ("agents/get", {"agent_id": CHILD}),
        ("agents/list", {"root_id": ROOT, "scope": "descendants"}),
        ("transcript/read", {"agent_id": ROOT}),
        ("messages/get", {"message_id": world.messages[1]}),
        ("tools/list", {"_meta": {"subagentd/caller": CHILD}}),
        ("list_agents", {"caller": ROOT, "scope": "descendants"}),
    ]


def test_unknown_fields_in_params_or_envelope_do_not_change_the_answer(world):
    requests = _read_only_requests(world)
    plain = [world.host.call(method, params) for method, params in requests]
    envelope_keys = {"jsonrpc", "id", "method", "params"}

    @budget(100)
    @given(
        index=st.integers(0, len(requests) - 1),
        extra_params=st.dictionaries(
            st.text(min_size=1, max_size=10).filter(lambda k: not k.startswith("_")),
            json_values,
            max_size=3,
        ),
        extra_envelope=st.dictionaries(
            st.text(min_size=1, max_size=10).filter(lambda k: k not in envelope_keys),
            json_values,
            max_size=3,
        ),
    )
    def unknown(index, extra_params, extra_envelope):
        method, params = requests[index]
        known = {p["name"] for m in OPENRPC["methods"] if m["name"] == method for p in m["params"]}
        extra_params = {k: v for k, v in extra_params.items() if k not in known}
        if method in TOOL_NAMES:  # a tool's unknown argument is refused (docs/semantics.md §3)
            extra_params = {}
        message = {
            **extra_envelope,
            "jsonrpc": "2.0",
            "id": 44,
            "method": method,
            "params": {**params, **extra_params},
        }
        line = _line(message)
        [response] = assert_answers([line], exchange(world.host, line + b"\n"))
        if extra_params and method in HOST_PARAMS_METHODS:
            first = next(iter(extra_params))
            assert response["error"]["code"] == Code.INVALID_PARAMS
            assert response["error"]["data"]["field"] == first
        else:
            assert response == {"jsonrpc": "2.0", "result": plain[index], "id": 44}

    before = world.snapshot()
    unknown()
    assert world.snapshot() == before


# --- known failures, reproduced -----------------------------------------------------------------


@pytest.mark.parametrize("depth", [100_000, 2000])
def test_deeply_nested_json_is_a_parse_error_and_the_server_keeps_serving(depth):
    server = InProcessServer()
    try:
        server.host.initialize()
        line = _nested(depth, "array")
        frames = exchange(server.host, line + b"\n")
        [reply] = assert_answers([line], frames)
        assert reply["id"] is None and reply["error"]["code"] == Code.PARSE_ERROR
    finally:
        server.stop()


@pytest.mark.parametrize("after", [2**63, -(2**63) - 1])
def test_an_out_of_range_transcript_position_is_invalid_params(world, after):
    params = {"agent_id": ROOT, "after": after}
    line = _line({"jsonrpc": "2.0", "id": 45, "method": "transcript/read", "params": params})
    [response] = assert_answers([line], exchange(world.host, line + b"\n"))
    assert response.get("error", {}).get("code") == Code.INVALID_PARAMS, response


@pytest.mark.parametrize(
    ("method", "key"), [("notifications/cancelled", "requestId"), ("$/cancelRequest", "id")]
)
def test_a_cancellation_sent_as_a_request_is_answered(world, method, key):
    line = _line({"jsonrpc": "2.0", "id": 46, "method": method, "params": {key: 12345}})
    assert_answers([line], exchange(world.host, line + b"\n"))


# --- the subprocess: memory stays bounded under thousands of bad frames -------------------------


def test_thousands_of_bad_frames_keep_the_process_up_and_its_memory_bounded():
    process = ServerProcess()
    try:
        host = process.host
        host.initialize()
        exchange(host, b"")
        baseline = rss_kib(process.proc.pid)
        sent = 0

        @budget(25)
        @given(lines=st.lists(bad_lines(), min_size=60, max_size=120))
        def burst(lines):
            nonlocal sent
            payload = b"".join(line + b"\n" for line in lines)
            assert_answers(lines, exchange(host, payload))
            sent += len(lines)

        burst()
        big = b'["' + b"x" * (4 * 1024 * 1024) + b'",'  # 4 MiB, truncated: a parse error
        for _ in range(8):
            assert_answers([big], exchange(host, big + b"\n"))
        grown = rss_kib(process.proc.pid) - baseline
        assert process.proc.poll() is None
        assert grown < 100 * 1024, f"RSS grew by {grown} KiB after {sent} bad frames"
        assert host.call("ping") == {}
    finally:
        assert process.stop() == 0, process.stderr_text()[-2000:]


# --- hostile ids, labels and sizes (SECURITY.md) -------------------------------------------------

# The agent-id rule as a table (PROTOCOL.md section 3): what must never be part of a new id.
_INVISIBLE = {0xAD, 0x061C, 0x180E, 0xFEFF}
for _low, _high in ((0, 0x1F), (0x7F, 0x9F), (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x206F)):
    _INVISIBLE.update(range(_low, _high + 1))
_INVISIBLE.update(range(0xE0000, 0xE0080))


def breaks_the_id_rule(value: str) -> bool:
    return (
        not value
        or value[0] == "@"
        or len(value.encode()) > 128
        or any(ord(c) in _INVISIBLE for c in value)
    )


hostile_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\n", "\r", "\x1b", "\x85", "\u202e", "\u200b", "\u2028", "@", "é"]),
    ),
    max_size=140,
)


@budget(150)
@given(child_id=hostile_text, label=hostile_text)
def test_hostile_ids_are_refused_by_the_rule_and_no_label_adds_a_listed_line(child_id, label):
    server = _shared_server(max_children=0, max_live_per_root=0)
    host = server.host
    try:
        request = {"caller": ROOT, "child_id": child_id, "label": label, "prompt": "p"}
        rid = host.start("agents/spawn", request)
        reply = host.response(rid)
        if breaks_the_id_rule(child_id):
            assert reply["error"]["code"] == Code.INVALID_PARAMS, reply
        elif child_id in _SPAWNED or child_id in (ROOT, LIVE_CHILD):  # examples repeat values
            assert reply["error"]["code"] == Code.DUPLICATE_CHILD, reply
        else:
            _SPAWNED.add(child_id)
            assert reply["result"]["child_id"] == child_id, reply
            assert "\n" not in reply["result"]["text"]
        listing = host.tool("list_agents", ROOT, scope="descendants")
        lines = listing["text"].split("\n")
        assert len(lines) == max(1, len(listing["agents"]))
        assert all(line.isprintable() for line in lines), lines
    finally:
        host.drain_notifications()


@budget(150)
@given(message=st.text(max_size=40))
def test_a_message_is_queued_exactly_when_it_fits_the_byte_limit_and_refusals_write_nothing(
    message,
):
    server = _shared_server(max_queued=0, max_text_bytes=SMALL_TEXT)
    host = server.host
    before = host.call("agents/get", {"agent_id": LIVE_CHILD})["queued"]
    rid = host.start(
        "send_message", {"caller": ROOT, "subagent_id": LIVE_CHILD, "message": message}
    )
    reply = host.response(rid)
    after = host.call("agents/get", {"agent_id": LIVE_CHILD})["queued"]
    if len(message.encode()) <= SMALL_TEXT:
        assert "result" in reply and after == before + 1, reply
    else:
        assert reply["error"]["data"]["quota"] == "max-text-bytes", reply
        assert after == before


LIVE_CHILD = "fuzz-live-child"
SMALL_TEXT = 48
_SERVERS: dict[str, InProcessServer] = {}
_SPAWNED: set[str] = set()


def _shared_server(**quotas: Any) -> InProcessServer:
    """One server per set of quotas, shared by a property's examples (and stopped at the end)."""
    key = repr(sorted(quotas.items()))
    if key not in _SERVERS:
        server = InProcessServer(**quotas)
        server.host.initialize()
        server.host.open(ROOT)
        server.host.spawn(ROOT, LIVE_CHILD)  # its first turn stays open: messages wait
        _SERVERS[key] = server
    return _SERVERS[key]


@pytest.fixture(autouse=True, scope="module")
def _stop_shared_servers():
    yield
    while _SERVERS:
        _SERVERS.popitem()[1].stop()
