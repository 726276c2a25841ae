"""ask_user on the wire (docs/semantics.md section 14, PROTOCOL.md section 6): `question/answer`,
and the translation of a `question/ask` into an MCP `elicitation/create` request for a client
that declared `elicitation`, whose response comes back as that `question/answer`.

The request's id is `subagentd-question-<question id>`; its form has one string field,
`answer` (with the options as its enum when the child gave some). The response's `action`
(`accept` with `content.answer`, `decline`, `cancel`) is the answer; a JSON-RPC error response
counts as `cancel`. A question that ends unanswered is withdrawn with `notifications/cancelled`.
"""

from __future__ import annotations

from typing import Any

from subagentd.core import texts
from subagentd.schema import host_methods as h
from subagentd.schema.notifications import QuestionAsk, QuestionOver
from subagentd.wire.call import Call
from subagentd.wire.methods import method

REQUEST_PREFIX = "subagentd-question-"  # the id of an elicitation/create subagentd sends


def elicitation_request(ask: QuestionAsk) -> dict[str, Any]:
    """The `elicitation/create` request a `question/ask` is written as to an MCP client."""
    answer: dict[str, Any] = {"type": "string", "title": texts.INPUT_ANSWER_TITLE}
    if ask.options:
        answer["enum"] = ask.options
    else:
        answer["description"] = texts.INPUT_FREE_ANSWER
    return {
        "jsonrpc": "2.0",
        "id": REQUEST_PREFIX + ask.question_id,
        "method": "elicitation/create",
        "params": {
            "message": ask.message,
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": answer},
                "required": ["answer"],
            },
        },
    }


def elicitation_withdrawn(over: QuestionOver) -> dict[str, Any]:
    """The `notifications/cancelled` that withdraws an elicitation whose question ended."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": REQUEST_PREFIX + over.question_id, "reason": over.reason},
    }


def response_as_answer(message: Any) -> Any:
    """A client's response to an `elicitation/create` of ours, as the `question/answer`
    notification it stands for; any other message unchanged."""
    if not (
        isinstance(message, dict)
        and "method" not in message
        and isinstance(message.get("id"), str)
        and message["id"].startswith(REQUEST_PREFIX)
        and ("result" in message or "error" in message)
    ):
        return message
    result = message.get("result")
    action = result.get("action") if isinstance(result, dict) else None
    params: dict[str, Any] = {
        "question_id": message["id"][len(REQUEST_PREFIX) :],
        "action": action if action in ("accept", "decline", "cancel") else "cancel",
    }
    content = result.get("content") if isinstance(result, dict) else None
    if params["action"] == "accept":
        answer = content.get("answer") if isinstance(content, dict) else None
        if not isinstance(answer, str):
            params["action"] = "cancel"  # no answer in an accepted form: not an answer
        else:
            params["answer"] = answer
    return {"jsonrpc": "2.0", "method": "question/answer", "params": params}


@method("question/answer", h.QuestionAnswerParams, h.Empty, confined=True)
def question_answer(call: Call, p: h.QuestionAnswerParams) -> h.Empty:
    """The person's answer to a `question/ask` (a host's, or an elicitation's response); a
    --caller connection answers only its own root's questions."""
    call.service.asking_user.answer(p, call.session.default_caller)
    return h.Empty()
