"""The transport-free dispatcher: a frame, or a decoded message or batch, in; its reply value out.

It owns the JSON-RPC envelope rules (PROTOCOL.md sections 1, 2 and 8): the checks before a method
runs, batches, notifications, cancellation, the lifecycle and the bounds; every refusal is a
raised SubagentdError that wire/boundary.py puts on the wire. The method itself runs through an
`Invoke`: jsonrpcserver's dispatch in the server (wire/rpc.py), once per request (a batch's
members one by one, each checked here first); at start-up, before jsonrpcserver is imported,
the same method runner is called directly (`invoke_directly`: the prelude's handshake).
The connection is only the I/O loop around it. Light to import: no jsonrpcserver, no anyio, no
core (start-up answers the handshake with it while those load).

Longer than ~300 lines on purpose: it is the one place where a message's envelope is judged, in
PROTOCOL.md's order (object, id, version, method, params, cancellation, lifecycle, lost group,
confinement, bounds); split, the order of those checks would live in no single place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

import msgspec

from subagentd.errors import (
    FrameUnparsableError,
    InvalidRequestError,
    MethodUnknownError,
    NotInitializedError,
    ServerOverloadedError,
    SubagentdError,
    UnsupportedProtocolVersionError,
)
from subagentd.schema.codes import Code
from subagentd.schema.lifecycle import SUPPORTED_VERSIONS, VERSION_META_KEY
from subagentd.schema.tasks import SUBSCRIPTION_ID_META
from subagentd.schema.tools import CALLER_META
from subagentd.wire.boundary import INTERNAL_MESSAGE, refusal
from subagentd.wire.call import NOT_LOADED, Call, Handler, run_method
from subagentd.wire.framing import BadHeader, Frame, Oversize
from subagentd.wire.ledger import Deferred, Kept, Ledger, Pending
from subagentd.wire.requestlog import log_request
from subagentd.wire.session import Session, success_reply, valid_id

if TYPE_CHECKING:  # not imported at start-up: the handshake needs neither core nor its settings
    from subagentd.core.service import Service
    from subagentd.core.settings import Settings

log = logging.getLogger("subagentd")

One = dict[str, Any] | Pending  # the reply to one request: a reply object, or one still owed
Reply = One | list[One]
Invoke = Callable[[Call, Handler, dict[str, Any]], dict[str, Any] | None]
Deliver = Callable[["Reply | None"], None]  # takes one frame's reply

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_ID_TYPES = (str, int)  # what JSON ids decode to (valid_id decides any other)
CANCEL = {"notifications/cancelled": "requestId", "$/cancelRequest": "id"}
LIFECYCLE = frozenset({"initialize", "ping", "server/discover"})  # served before initialize
MAX_PENDING = 1024  # replies that may wait at once (agents/close drains); beyond: 1011 OVERLOADED
# the envelope's refusals, said here and by the --detach relay (runners/detached.py)
EMPTY_BATCH = "Invalid Request: empty batch"
NOT_AN_OBJECT = "Invalid Request: not an object"
BAD_ID = "Invalid Request: id must be a string, a number or null"
NOT_INITIALIZED = "server not initialized"


def check_envelope(message: dict[str, Any]) -> None:
    """The envelope of an object: InvalidRequestError unless version, method and params are
    well formed (the --detach relay judges id-less messages with it too)."""
    if message.get("jsonrpc") != "2.0":
        raise InvalidRequestError('Invalid Request: "jsonrpc" must be "2.0"')
    if not isinstance(message.get("method"), str):
        raise InvalidRequestError('Invalid Request: "method" must be a string')
    if "params" in message and not isinstance(message["params"], (dict, list)):  # noqa: UP038  (a tuple: faster)
        raise InvalidRequestError('Invalid Request: "params" must be an object or an array')


def answered(message: Any) -> Any:
    """A response to a request of ours (an elicitation for ask_user) as the `question/answer`
    it stands for (mcp/elicitation.py); any other message unchanged."""
    if not (isinstance(message, dict) and "method" not in message and "id" in message):
        return message
    from subagentd.mcp.elicitation import response_as_answer

    return response_as_answer(message)


def decode(frame: Frame) -> Any:
    """The JSON value of a frame; FrameUnparsableError (or InvalidRequestError for an oversized
    frame) when there is none."""
    if isinstance(frame, Oversize):
        raise InvalidRequestError(
            f"frame exceeds the limit of {frame.limit} bytes (--max-frame-bytes); it was discarded"
        )
    if isinstance(frame, BadHeader):
        raise FrameUnparsableError(f"Parse error: {frame.detail}")
    try:
        return _decode(frame)
    except msgspec.DecodeError as exc:
        raise FrameUnparsableError("Parse error", str(exc)) from None
    except RecursionError:
        raise FrameUnparsableError("Parse error", "JSON is nested too deeply") from None


# Writing methods whose rules read and write one tree only: the param naming a session of it
# (docs/architecture.md "Per-tree writers"). Any other writing method takes every tree's lock:
# agents/open and agents/close, messages/cancel (a message id), agents/followup with an
# idempotency key (the host's keys are one namespace over every tree), and any request whose
# agent is not live in this process (its tree is not known without a read).
TREE_SCOPED: dict[str, str] = {
    # the tools, direct: a child, a descendant, the parent or the caller's own inbox
    "send_message": "caller",
    "interrupt_agent": "caller",
    "report": "caller",
    "spawn_agent": "caller",
    "wait_agents": "caller",
    # host methods naming a live agent (a spawn: its parent)
    "agents/spawn": "caller",
    "agents/followup": "agent_id",
    "agents/interrupt": "agent_id",
    "agents/budget": "agent_id",
    "agents/stop": "agent_id",
    "agents/resume": "agent_id",
    "turns/begin": "agent_id",
    "turns/end": "agent_id",
    "transcript/append": "agent_id",
}


class Dispatcher:
    """Answers JSON-RPC messages in arrival order for one connection (its session and ledger)."""

    def __init__(
        self,
        session: Session,
        settings: Settings,
        invoke: Invoke,
        *,
        service: Service | None = None,
        methods: Mapping[str, Handler],
        frame: Callable[[Any], bytes] = _encode,
        ledger: Ledger | None = None,
        max_pending: int = MAX_PENDING,
        notes: list[bytes] | None = None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.session = session
        self.settings = settings
        self.service = service
        self.loaded = NOT_LOADED if service is None else service  # what a Call is given
        self.methods = methods  # the table (server/handlers.py; start-up: the handshake's only)
        self.invoke = invoke
        self.frame = frame  # a message as the bytes written to the host
        self.ledger = ledger or Ledger(frame, lambda size: None)
        self.max_pending = max_pending
        # notifications not yet held for the host (the relay's: the connection's list)
        self.notes: list[bytes] = [] if notes is None else notes
        self.updated: set[str] = set()  # resource URIs told updated since the last flush
        self.on_lost = on_lost  # the commit group was lost: the connection answers it so

    def emit(self, method: str, params: msgspec.Struct) -> None:
        """A notification to the host; written after the current request's reply and commit.
        A --caller connection carries MCP traffic only, unless its client asked (Session.wants)."""
        if not self.session.wants(method):
            return
        if method == "tasks/input":  # a 2025-11-25 task's child asked (mcp/elicitation.py)
            if self.session.tasks and self.session.elicitation:
                from subagentd.mcp.elicitation import task_input_frame

                self.notes.append(self.frame(task_input_frame(params)))  # type: ignore[arg-type]
            return
        if self.session.elicitation and method in ("question/ask", "question/cancelled"):
            # ask_user to an MCP client: an elicitation/create request (mcp/elicitation.py)
            from subagentd.mcp import elicitation

            if method == "question/ask":
                frame = elicitation.elicitation_request(params)  # type: ignore[arg-type]
            else:
                frame = elicitation.elicitation_withdrawn(params)  # type: ignore[arg-type]
            self.notes.append(self.frame(frame))
            return
        if method == "notifications/tasks":  # to each listen stream that asked for the task
            for listen, task_ids in self.session.task_listens.items():
                if params.taskId in task_ids:  # type: ignore[attr-defined]
                    fields = {
                        **msgspec.to_builtins(params),
                        "_meta": {SUBSCRIPTION_ID_META: listen},
                    }
                    self.notes.append(
                        self.frame({"jsonrpc": "2.0", "method": method, "params": fields})
                    )
            return
        if method == "notifications/resources/updated":  # once per URI until the next flush
            uri = params.uri  # type: ignore[attr-defined]
            if uri in self.updated:
                return
            self.updated.add(uri)
        self.notes.append(self.frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def handle_frame(self, frame: Frame) -> Reply | None:
        try:
            message = answered(decode(frame))
        except SubagentdError as exc:
            return refusal(exc)
        return self.dispatch(message)

    def hold(self, reply: Reply | None) -> None:
        """One frame's reply held for its commit, then the notifications its request made; a
        reply that cannot be encoded (a result msgspec cannot write) must not end the
        connection: it is logged and answered -32603 with no detail."""
        try:
            self.ledger.answer(reply)
        except Exception:
            log.exception("unexpected failure while handling a frame")
            self.ledger.reply(refusal(SubagentdError(INTERNAL_MESSAGE)))
        self.flush_notes()
        if self.ledger.lost is not None:
            self.on_lost()

    def flush_notes(self) -> None:
        """The notifications made so far, held (after the replies before them) for the commit."""
        for note in self.notes:
            self.ledger.hold(note)
        self.notes.clear()
        self.updated.clear()

    def handle_frames(
        self,
        frames: Sequence[Frame],
        locked: Callable[[str | None], bool] | None = None,
        deliver: Deliver | None = None,
    ) -> list[Frame]:
        """Frames read together, each answered through `deliver` (default: held for the
        commit, `hold`) in arrival order, exactly as `handle_frame` answers it: each sees the state (lifecycle, waiting replies, a lost
        group) the ones before it left. They all arrived before the first is answered, so they
        may share one reading of what other processes hold (core/agents.py `elsewhere`). A
        frame that writes first asks `locked` for the write lock (taken without waiting):
        refused, the frames before it are answered and it and the rest are returned unhandled,
        for the connection to wait for the lock and hand them back."""
        deliver = deliver or self.hold
        service = None if len(frames) < 2 else self.service
        if service is None:
            return self._handle_frames(frames, deliver, locked)
        service.begin_snapshot()
        try:
            return self._handle_frames(frames, deliver, locked)
        finally:
            service.end_snapshot()

    def _handle_frames(
        self, frames: Sequence[Frame], deliver: Deliver, locked: Callable[[str | None], bool] | None
    ) -> list[Frame]:
        """handle_frames' work; returns the frames left for the connection to hand back."""
        per_tree = self.service is not None and self.service.per_tree
        rest = iter(frames)
        for frame in rest:
            try:
                message = answered(decode(frame))
            except SubagentdError as exc:
                deliver(refusal(exc))
                continue
            tree = None
            if locked is not None and self.writes(message):
                if per_tree:
                    tree = self.tree_of(message)
                if not locked(tree):
                    return [frame, *rest]
            if tree is None:
                deliver(self.dispatch(message))
                continue
            scope = self.service.set_scope  # type: ignore[union-attr]  # tree: a service
            scope(tree)
            try:
                deliver(self.dispatch(message))
            finally:
                scope(None)
        return []

    def tree_of(self, message: Any) -> str | None:
        """The root id of the one tree a writing request's rules write (TREE_SCOPED: its session
        is live here with a known lineage), or None: any tree (its writes take every tree's
        lock, as a request the rules do not confine to one tree must)."""
        if type(message) is not dict or self.service is None:
            return None
        method = message.get("method")
        params = message.get("params")
        if type(params) is not dict:
            return None
        if method == "tools/call":  # a tool (one that writes): its caller, as identity.py finds it
            meta = params.get("_meta")
            caller = meta.get(CALLER_META) if type(meta) is dict else None
            session = self.session.default_caller if caller is None else caller
        else:
            name = TREE_SCOPED.get(method)  # type: ignore[arg-type]
            if name is None or (method == "agents/followup" and params.get("idempotency_key")):
                return None
            session = params.get(name)
        if type(session) is not str:  # the method refuses it; no tree here (nor a crash)
            return None
        return self.service.tree_of(session)

    def writes(self, message: Any) -> bool:
        """Whether a decoded frame (a request, or a batch with one) runs a method that writes."""
        if type(message) is list:
            return any(map(self.writes, message))
        if type(message) is not dict:
            return False
        name = message.get("method")
        handler = self.methods.get(name) if type(name) is str else None
        if handler is None:
            return False
        if handler.writes_if is not None:
            return handler.writes_if(message.get("params"))
        return handler.writes

    def dispatch(self, message: Any) -> Reply | None:
        """The reply to a decoded message or batch; None when nothing is answered."""
        if not isinstance(message, list):
            return self.dispatch_one(message)
        if not message:
            return refusal(InvalidRequestError(EMPTY_BATCH))
        replies = [r for r in map(self.dispatch_one, message) if r is not None]
        return replies or None

    def dispatch_one(self, message: Any) -> One | None:
        """One request or notification. Refusals before the method runs are Kept: they stand
        even if the commit group is lost. Once it is lost, the rest is refused without running."""
        if not isinstance(message, dict):
            return refusal(InvalidRequestError(NOT_AN_OBJECT))
        request_id = message.get("id")
        if not (request_id is None or type(request_id) in _ID_TYPES or valid_id(request_id)):
            return refusal(InvalidRequestError(BAD_ID))
        is_request = "id" in message
        try:
            check_envelope(message)
            method = message["method"]
            params = message.get("params")
            if method in CANCEL:
                if isinstance(params, dict):
                    self.cancel(params.get(CANCEL[method]))
                return Kept(success_reply({}, request_id, False)) if is_request else None
            meta = params.get("_meta") if isinstance(params, dict) else None
            version = meta.get(VERSION_META_KEY) if isinstance(meta, dict) else None
            stateless = version is not None
            if stateless and version not in SUPPORTED_VERSIONS:
                raise UnsupportedProtocolVersionError(
                    f"unsupported protocol version {version!r}",
                    {"supported": list(SUPPORTED_VERSIONS), "requested": version},
                )
            lifecycle = method in LIFECYCLE
            if not (stateless or self.session.initialized or lifecycle):
                raise NotInitializedError(NOT_INITIALIZED)
            if self.ledger.lost is not None and not lifecycle:
                raise self.ledger.lost
            handler = self.methods.get(method)
            if handler is None:
                raise MethodUnknownError.for_method(method, self.methods)
            if (handler.defers and is_request) or (
                not handler.confined and self.session.default_caller is not None
            ):
                self._admit(method, handler, request_id, is_request)
            call = Call(
                self.loaded,
                self.session,
                self.settings,
                stateless,
                self.ledger,
                self.notes,
                len(self.notes),
                request_id,
            )
            if log.isEnabledFor(logging.DEBUG):  # --log-level debug: a line per request
                started = perf_counter()
                reply = self.invoke(call, handler, message)
                log_request(method, request_id, is_request, started)
            else:
                reply = self.invoke(call, handler, message)
            if reply is None:  # a notification
                return None
            result = reply.get("result")
            if type(result) is Deferred:  # the one kind of reply written later (wire/ledger.py)
                if not result.done:
                    pending = Pending(request_id, result, stateless, self.ledger.generation)
                    self.ledger.pending[request_id] = pending
                    return pending
                return success_reply(result.result, request_id, stateless)
            return Kept(reply) if lifecycle else reply
        except SubagentdError as exc:  # refused before the method ran
            if is_request or isinstance(exc, InvalidRequestError):  # a broken envelope is told
                return Kept(refusal(exc, request_id))
            return None

    def _admit(self, method: str, handler: Handler, request_id: Any, is_request: bool) -> None:
        """Refusals of a known method before it runs: confinement, and the bound on waiting."""
        if not handler.confined and self.session.default_caller is not None:
            raise MethodUnknownError(
                f'method "{method}" is not served to an MCP client confined by --caller;'
                " the host API needs a connection started without --caller",
                method,
            )
        if handler.defers and is_request:
            if len(self.ledger.pending) >= self.max_pending:
                raise ServerOverloadedError(
                    f"too many requests waiting ({self.max_pending}); retry with backoff",
                    {"reason": Code.OVERLOADED.name},
                )
            if request_id in self.ledger.pending:
                raise InvalidRequestError(
                    f"Invalid Request: id {_encode(request_id).decode()} is already used by"
                    " a request that is still waiting"
                )

    def cancel(self, request_id: Any) -> None:
        """Answer a request that has not completed with -32800; accepted effects stay accepted."""
        if valid_id(request_id):
            self.ledger.cancel(request_id)


def invoke_directly(call: Call, handler: Handler, message: dict[str, Any]) -> dict[str, Any] | None:
    """The method run without jsonrpcserver (start-up, before it is imported; the child MCP
    server): the same runner, the reply jsonrpcserver would build from its outcome."""
    params = message.get("params")
    args = params if isinstance(params, list) else ()
    ok, value = run_method(call, handler, args, {} if isinstance(params, list) else params)
    if "id" not in message:
        return None
    return {"jsonrpc": "2.0", "result" if ok else "error": value, "id": message["id"]}
