"""The one table of error codes on the wire (PROTOCOL.md section 8)."""

from enum import IntEnum


class Code(IntEnum):
    """JSON-RPC error codes used by subagentd; tests compare them by name."""

    PARSE_ERROR = -32700
    """The frame is not valid JSON."""
    INVALID_REQUEST = -32600
    """Not a JSON-RPC 2.0 request object, an empty batch, or a frame over the size limit."""
    METHOD_NOT_FOUND = -32601
    """No such method."""
    INVALID_PARAMS = -32602
    """Params do not match the method's schema."""
    INTERNAL_ERROR = -32603
    """An unexpected failure; details are on stderr only."""
    NOT_INITIALIZED = -32002
    """A request arrived before `initialize` and carries no stateless-era protocol version."""
    REQUEST_CANCELLED = -32800
    """The request was cancelled before it completed."""
    MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
    """A stateless-era request needs a client capability it did not declare (the MCP tasks
    extension's methods, a listen for task ids); `data.requiredCapabilities` names it."""
    UNSUPPORTED_PROTOCOL_VERSION = -32022
    """A stateless-era request names a protocol version subagentd does not speak."""
    UNAUTHORIZED = 1001
    """Stale caller, wrong parent, not a live descendant, self-interrupt, not a reporter."""
    NOT_RESUMABLE = 1002
    """Unknown child, no supported continuation state, descriptor problems."""
    DRAINING = 1003
    """Admissions are closed (shutdown or a closing root)."""
    PARENT_UNAVAILABLE = 1004
    """A report to a parent that is not live."""
    ACTIVATION_CLOSING = 1005
    """The activation is being disposed."""
    DUPLICATE_CHILD = 1006
    """`child_id` already exists."""
    DEPTH_EXCEEDED = 1007
    """Spawn deeper than `--max-depth`."""
    IDEMPOTENCY_CONFLICT = 1008
    """An idempotency key was reused with different arguments."""
    UNKNOWN_AGENT = 1009
    """The host API names an agent that does not exist."""
    INVALID_STATE = 1010
    """The operation does not fit the agent's state (e.g. ending a turn that is not open)."""
    OVERLOADED = 1011
    """A bound was reached: a bounded queue, a quota (`data.reason` and `data.quota` name it,
    `data.limit` is its value), or another process holds the database's write lock
    (`data.reason: "busy"`); retry with backoff, or with less."""
    STORAGE_FAILED = 1012
    """The database failed a write or a commit (disk full, I/O error); nothing of the request
    was kept and it may be retried (`data.reason`: `full`, `io` or `error`), except with
    `unknown`: the answer to a PostgreSQL COMMIT was lost and its outcome could not be read, so
    the request may have been applied (retry it with the same idempotency key)."""
    DATABASE_LOST = 1013
    """The database file was deleted or replaced while subagentd ran; writes are refused."""
    LEASE_LOST = 1014
    """Another process sharing the database took over this one's sessions (it was stalled past
    `--lease-ttl`); its live agents were let go and the request was not applied."""
