"""JSON-RPC success envelopes and per-connection lifecycle state; light to import (used at start-up)."""

from __future__ import annotations

from typing import Any

import msgspec


class Session(msgspec.Struct):
    """Per-connection lifecycle state."""

    initialized: bool = False
    default_caller: str | None = None
    # a --caller (MCP) connection gets the host API's notifications only when its client asked
    # for them (initialize: capabilities.experimental.subagentd.hostNotifications: true)
    host_notifications: bool = False
    # resources/subscribe: the subscribed URIs by agent id (notifications/resources/updated)
    subscriptions: dict[str, list[str]] = msgspec.field(default_factory=dict)
    tasks: bool = False  # MCP tasks (mcp/tasks.py): the negotiated version has them
    offers_tasks: bool = True  # False where tasks/* are not served (`subagentd mcp`'s relay)
    offers_resources: bool = True  # False where resources/* are not served (the same relay)
    # subscriptions/listen streams open on this connection: task ids by the listen's request id
    task_listens: dict[str | int, list[str]] = msgspec.field(default_factory=dict)
    # ask_user can reach a person here: the MCP client declared `elicitation` (asked with
    # elicitation/create), or a host declared experimental.subagentd.askUser (question/ask)
    elicitation: bool = False
    asks_user: bool = False

    def reaches_person(self, root: str) -> bool:
        """Whether a question for this root's person can be put on this connection."""
        if self.elicitation:
            return self.default_caller is None or root == self.default_caller
        return self.asks_user and self.default_caller is None

    def wants(self, method: str) -> bool:
        """Whether a notification of this method is written to this connection: MCP ones
        (`notifications/...`) always; the host API's (`agent/*`, `turn/*`) to a host, and to a
        --caller connection only when asked for."""
        if method in ("question/ask", "question/cancelled"):
            return self.asks_user or self.elicitation
        if method == "tasks/input":  # a task's elicited input (2025-11-25)
            return self.tasks and self.elicitation
        if method == "notifications/tasks/status" and not self.tasks:
            return False  # 2025-11-25 tasks' notification: only where that version was negotiated
        return (
            self.default_caller is None
            or self.host_notifications
            or method.startswith("notifications/")
        )


def result_value(result: Any, stateless: bool) -> Any:
    """A method's result as the wire carries it: `{}` for none; stateless-era requests get
    `resultType: "complete"` in an object result that does not name its own."""
    if stateless:
        result = msgspec.to_builtins(result) if result is not None else {}
        if isinstance(result, dict):
            result = {"resultType": "complete", **result}  # a task result keeps its "task"
    return {} if result is None else result


def success_reply(result: Any, request_id: Any, stateless: bool) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result_value(result, stateless), "id": request_id}


def valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings, integers or null (never booleans)."""
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )
