"""Domain exceptions; each binds one code from schema/codes.py. Only server/ turns them into wire errors."""

from __future__ import annotations

from subagentd.schema.codes import Code


class SubagentdError(Exception):
    """A refusal the client should see: a code, a message, and optional structured data."""

    code: Code = Code.INTERNAL_ERROR

    def __init__(self, message: str, data: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidRequestError(SubagentdError):
    code = Code.INVALID_REQUEST


class InvalidParamsError(SubagentdError):
    code = Code.INVALID_PARAMS


class NotInitializedError(SubagentdError):
    code = Code.NOT_INITIALIZED


class RequestCancelledError(SubagentdError):
    code = Code.REQUEST_CANCELLED


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


class DatabaseLostError(SubagentdError):
    code = Code.DATABASE_LOST


class ToolError(SubagentdError):
    """A model-visible tool failure: `message` is the reason text SEMANTICS.md fixes."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
