"""The stack floor: the chosen stack alone, with no subagentd rule, storage or envelope code.

It reads stdin and writes stdout with subagentd's own transport (subagentd/wire/transport.py
FdReader and FdWriter, imported, so it reads exactly as the server does on whatever anyio backend
runs it), decodes each line with msgspec, dispatches it through jsonrpcserver's public
`dispatch_to_response` with its `to_serializable_one` (the entry point wire/rpc.py uses, with the
same `deserializer` and `validator` shortcuts) to a method that does nothing, and encodes the reply with msgspec — one
request at a time, the replies of one read written together. Its methods: `initialize` (a
constant handshake result), `ping` (`{}`), and any other method, `tools/call` included (the
tools/call-shaped result the echo floors answer: one text block). What subagentd's own code
costs is its figure over this one, in the same run.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import anyio
import msgspec
from echo_server import _CONTENT, _INIT  # this directory is the script's: first on sys.path
from jsonrpcserver import Success, dispatch_to_response
from jsonrpcserver.response import to_serializable_one
from jsonrpcserver.result import Result

from subagentd.wire.transport import FdReader, FdWriter

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def initialize(**_params: Any) -> Result:
    return Success({**_INIT, "serverInfo": {"name": "stack-floor", "version": "0"}})


def ping(**_params: Any) -> Result:
    return Success({})


def tool_call(**_params: Any) -> Result:
    return Success(_CONTENT)


class AnyArguments(inspect.Signature):
    """`(*args, **params)`, bound without the generic parameter walk, as wire/rpc.py's entries
    are (jsonrpcserver checks every call's arguments against the method's signature)."""

    __slots__ = ()

    def bind(self, /, *args: Any, **params: Any) -> inspect.BoundArguments:
        return inspect.BoundArguments(self, {"params": params} if params else {})


def _anything(**params: Any) -> None:
    """The signature of every method here."""


for _method in (initialize, ping, tool_call):
    _method.__signature__ = AnyArguments(  # type: ignore[attr-defined]
        list(inspect.signature(_anything).parameters.values())
    )


class Methods(dict[str, Any]):
    """initialize and ping by name; every other method (tools/call, …) answers like tools/call."""

    def __missing__(self, name: str) -> Any:
        return tool_call

    def __contains__(self, name: object) -> bool:
        return True


METHODS = Methods(initialize=initialize, ping=ping)


def answer(line: bytes) -> bytes | None:
    """The encoded reply to one NDJSON line (None for a notification or a blank line)."""
    if not line.strip():
        return None
    message: Any = _decode(line)
    reply = dispatch_to_response(
        message, METHODS, deserializer=dict, validator=id, post_process=to_serializable_one
    )
    return None if reply is None else _encode(reply)


async def serve(reader: FdReader, writer: FdWriter) -> None:
    buf = b""
    while True:
        chunk = await reader.read()
        if not chunk:
            return
        buf += chunk
        if b"\n" not in buf:
            continue
        *lines, buf = buf.split(b"\n")
        replies = [r for r in map(answer, lines) if r is not None]
        if replies:
            await writer.write(b"\n".join(replies) + b"\n")


async def main() -> None:
    await serve(FdReader(0), FdWriter(sys.stdout.fileno()))


if __name__ == "__main__":
    anyio.run(main)
