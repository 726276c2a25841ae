"""`subagentd tool` and `subagentd mcp` relayed to the serving process: a run acts as its own agent.

The serving process (with --runner) listens on a private Unix socket (SUBAGENTD_SOCKET in the
command's environment). `subagentd tool` (and the child MCP server `subagentd mcp`, for each of
its `tools/call`) sends one JSON-RPC `tools/call` line with `_meta` `subagentd/caller` and
`subagentd/token`; the token must be the one this process gave that agent's current activation
(SUBAGENTD_TOKEN), else the call is refused. The tool then runs here, as that caller with that
activation, by the same rules as any `tools/call`, and the answer is written back after its
commit. A `tools/list` line, proved the same way, answers the tools that caller is offered
(PROTOCOL.md section 11).

Longer than ~300 lines on purpose: the socket's whole contract — connection and size bounds,
the token check, running the call, answering after the commit — reads in one place, in order.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
import msgspec

from subagentd.core import texts
from subagentd.core.service import Service
from subagentd.errors import (
    CallerUnauthorizedError,
    InvalidParamsError,
    InvalidRequestError,
    QuotaExceededError,
    StorageBusyError,
    StorageFailedError,
    SubagentdError,
    error_for,
)
from subagentd.mcp.tools import ACTIVATION_META, CALLER_META, IDEMPOTENCY_META, served_tool
from subagentd.schema import tools as t
from subagentd.schema.codes import Code
from subagentd.server.dispatcher import Dispatcher
from subagentd.wire.boundary import failure
from subagentd.wire.ledger import Deferred, Pending
from subagentd.wire.rpc import JsonRpc
from subagentd.wire.session import Session

if TYPE_CHECKING:
    from subagentd.server.connection import Connection

TOKEN_META = "subagentd/token"
REFUSED = texts.RUNNER_TOKEN_REFUSED
READ_TIMEOUT = 30.0  # seconds a client may take to send its one request line
MAX_CONNECTIONS = 64  # relay connections open at once; more are closed unanswered
UNPROVEN_BYTES = 64 * 1024  # read of a request before a token of a live activation is seen in it
REFUSED_TOOL_BYTES = 256  # of a refused call's tool name kept in its `tool_refused` event
REFUSED_TEXT_BYTES = 4096  # of its refusal's text

_encode = msgspec.json.Encoder().encode


class RelayRequest(msgspec.Struct):
    jsonrpc: str
    method: str
    params: msgspec.Raw = msgspec.Raw(b"{}")
    id: int | str | None = None


_decode_request = msgspec.json.Decoder(RelayRequest).decode
_decode_call = msgspec.json.Decoder(t.ToolsCallParams).decode
_decode_list = msgspec.json.Decoder(t.ToolsListParams).decode


class Tokens:
    """One unguessable token per activation the runner ran; void once the activation ended."""

    def __init__(self, service: Service) -> None:
        self.activation_of = service.activation_of
        self._tokens: dict[str, tuple[str, str]] = {}  # agent id -> (activation id, token)

    def issue(self, agent_id: str, activation_id: str) -> str:
        """The activation's token (the same for each of its turns), made on its first turn."""
        held = self._tokens.get(agent_id)
        if held is not None and held[0] == activation_id:
            return held[1]
        for other, (activation, _) in list(self._tokens.items()):  # forget the ended ones
            if self.activation_of(other) != activation:
                del self._tokens[other]
        token = secrets.token_urlsafe(32)
        self._tokens[agent_id] = (activation_id, token)
        return token

    def seen_in(self, data: bytes) -> bool:
        """Whether one of the live tokens appears in `data` (the start of a request: the
        client sends `_meta` before the arguments)."""
        return any(token.encode() in data for _, token in self._tokens.values())

    def activation(self, agent_id: str, token: str) -> str | None:
        """The live activation `token` proves `agent_id` acts as, or None."""
        held = self._tokens.get(agent_id)
        if held is None or not hmac.compare_digest(held[1].encode(), token.encode()):
            return None
        if self.activation_of(agent_id) != held[0]:
            del self._tokens[agent_id]
            return None
        return held[0]


class Slots(Protocol):
    """The runner's --max-running slots, lent by a run while it waits (Runner)."""

    def lend(self, agent_id: str) -> str | None: ...

    def reclaim(self, turn_id: str) -> None: ...


