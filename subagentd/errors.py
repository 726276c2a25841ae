"""Domain exceptions: one class per code of schema/codes.py. Only wire/boundary.py puts them on the wire.

A refinement of a code (a quota, a busy database) subclasses that code's class.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches

from subagentd.schema.codes import Code


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells, if one is close enough."""
    found = get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


class SubagentdError(Exception):
    """A refusal the client should see: a code, a message, and optional structured data.

    Raised bare it is an internal error (-32603), whose message never reaches the wire."""

    code: Code = Code.INTERNAL_ERROR

    def __init__(self, message: str, data: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class FrameUnparsableError(SubagentdError):
    """A frame that is not JSON, or whose LSP header block cannot be read."""

    code = Code.PARSE_ERROR


class InvalidRequestError(SubagentdError):
    code = Code.INVALID_REQUEST


class MethodUnknownError(SubagentdError):
    code = Code.METHOD_NOT_FOUND

    @classmethod
    def for_method(cls, method: str, served: Iterable[str]) -> MethodUnknownError:
        """`Method not found`, with `data.method` and, when one is close, `data.closest`."""
        data = {"method": method}
        closest = closest_name(method, served)
        if closest is not None:
            data["closest"] = closest
        return cls("Method not found", data)


class InvalidParamsError(SubagentdError):
    code = Code.INVALID_PARAMS


class NotInitializedError(SubagentdError):
    code = Code.NOT_INITIALIZED


class RequestCancelledError(SubagentdError):
    code = Code.REQUEST_CANCELLED


class MissingClientCapabilityError(SubagentdError):
    code = Code.MISSING_REQUIRED_CLIENT_CAPABILITY


class UnsupportedProtocolVersionError(SubagentdError):
    code = Code.UNSUPPORTED_PROTOCOL_VERSION


class CallerUnauthorizedError(SubagentdError):
    code = Code.UNAUTHORIZED


class ChildNotResumableError(SubagentdError):
    code = Code.NOT_RESUMABLE


class AdmissionDrainingError(SubagentdError):
    code = Code.DRAINING


class ParentUnavailableError(SubagentdError):
    code = Code.PARENT_UNAVAILABLE


class ActivationClosingError(SubagentdError):
    code = Code.ACTIVATION_CLOSING


class ChildDuplicateError(SubagentdError):
    code = Code.DUPLICATE_CHILD


class DepthExceededError(SubagentdError):
    code = Code.DEPTH_EXCEEDED


class IdempotencyConflictError(SubagentdError):
    code = Code.IDEMPOTENCY_CONFLICT


class AgentUnknownError(SubagentdError):
    code = Code.UNKNOWN_AGENT


class StateInvalidError(SubagentdError):
    code = Code.INVALID_STATE


class ServerOverloadedError(SubagentdError):
    code = Code.OVERLOADED


class QuotaExceededError(ServerOverloadedError):
    """A quota (SECURITY.md) refused the request before anything was written."""

    def __init__(self, message: str, quota: str, limit: int | float) -> None:
        super().__init__(message, {"reason": quota, "quota": quota, "limit": limit})
        self.quota, self.limit = quota, limit

    def reworded(self, template: str) -> QuotaExceededError:
        """The same refusal inside a tool's failure text (`template` has a `{reason}`)."""
        return QuotaExceededError(template.format(reason=self.message), self.quota, self.limit)


class BudgetExceededError(ServerOverloadedError):
    """A budget (PROTOCOL.md section 12) is spent: the turn or spawn was refused before anything
    was written. `data.budget` names which, `data.agent_id` whose."""

    def __init__(
        self,
        message: str,
        budget: str,
        agent_id: str,
        limit: int | float | str,
        spent: int | float | str,
        left: int,
    ) -> None:
        super().__init__(
            message,
            {
                "reason": "budget",
                "budget": budget,
                "agent_id": agent_id,
                "limit": limit,
                "spent": spent,
                "left": left,
            },
        )
        self.budget, self.args_kept = budget, (budget, agent_id, limit, spent, left)

    def reworded(self, template: str) -> BudgetExceededError:
        """The same refusal inside a tool's failure text (`template` has a `{reason}`)."""
        return BudgetExceededError(template.format(reason=self.message), *self.args_kept)


class StorageBusyError(ServerOverloadedError):
    """Another process holds the database's write lock; the request was not run."""

    def __init__(self) -> None:
        super().__init__(
            "the database is locked by another process; retry with backoff", {"reason": "busy"}
        )


class StorageFailedError(SubagentdError):
    """The database failed a write or a commit; the whole commit group was rolled back."""

    code = Code.STORAGE_FAILED

    def __init__(self, cause: str) -> None:
        if cause == "unknown":  # the answer to COMMIT was lost and its outcome cannot be read
            message = (
                "storage failed (unknown): the connection to the database was lost during the"
                " commit and whether the request was applied is unknown; retry it with the same"
                " idempotency key, or read its effect before retrying"
            )
        else:
            message = f"storage failed ({cause}); the request was not applied, retry it"
        super().__init__(message, {"reason": cause})
        self.cause = cause


# Driver errors a backend raises from a read outside any write group (the connection lost, a
# statement cancelled): answered 1012 like a failed group, not -32603. The PostgreSQL backend
# adds psycopg's (storage/postgres/connection.py).
DRIVER_ERRORS: list[type[BaseException]] = []


class LeaseLostError(SubagentdError):
    """Raised at the start of a write transaction by a process another one has fenced."""

    code = Code.LEASE_LOST


class DatabaseLostError(SubagentdError):
    """The database file was deleted or replaced while subagentd ran; writes are refused."""

    code = Code.DATABASE_LOST


def error_for(code: Code, message: str) -> SubagentdError:
    """The exception of `code` (a tool rule's refusal: `message` is the text SEMANTICS.md fixes)."""
    return _BY_CODE[code](message)


_CLASSES: list[type[SubagentdError]] = [SubagentdError, *SubagentdError.__subclasses__()]
_BY_CODE = {cls.code: cls for cls in _CLASSES if "code" in cls.__dict__}
