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
from subagentd.schema.tasks import TaskInput
from subagentd.wire.call import Call
from subagentd.wire.methods import method

REQUEST_PREFIX = "subagentd-question-"  # the id of an elicitation/create subagentd sends
TASK_REQUEST_PREFIX = "subagentd-task:"  # one for a task's input: subagentd-task:<task>:<key>
RELATED_TASK = "io.modelcontextprotocol/related-task"


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


def task_input_frame(note: TaskInput) -> dict[str, Any]:
    """A working task's child asked (2025-11-25): the question's `elicitation/create`, tagged
    with the task (`_meta` related-task), or its withdrawal once the question ended."""
    request_id = f"{TASK_REQUEST_PREFIX}{note.taskId}:{note.key}"
    if note.request is None:
        params: dict[str, Any] = {"requestId": request_id, "reason": "the question ended"}
        return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
    params = {**note.request["params"], "_meta": {RELATED_TASK: {"taskId": note.taskId}}}
    params.pop("mode", None)  # form is the default (2025-11-25); older clients know no mode
    return {"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create", "params": params}


def response_as_answer(message: Any) -> Any:
    """A client's response to an `elicitation/create` of ours, as the `question/answer`
    notification it stands for (a task's: question id `task:<task id>:<key>`); any other
    message unchanged."""
    request_id = message.get("id") if isinstance(message, dict) else None
    if not (
        isinstance(request_id, str)
        and "method" not in message
        and request_id.startswith((REQUEST_PREFIX, TASK_REQUEST_PREFIX))
        and ("result" in message or "error" in message)
    ):
        return message
    if request_id.startswith(REQUEST_PREFIX):
        question_id = request_id[len(REQUEST_PREFIX) :]
    else:
        question_id = "task:" + request_id[len(TASK_REQUEST_PREFIX) :]
    result = message.get("result")
    action = result.get("action") if isinstance(result, dict) else None
    params: dict[str, Any] = {
        "question_id": question_id,
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
