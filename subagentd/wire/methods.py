"""The one table of every method subagentd serves, and the decorator that fills it.

Light to import: the start-up path (server/handshake.py) serves the handshake methods from it
before core and jsonrpcserver are loaded (server/lifecycle.py registers those).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import msgspec

from subagentd.wire.call import Call, Handler

METHODS: dict[str, Handler] = {}
RawParams = dict[str, Any]  # what a method registered without a params Struct gets


S = TypeVar("S", bound=msgspec.Struct)
R = TypeVar("R")


@overload
def method(
    name: str, params: type[S], result: type | None, **flags: Any
) -> Callable[[Callable[[Call, S], R]], Callable[[Call, S], R]]: ...
@overload
def method(
    name: str, params: None, result: type | None, **flags: Any
) -> Callable[[Callable[[Call, RawParams], R]], Callable[[Call, RawParams], R]]: ...
def method(
    name: str, params: type[msgspec.Struct] | None, result: type | None, **flags: Any
) -> Callable[[Callable[[Call, Any], Any]], Callable[[Call, Any], Any]]:
    """Registers a handler under `name`; it takes the `params` Struct (None: the raw dict)."""

    def register(run: Callable[[Call, Any], Any]) -> Callable[[Call, Any], Any]:
        METHODS[name] = Handler(run, params, result, **flags)
        return run

    return register
