"""What a method is made of: its table entry (Handler) and what it sees of its request (Call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from subagentd.errors import (
    InvalidParamsError,
    LeaseLostError,
    StorageBusyError,
    StorageFailedError,
    SubagentdError,
    closest_name,
)
from subagentd.wire.boundary import failure
from subagentd.wire.ledger import Deferred, Ledger
from subagentd.wire.session import Session, result_value

if TYPE_CHECKING:  # start-up runs the handshake methods before core is imported
    from subagentd.core.service import Service
    from subagentd.core.settings import Settings
    from subagentd.core.waits import Waiter


class Handler(msgspec.Struct, frozen=True):
    """One method: typed params -> service -> result, and how the dispatcher treats it."""

    run: Callable[[Call, Any], Any]
    params: type[msgspec.Struct] | None  # None: the handler validates the raw dict itself
    result: type | None  # for the schema export
    writes: bool = True
    tool: bool = False  # errors carry the model-visible `text` (direct tool methods)
    defers: bool = False  # the reply waits (bounded by MAX_PENDING in the dispatcher)
    confined: bool = False  # also served to a confined MCP client (a connection with --caller)
    # whether a request writes, when its params decide it (tools/call: its tool); else `writes`
    writes_if: Callable[[Any], bool] | None = None
    # a check of the params before the transaction opens (tools/call: the tool is served)
    admit: Callable[[Call, Any], None] | None = None
    # the method's answer when its rules refuse it, its writes rolled back (tools/call: an
    # isError result); None: the refusal is the JSON-RPC error
    refusal: Callable[[SubagentdError], Any] | None = None
    # a method of the MCP stateless era's tasks extension only (tasks/update,
    # subscriptions/listen): PROTOCOL.md section 5 specifies it; the host API's OpenRPC
    # document and the generated clients, which speak the handshake era, leave it out
    extension_only: bool = False


def convert_params(params: dict[str, Any], struct: type[msgspec.Struct]) -> Any:
    """Params as the method's Struct. A field a host API method does not have (HostParams) is
    refused naming it, and the closest field the method has when one is close."""
    try:
        return msgspec.convert(params, struct)
    except msgspec.ValidationError:
        if struct.__struct_config__.forbid_unknown_fields:
            known = [field.encode_name for field in msgspec.structs.fields(struct)]
            unknown = [name for name in params if name not in known]
            if unknown:
                raise unknown_field(unknown[0], known) from None
        raise


def unknown_field(name: str, known: list[str]) -> InvalidParamsError:
    closest = closest_name(name, known)
    data = {"field": name} if closest is None else {"field": name, "closest": closest}
    hint = "" if closest is None else f"; did you mean {_quoted(closest)}?"
    return InvalidParamsError(f"invalid params: unknown field {_quoted(name)}{hint}", data)


def _quoted(name: str) -> str:
    return msgspec.json.encode(name).decode()


class NotLoaded:
    """The service of a Call made before it is loaded (start-up's handshake methods, the child
    MCP server's relayed calls): none of their methods may reach it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError("the service is not loaded yet")


NOT_LOADED = cast("Service", NotLoaded())


class Call(msgspec.Struct):
    """What a handler sees of its request and of the connection it came on."""

    service: Service  # NOT_LOADED at start-up (the handshake methods) and in the child MCP server
    session: Session
    settings: Settings
    stateless: bool
    ledger: Ledger
    notes: list[bytes]  # the connection's notifications not yet held for the host
    notes_mark: int = 0
    request_id: Any = None

    def wait_for(self, waiter: Waiter, shape: Callable[[Any], Any]) -> Deferred:
        """The reply waits for core's answer (shaped for the wire); a client cancellation ends
        the wait, and an answer lost with its commit group is waited for again. The method
        returns the Deferred as its result (the dispatcher owes the reply until it is done)."""
        deferred = Deferred(None)
        waits = self.service.waits

        def done(answer: Any) -> None:
            deferred.result = shape(answer)
            deferred.complete()

        waiter.done = done
        deferred.on_cancel = lambda: waits.cancel(waiter, abandoned=True)
        deferred.on_undone = lambda: waits.rearm(waiter, done)
        return deferred

    def drop_notifications(self, error: BaseException) -> None:
        """A failed request's notifications are not sent; but when its transaction found this
        process fenced, they are the host's news of the agents it let go (core/leases.py Leases.lease_lost)."""
        if not isinstance(error, LeaseLostError):
            del self.notes[self.notes_mark :]


def run_method(call: Call, handler: Handler, args: Any, params: Any) -> tuple[bool, Any]:
    """The one method runner: params validated into the method's Struct, the method run (in a
    write transaction when it writes), its result shaped for the wire, and any failure mapped
    to its JSON-RPC error (wire/boundary.py). (True, result) or (False, error object); a
    Deferred result (a reply owed later) is returned as it is. Never raises an Exception.
    A storage failure loses the commit group: the rest of the frame is refused (Ledger.lost)."""
    try:
        if args:
            raise InvalidParamsError("params must be an object, not an array")
        if params is None:
            params = {}
        value = params if handler.params is None else convert_params(params, handler.params)
        if handler.admit is not None:
            handler.admit(call, value)
        try:
            if handler.writes if handler.writes_if is None else handler.writes_if(params):
                with call.service.transaction():  # the one write transaction of a request
                    result = handler.run(call, value)
            else:
                result = handler.run(call, value)
        except SubagentdError as error:
            if handler.refusal is None or isinstance(error, StorageBusyError | StorageFailedError):
                raise  # a storage refusal is to be retried: the JSON-RPC error, never an answer
            call.drop_notifications(error)
            result = handler.refusal(error)
    except Exception as error:
        if isinstance(error, StorageFailedError) and call.ledger.lost is None:
            call.ledger.lost = error
        call.drop_notifications(error)
        return False, failure(error, handler.tool)
    except BaseException as error:  # cancelled, or the process is ending: not a reply
        call.drop_notifications(error)
        raise
    if type(result) is Deferred:
        return True, result
    return True, result_value(result, call.stateless)
