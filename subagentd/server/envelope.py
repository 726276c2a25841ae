"""JSON-RPC envelopes and per-connection lifecycle state; light to import (used at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec


@dataclass
class Session:
    """Per-connection lifecycle state."""

    initialized: bool = False
    default_caller: str | None = None


def error_reply(
    code: int, message: str, request_id: Any = None, data: Any = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": int(code), "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": request_id}


def success_reply(result: Any, request_id: Any, stateless: bool) -> dict[str, Any]:
    if stateless:
        result = msgspec.to_builtins(result) if result is not None else {}
        if isinstance(result, dict):
            result = {**result, "resultType": "complete"}
    return {"jsonrpc": "2.0", "result": {} if result is None else result, "id": request_id}


def valid_id(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )
