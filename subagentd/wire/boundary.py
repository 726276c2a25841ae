"""The one exception-to-wire boundary: domain errors keep their code, anything else becomes -32603.

Two shapes, as PROTOCOL.md section 8 shows them: a refusal before a method runs (a bad envelope,
a lifecycle rule, a bound) carries its exception's `data` as it is; a failure of a method carries
`data.reason` (the code's name) and, for the direct tool methods, the model-visible `text`.
Light to import (the start-up fast path uses it): msgspec and subagentd's own types only.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from subagentd.core.texts import REFUSED
from subagentd.errors import DRIVER_ERRORS, InvalidParamsError, StorageFailedError, SubagentdError
from subagentd.schema.base import ID_PATTERN, ID_RULE
from subagentd.schema.codes import Code

log = logging.getLogger("subagentd")

INTERNAL_MESSAGE = "Internal error"
_ID_REGEX = f"`str` matching regex {ID_PATTERN!r}"


def error_text(exc: SubagentdError) -> str:
    """The text a model sees for a refused tool call (SEMANTICS.md: `Error: <reason>`)."""
    return REFUSED + exc.message


def domain_error(exc: BaseException) -> SubagentdError:
    """Any failure as the domain error the wire shows: params that do not validate are -32602,
    and anything unexpected is logged with its traceback and becomes a bare -32603."""
    if isinstance(exc, SubagentdError):
        return exc
    if isinstance(exc, msgspec.ValidationError):
        detail = str(exc).replace(_ID_REGEX, f"an agent id ({ID_RULE})")  # the rule, not a regex
        return InvalidParamsError(f"invalid params: {detail}")
    if DRIVER_ERRORS and isinstance(exc, tuple(DRIVER_ERRORS)):  # a read the database failed
        log.warning(
            "a read failed: %s", str(exc).strip().splitlines()[0] if str(exc).strip() else exc
        )
        return StorageFailedError("error")
    log.error("unexpected failure while handling a request", exc_info=exc)
    return SubagentdError(INTERNAL_MESSAGE)


def refusal(exc: SubagentdError, request_id: Any = None) -> dict[str, Any]:
    """The reply to a request refused before its method ran: code, message and data as raised."""
    error: dict[str, Any] = {"code": int(exc.code), "message": exc.message}
    if exc.data is not None:
        error["data"] = exc.data
    return {"jsonrpc": "2.0", "error": error, "id": request_id}


def failure(exc: BaseException, tool: bool) -> dict[str, Any]:
    """The error object of a method that failed (for its JSON-RPC reply): no exception text
    ever reaches the wire except a domain error's own message."""
    err = domain_error(exc)
    if type(err) is SubagentdError:
        return {"code": int(err.code), "message": INTERNAL_MESSAGE}
    data: dict[str, Any] = {"reason": Code(err.code).name}
    if isinstance(err.data, dict):
        data.update(err.data)
    if tool:
        data["text"] = error_text(err)
    return {"code": int(err.code), "message": err.message, "data": data}
