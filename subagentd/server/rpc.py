"""Methods run through jsonrpcserver's public dispatch (`dispatch_to_response`).

The dispatcher has checked the envelope already, so the message goes in decoded (`deserializer`
and `validator` pass it through: msgspec decoded it, the dispatcher validated it). The `context`
is the request's Call. Each method is an entry returning jsonrpcserver's `Success` or `Error`,
never raising: server/boundary.py shapes every failure, so no exception text reaches the wire.
The entry also puts its reply on the Call: the Response that `dispatch_to_response` gives back
only says whether a reply is owed (None for a notification), since what it holds is reachable
through private attributes only; this skips `dispatch_to_serializable`'s conversion (and its
per-call `typing.cast`), about 20 calls per message (docs/architecture.md). A method with no
entry never gets here: the dispatcher refuses it (-32601, with the closest method's name).
Entries carry a precomputed `__signature__`: jsonrpcserver checks the arguments of every call
with `inspect.signature(entry).bind(...)`, which would otherwise rebuild the signature each time;
and since `(*args, **params)` binds any call, its `bind` skips the generic walk (AnyArguments).

Requests read together go through one `dispatch_to_response` as a JSON-RPC batch (`batch`): its
per-dispatch work (the Either chain, `compose`, `extract_list`) is then paid once per run of
frames, not once per frame. The context is then the run's `Members`, and each entry answers its
member through the dispatcher's own per-frame path (server/dispatcher.py `handle_frames`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from jsonrpcserver import Error, Success, dispatch_to_response

from subagentd.errors import SubagentdError
from subagentd.server.boundary import INTERNAL_MESSAGE, failure, refusal
from subagentd.server.call import Call, Handler
from subagentd.server.envelope import result_value


def _as_is(message: Any) -> Any:
    """Both the deserializer and the validator: the message arrives decoded and checked."""
    return message


def _takes_anything(*args: Any, **params: Any) -> None:
    """The signature of every entry: the Call, then positional or named params."""


class AnyArguments(inspect.Signature):
    """The signature `(*args, **params)`, whose `bind` cannot fail: it binds without the generic
    parameter walk (measured: 1.5 µs against 6.5 µs per request, in jsonrpcserver's
    `validate_args`), to the same BoundArguments as `Signature.bind`."""

    __slots__ = ()

    def bind(self, /, *args: Any, **params: Any) -> inspect.BoundArguments:
        bound: dict[str, Any] = {"args": args} if args else {}
        if params:
            bound["params"] = params
        return inspect.BoundArguments(self, bound)


_SIGNATURE = AnyArguments(list(inspect.signature(_takes_anything).parameters.values()))
_DONE = Success(None)  # a method succeeded; its result is in the reply it put on its Call


class Members:
    """The context of a batch: its requests in order, each answered by `each` from inside the
    entry jsonrpcserver runs for it (jsonrpcserver runs a batch's members one by one, in order)."""

    def __init__(self, messages: list[dict[str, Any]], each: Callable[[dict[str, Any]], None]):
        self.messages = messages
        self.each = each
        self.served = 0

    def answer(self, method: str) -> None:
        message = self.messages[self.served]
        if message["method"] != method:  # never: jsonrpcserver keeps the batch's order
            raise AssertionError(f"batch member {self.served} is {message['method']}, not {method}")
        self.served += 1
        self.each(message)


class JsonRpc:
    """The Invoke of the server: the method named by a checked message, run by jsonrpcserver."""

    def __init__(self, methods: Mapping[str, Handler]) -> None:
        self.entries = {name: entry(name, handler) for name, handler in methods.items()}

    def batch(self, messages: list[dict[str, Any]], each: Callable[[dict[str, Any]], None]) -> int:
        """Requests with an entry, checked already, run as one batch; `each(message)` answers
        one from inside its entry. Returns how many were answered (all, unless jsonrpcserver
        stopped early; the caller answers the rest one by one)."""
        members = Members(messages, each)
        request: Any = messages  # decoded already (see __call__)
        dispatch_to_response(
            request,
            self.entries,
            context=members,
            deserializer=_as_is,
            validator=_as_is,
        )
        return members.served

    def __call__(
        self, call: Call, handler: Handler, message: dict[str, Any]
    ) -> dict[str, Any] | None:
        request: Any = message  # decoded already: _as_is takes it as it is (typed as JSON text)
        owed = dispatch_to_response(
            request,
            self.entries,
            context=call,
            deserializer=_as_is,
            validator=_as_is,
        )
        if owed is None:  # a notification: the method ran, nothing is answered
            return None
        if call.reply is None:  # jsonrpcserver answered without running the entry (never seen)
            return refusal(SubagentdError(INTERNAL_MESSAGE), call.request_id)
        return call.reply


def entry(name: str, handler: Handler) -> Callable[..., Any]:
    """A jsonrpcserver method for one handler: Success, or Error(code, message, data); the
    reply itself goes on the Call (or, in a batch, to the dispatcher through Members)."""

    def run(*args: Any, **params: Any) -> Any:
        context = args[0]
        if type(context) is Members:
            context.answer(name)
            return _DONE
        call: Call = context
        try:
            value = call.run(handler, args[1:], params)
        except Exception as exc:
            error = failure(exc, handler.tool)
            call.reply = {"jsonrpc": "2.0", "error": error, "id": call.request_id}
            return Error(**error)
        if call.deferred is not None:  # the reply waits for it (the dispatcher owes it)
            value = None
        else:
            value = result_value(value, call.stateless)
        call.reply = {"jsonrpc": "2.0", "result": value, "id": call.request_id}
        return _DONE

    run.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # inspect honours it; mypy's function type lacks it
    return run
