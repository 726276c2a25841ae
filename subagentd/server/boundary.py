"""The one exception-to-wire boundary: domain errors keep their code, anything else becomes -32603."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from jsonrpcserver import Success
from jsonrpcserver.exceptions import JsonRpcError

from subagentd.errors import InvalidParamsError, SubagentdError
from subagentd.schema.base import ID_PATTERN, ID_RULE
from subagentd.schema.codes import Code

log = logging.getLogger("subagentd")

INTERNAL_MESSAGE = "Internal error"


def error_data(exc: SubagentdError, with_text: bool) -> dict[str, Any]:
    """`data` of a domain error: its code's name, and for tool calls the model-visible text."""
    data: dict[str, Any] = {"reason": Code(exc.code).name}
    if isinstance(exc.data, dict):
        data.update(exc.data)
    if with_text:
        data["text"] = f"Error: {exc.message}"
    return data


_ID_REGEX = f"`str` matching regex {ID_PATTERN!r}"


def invalid_params(exc: msgspec.ValidationError) -> SubagentdError:
    detail = str(exc).replace(_ID_REGEX, f"an agent id ({ID_RULE})")  # name the rule, not a regex
    return InvalidParamsError(f"invalid params: {detail}")


def guard(run: Callable[[], Any], *, tool: bool = False) -> Any:
    """Run one handler; translate every failure into a JSON-RPC error (never exception text)."""
    try:
        return Success(run())
    except SubagentdError as exc:
        raise JsonRpcError(exc.code, exc.message, error_data(exc, tool)) from None
    except msgspec.ValidationError as exc:
        err = invalid_params(exc)
        raise JsonRpcError(err.code, err.message, error_data(err, False)) from None
    except Exception:
        log.exception("unexpected failure while handling a request")
        raise JsonRpcError(Code.INTERNAL_ERROR, INTERNAL_MESSAGE) from None
