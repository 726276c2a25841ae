"""Methods run through jsonrpcserver's public dispatch (`dispatch_to_response`, its replies made
plain by jsonrpcserver's `to_serializable_one`: what `dispatch_to_serializable` does, without the
`typing.cast` that subscripts four typing generics on every call, ~3 µs a request).

The dispatcher has checked the envelope already, so the message goes in decoded: the
`deserializer` is `dict` (a shallow copy of it) and the `validator` `id` (its value is unused):
msgspec decoded it and the dispatcher validated it, and neither is a Python call. The `context`
is the request's Call. Each method is an entry returning jsonrpcserver's `Success` or `Error`,
never raising: wire/boundary.py shapes every failure, so no exception text reaches the wire.
The entry's result is what the method returned (wire/call.py `run_method`), and
jsonrpcserver builds the reply from it (`to_serializable_one`). A method whose reply comes
later returns Success(the Deferred): the dispatcher owes that reply (wire/ledger.py). A method
with no entry never gets here: the dispatcher refuses it (-32601, with the closest method's name).
Entries carry a precomputed `__signature__`: jsonrpcserver checks the arguments of every call
with `inspect.signature(entry).bind(...)`, which would otherwise rebuild the signature each time;
and since `(*args, **params)` binds any call, its `bind` skips the generic walk (AnyArguments).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from jsonrpcserver import Error, Success, dispatch_to_response
from jsonrpcserver.response import to_serializable_one

from subagentd.wire.call import Call, Handler, run_method


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


# jsonrpcserver types these as taking JSON text; the message is decoded and checked already
_COPY: Any = dict  # the deserializer: a copy of the checked message
_CHECKED: Any = id  # the validator (its return value is not used)

_SIGNATURE = AnyArguments(list(inspect.signature(_takes_anything).parameters.values()))


class JsonRpc:
    """The Invoke of the server: the method named by a checked message, run by jsonrpcserver."""

    def __init__(self, methods: Mapping[str, Handler]) -> None:
        self.entries = {name: entry(handler) for name, handler in methods.items()}

    def __call__(
        self, call: Call, handler: Handler, message: dict[str, Any]
    ) -> dict[str, Any] | None:
        request: Any = message  # decoded already (jsonrpcserver types it as JSON text)
        reply = dispatch_to_response(
            request,
            self.entries,
            context=call,
            deserializer=_COPY,
            validator=_CHECKED,
            post_process=to_serializable_one,  # the reply as a dict, built by jsonrpcserver
        )
        assert not isinstance(reply, list)  # one request in, one reply (None: a notification)
        return reply


def entry(handler: Handler) -> Callable[..., Any]:
    """A jsonrpcserver method for one handler: Success(result) or Error(code, message, data),
    from the one method runner."""

    def run(*args: Any, **params: Any) -> Any:
        ok, value = run_method(args[0], handler, args[1:], params)
        return Success(value) if ok else Error(**value)

    run.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # inspect honours it; mypy's function type lacks it
    return run
