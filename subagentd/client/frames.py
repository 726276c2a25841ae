"""The wire format both clients share: NDJSON frames, request ids, typed results and notifications."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, MutableSequence
from typing import Any, TypeVar

import msgspec

from subagentd.client.errors import RpcError
from subagentd.schema.notifications import NOTIFICATIONS
from subagentd.schema.tools import ACTIVATION_META, CALLER_META, IDEMPOTENCY_META

DEFAULT_PROTOCOL_VERSION = "2025-06-18"
"""The MCP handshake-era version `initialize` proposes unless told otherwise."""

T = TypeVar("T")
N = TypeVar("N", bound=msgspec.Struct)

encode = msgspec.json.Encoder().encode
decode = msgspec.json.Decoder().decode
METHOD_OF: dict[Any, str] = {kind: name for name, kind in NOTIFICATIONS.items()}


def clean(params: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as params: a None field is left out (subagentd never takes null)."""
    return {key: value for key, value in params.items() if value is not None}


class Ids:
    """Request ids: 1, 2, 3, ... (tests may take one for a frame they write themselves)."""

    def __init__(self) -> None:
        self._count: Iterator[int] = itertools.count(1)

    def __next__(self) -> int:
        return next(self._count)


def request(request_id: Any, method: str, params: Any = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        frame["params"] = params
    return encode(frame) + b"\n"


def notification(method: str, params: Any = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        frame["params"] = params
    return encode(frame) + b"\n"


def is_notification(frame: Any) -> bool:
    return isinstance(frame, dict) and "method" in frame and "id" not in frame


def hand_over(
    message: dict[str, Any],
    handlers: dict[str, list[Callable[[Any], None]]],
    queue: MutableSequence[dict[str, Any]],
) -> bool:
    """A notification to the handlers registered for its method, or else into `queue`; True
    when it was queued."""
    registered = handlers.get(message["method"])
    if registered:
        for handler in list(registered):
            handler(message.get("params"))
        return False
    queue.append(message)
    return True


def outcome(response: dict[str, Any], method: str | None, result: type[T] | None) -> Any:
    """The result of a response (converted to `result` when given), or its error raised."""
    if "error" in response:
        error = response["error"]
        raise RpcError(error if isinstance(error, dict) else {"message": str(error)}, method)
    value = response.get("result")
    return value if result is None else msgspec.convert(value, result)


def matches(frame: dict[str, Any], method: str | None, match: dict[str, Any]) -> bool:
    """A notification frame with this method (any when None) whose params hold every `match` pair."""
    if method is not None and frame.get("method") != method:
        return False
    params = frame.get("params")
    if not isinstance(params, dict):
        return not match
    return all(params.get(key) == value for key, value in match.items())


def typed(kind: type[N], params: Any) -> N:
    """A notification's params as its schema Struct (e.g. `TurnStart`)."""
    return msgspec.convert(params, kind)


def tool_meta(
    caller: str | None, activation: str | None, idempotency_key: str | None
) -> dict[str, Any] | None:
    """The `_meta` of a `tools/list` or `tools/call`: who calls (else the server's --caller)."""
    meta = {
        CALLER_META: caller,
        ACTIVATION_META: activation,
        IDEMPOTENCY_META: idempotency_key,
    }
    return clean(meta) or None
