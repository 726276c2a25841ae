"""How a method is declared (`method`) and how a module's declarations are read (`declared`).

A method module declares its handlers with `@method`; nothing is registered anywhere by
importing it. The one table is built from the modules' declarations by one function
(server/handlers.py `build_methods`, and server/lifecycle.py `handshake_methods` for start-up,
which serves the handshake before core is loaded) and passed to whoever serves it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, overload

import msgspec

from subagentd.errors import SubagentdError
from subagentd.wire.call import Call, Handler

RawParams = dict[str, Any]  # what a method declared without a params Struct gets
_ENTRY = "method_entry"  # the attribute of a handler function `method` sets: (name, Handler)


S = TypeVar("S", bound=msgspec.Struct)
R = TypeVar("R")


@overload
def method(
    name: str,
    params: type[S],
    result: type | None,
    *,
    writes: bool = True,
    defers: bool = False,
    confined: bool = False,
    writes_if: Callable[[Any], bool] | None = None,
    admit: Callable[[Call, Any], None] | None = None,
    refusal: Callable[[SubagentdError], Any] | None = None,
    extension_only: bool = False,
) -> Callable[[Callable[[Call, S], R]], Callable[[Call, S], R]]: ...
@overload
def method(
    name: str,
    params: None,
    result: type | None,
    *,
    writes: bool = True,
    defers: bool = False,
    confined: bool = False,
    writes_if: Callable[[Any], bool] | None = None,
    admit: Callable[[Call, Any], None] | None = None,
    refusal: Callable[[SubagentdError], Any] | None = None,
    extension_only: bool = False,
) -> Callable[[Callable[[Call, RawParams], R]], Callable[[Call, RawParams], R]]: ...
def method(
    name: str,
    params: type[msgspec.Struct] | None,
    result: type | None,
    *,
    writes: bool = True,
    defers: bool = False,
    confined: bool = False,
    writes_if: Callable[[Any], bool] | None = None,
    admit: Callable[[Call, Any], None] | None = None,
    refusal: Callable[[SubagentdError], Any] | None = None,
    extension_only: bool = False,
) -> Callable[[Callable[[Call, Any], Any]], Callable[[Call, Any], Any]]:
    """Declares the decorated function the handler of `name`; it takes the `params` Struct (None:
    the raw dict). The flags are Handler's (wire/call.py)."""

    def declare(run: Callable[[Call, Any], Any]) -> Callable[[Call, Any], Any]:
        handler = Handler(
            run,
            params,
            result,
            writes=writes,
            defers=defers,
            confined=confined,
            writes_if=writes_if,
            admit=admit,
            refusal=refusal,
            extension_only=extension_only,
        )
        setattr(run, _ENTRY, (name, handler))
        return run

    return declare


def declared(module: ModuleType) -> dict[str, Handler]:
    """The methods `module` declares with `method`, in the order it writes them."""
    table: dict[str, Handler] = {}
    for value in vars(module).values():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            entry: tuple[str, Handler] | None = getattr(value, _ENTRY, None)
            if entry is not None:
                table[entry[0]] = entry[1]
    return table
