"""What a client call raises: the server's JSON-RPC error, a timeout, or a closed connection."""

from __future__ import annotations

from typing import Any


class RpcError(Exception):
    """A JSON-RPC error response; `code` is one of `subagentd.schema.codes.Code`'s values."""

    def __init__(self, error: dict[str, Any], method: str | None = None) -> None:
        super().__init__(error.get("message"))
        self.error = error
        self.code: int = error.get("code", 0)
        self.message: str = error.get("message", "")
        self.data: Any = error.get("data")
        self.method = method

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.message} (code {self.code})"


class RequestTimeout(TimeoutError):
    """Nothing (or not the awaited frame) arrived from subagentd within the timeout."""


class ConnectionClosed(EOFError):
    """subagentd closed its stdout (it exited) before the awaited frame arrived."""


class CannotStart(ConnectionClosed):
    """The spawned subagentd could not start (a database it cannot use, a --caller root another
    process serves, a missing extra): the message is its own `cannot start: …` line."""