class Relay:
    """Answers `subagentd tool` requests on the Unix socket, one request per connection."""

    def __init__(
        self, service: Service, tokens: Tokens, max_bytes: int, slots: Slots | None = None
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.max_bytes = max_bytes
        self._connection: Connection | None = None
        self.rpc: JsonRpc | None = None  # the connection's method table, once attached
        self._open = 0  # connections being served
        self.slots = slots  # a waiting run lends its --max-running slot

    def attach(self, connection: Connection) -> None:
        self._connection = connection
        self.rpc = JsonRpc(connection.methods)

    async def serve(self, listener: anyio.abc.Listener[Any]) -> None:
        async with listener:
            await listener.serve(self._handle)

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            if self._open >= MAX_CONNECTIONS:
                return  # closed at once: a runaway client cannot pile up connections
            self._open += 1
            try:
                await self._serve_one(stream)
            finally:
                self._open -= 1

    async def _serve_one(self, stream: anyio.abc.ByteStream) -> None:
        try:
            with anyio.fail_after(READ_TIMEOUT):
                line = await self._read_line(stream)
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        reply: dict[str, Any] | None = None
        async with anyio.create_task_group() as tg:

            async def hang_up() -> None:  # the caller went away: stop waiting for it
                try:
                    await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                tg.cancel_scope.cancel()

            async def reply_to() -> None:
                nonlocal reply
                reply = await self.answer(line)
                tg.cancel_scope.cancel()

            tg.start_soon(hang_up)
            tg.start_soon(reply_to)
        if reply is None:
            return
        try:
            await stream.send(_encode(reply) + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def _read_line(self, stream: anyio.abc.ByteStream) -> bytes:
        """The request line, read only as far as the token of a live activation was seen in
        its first UNPROVEN_BYTES (else what came so far: refused as it stands)."""
        data = bytearray()
        while b"\n" not in data:
            if len(data) > self.max_bytes:
                break
            if len(data) >= UNPROVEN_BYTES and not self.tokens.seen_in(
                bytes(data[:UNPROVEN_BYTES])
            ):
                break
            try:
                data += await stream.receive()
            except anyio.EndOfStream:
                break
        return bytes(data).split(b"\n", 1)[0]

    async def answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line (never raises)."""
        request_id: Any = None
        try:
            if len(line) > self.max_bytes:
                raise InvalidRequestError(f"request exceeds {self.max_bytes} bytes")
            try:
                request = _decode_request(line)
            except msgspec.DecodeError as exc:
                raise InvalidRequestError(f"not a JSON-RPC request: {exc}") from None
            request_id = request.id
            if request.method == "tools/list":
                listed = self._list(_decode_params(_decode_list, request.params))
                return {"jsonrpc": "2.0", "id": request_id, "result": listed}
            if request.method != "tools/call":
                raise InvalidRequestError(
                    f"only tools/call and tools/list are relayed, not {request.method}"
                )
            params = _decode_params(_decode_call, request.params)
            reply = await self._call(params)
        except SubagentdError as exc:
            return {"jsonrpc": "2.0", "id": request_id, "error": failure(exc, tool=False)}
        return {"jsonrpc": "2.0", "id": request_id, **reply}

    def _proved(self, meta: dict[str, Any], tool: str) -> tuple[str, str]:
        """The caller and the activation its token proves; refused before anything runs."""
        caller, token = meta.get(CALLER_META), meta.get(TOKEN_META)
        if not isinstance(caller, str):
            raise CallerUnauthorizedError(texts.NO_CALLER.format(tool=tool))
        activation = self.tokens.activation(caller, token) if isinstance(token, str) else None
        if activation is None:
            raise CallerUnauthorizedError(REFUSED.format(caller=caller))
        return caller, activation

    def _request(self, method: str, meta: dict[str, Any], tool: str, **params: Any) -> Any:
        """The request as the Dispatcher runs it, in a session confined to the proved caller:
        `_meta` carries that caller, its token's activation and the idempotency key only."""
        caller, activation = self._proved(meta, tool)
        proved = {CALLER_META: caller, ACTIVATION_META: activation}
        key = meta.get(IDEMPOTENCY_META)
        if isinstance(key, str):
            proved[IDEMPOTENCY_META] = key
        assert self._connection is not None and self.rpc is not None, "attach() first"
        dispatcher = Dispatcher(
            Session(initialized=True, default_caller=caller),
            self.service.settings,
            self.rpc,
            service=self.service,
            methods=self._connection.methods,
            notes=self._connection.notes,  # a refused call's notifications are dropped there
        )
        message = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": method,
            "params": {**params, "_meta": proved},
        }
        return caller, dispatcher, message

    def _list(self, params: t.ToolsListParams) -> t.ToolsListResult:
        """The tools this caller's activation is offered, as a confined `tools/list` shows them."""
        _, dispatcher, message = self._request("tools/list", params.meta or {}, "tools/list")
        reply = dispatcher.dispatch_one(message)
        assert isinstance(reply, dict)
        if "error" in reply:
            raise _raised(reply["error"])
        listed: t.ToolsListResult = reply["result"]
        return listed

    async def _call(self, params: t.ToolsCallParams) -> dict[str, Any]:
        """tools/call through the Dispatcher, in its own transaction of the connection's commit
        group; answered (`result` or `error`) once that group committed."""
        assert self._connection is not None, "attach() first"
        served_tool(params.name, self.service.settings.tools)  # before the token is looked at
        arguments = {} if params.arguments is None else {"arguments": params.arguments}
        caller, dispatcher, message = self._request(
            "tools/call", params.meta or {}, params.name, name=params.name, **arguments
        )
        connection = self._connection
        answer: list[Any] = []

        def work() -> None:
            reply = dispatcher.dispatch_one(message)
            if dispatcher.ledger.lost is not None:  # the connection's group is lost with it
                raise dispatcher.ledger.lost
            if isinstance(reply, dict) and _busy(reply):
                raise StorageBusyError  # another process holds the write lock: tried again
            result = reply.get("result") if isinstance(reply, dict) else None
            if isinstance(result, t.CallToolResult) and result.isError:
                self._record_refusal(caller, params.name, result)
            answer.append(reply)

        await self._work(work, caller, dispatcher.writes(message))
        if not answer:  # the commit group was lost (logged by the connection)
            raise StorageFailedError("the commit group was lost")
        reply = answer[0]
        if isinstance(reply, Pending):
            lent = self.slots.lend(caller) if self.slots is not None else None
            try:
                await self._wait(reply.deferred, caller)
            finally:
                if lent is not None and self.slots is not None:
                    self.slots.reclaim(lent)
            reply = {"result": reply.deferred.result}
        await connection.committed()
        return {k: v for k, v in reply.items() if k in ("result", "error")}

    def _record_refusal(self, caller: str, tool: str, refused: t.CallToolResult) -> None:
        """A refused call goes into the caller's transcript (`tool_refused`), in its current
        turn: a run that ignores the refusal still leaves it visible in `watch` and the
        timeline."""
        service = self.service
        try:  # bounded: nothing more past --max-db-bytes (the call is refused either way)
            service.check_database_quota()
        except QuotaExceededError:
            return
        turn_id = service.open_turn(caller)
        text = "\n".join(str(block.get("text", "")) for block in refused.content)
        data = {"tool": _cut(tool, REFUSED_TOOL_BYTES), "text": _cut(text, REFUSED_TEXT_BYTES)}
        service.record(caller, turn_id, "tool_refused", data)

    async def _work(self, work: Callable[[], None], caller: str, writes: bool = False) -> None:
        """`work` in a transaction of the connection's group, on the caller's tree only, once
        another process's write lock let it (waited for ahead when it `writes`)."""
        assert self._connection is not None
        connection = self._connection
        await connection.run_locked(work, connection.tree_of(caller), writes)

    async def _wait(self, deferred: Deferred, caller: str) -> None:
        """wait_agents: core answers in the transaction that ends the wait. The caller hanging
        up (or shutdown) cancels the wait: nothing is consumed."""
        answered = anyio.Event()
        deferred.on_done = answered.set
        if deferred.done:
            return
        try:
            await answered.wait()
        except BaseException:
            cancel = deferred.on_cancel
            if cancel is not None:
                with anyio.CancelScope(shield=True):
                    await self._work(cancel, caller)
            raise


def _decode_params(decode: Callable[[bytes], Any], raw: msgspec.Raw) -> Any:
    try:
        return decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidParamsError(f"invalid params: {exc}") from None


def _raised(error: dict[str, Any]) -> SubagentdError:
    """A Dispatcher's error object as the exception that `answer` puts back on the wire as it
    was (wire/boundary.py failure)."""
    raised = error_for(Code(error["code"]), error["message"])
    data = error.get("data")
    if isinstance(data, dict):
        raised.data = {k: v for k, v in data.items() if k not in ("reason", "text")} or None
    return raised


def _busy(reply: dict[str, Any]) -> bool:
    """Whether a reply is the refusal of a write another process's lock held off."""
    data = reply["error"].get("data") if "error" in reply else None
    return isinstance(data, dict) and data.get("reason") == "busy"


def _cut(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes, never half a character."""
    data = text.encode()
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")
