"""The physical floor: a minimal msgspec NDJSON JSON-RPC loop over stdin/stdout.

It answers every request with a tiny result, with no dispatch, validation, storage or asyncio,
so its numbers are what "Python + msgspec + two pipes" costs on this machine.
"""

from __future__ import annotations

import os
import sys

import msgspec

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_INIT = {
    "protocolVersion": "2025-06-18",
    "serverInfo": {"name": "echo", "version": "0"},
    "capabilities": {"tools": {}},
}
_CONTENT = {"content": [{"type": "text", "text": "ok"}], "isError": False}


def answer(buf: bytes, name: str = "echo") -> tuple[bytes, bytes]:
    """The replies to the whole lines in `buf` (one NDJSON chunk, empty when none is owed), and
    the partial line left over. Shared with the anyio floor (anyio_echo.py)."""
    *lines, rest = buf.split(b"\n")
    replies = []
    for line in lines:
        if not line.strip():
            continue
        msg = _decode(line)
        if "id" not in msg:
            continue
        if msg.get("method") == "initialize":
            result: dict[str, object] = {**_INIT, "serverInfo": {"name": name, "version": "0"}}
        else:
            result = _CONTENT
        replies.append(_encode({"jsonrpc": "2.0", "id": msg["id"], "result": result}))
    return (b"\n".join(replies) + b"\n" if replies else b""), rest


def main() -> None:
    read = os.read
    write = os.write
    out = sys.stdout.fileno()
    buf = b""
    while True:
        chunk = read(0, 1 << 16)
        if not chunk:
            return
        buf += chunk
        if b"\n" not in buf:
            continue
        data, buf = answer(buf)
        view = memoryview(data)
        while view:
            view = view[write(out, view) :]


if __name__ == "__main__":
    main()
