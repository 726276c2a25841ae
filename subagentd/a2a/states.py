"""How a subagent looks to an A2A client: its task state, status message, history and artifacts,
read from its `subagentd://agent/<id>` resource and its transcript (the table: docs/a2a.md)."""

from __future__ import annotations

import json
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

WORKING = TaskState.TASK_STATE_WORKING
SUBMITTED = TaskState.TASK_STATE_SUBMITTED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
FAILED = TaskState.TASK_STATE_FAILED
REJECTED = TaskState.TASK_STATE_REJECTED

# how a settled subagent's last turn ended (docs/semantics.md §8) as the task's state
ENDED: dict[str, int] = {
    "completed": COMPLETED,
    "aborted": CANCELED,
    "refusal": REJECTED,
    "max-tokens": FAILED,
    "error": FAILED,
    "deadline": FAILED,
}
MOVING = (WORKING, SUBMITTED)  # a stream goes on while the task is in one of these
KEPT_ARTIFACTS = 20  # the closing messages of a task's newest turns kept as artifacts


def state_of(status: str, parked: int, ended: str | None, queued: int = 0) -> int:
    """A subagent's A2A task state: running or with input waiting, working; live between turns,
    input-required when only parked messages (an interrupt) hold it, else working (it waits on
    subagents of its own); settled, by how its last turn ended."""
    if status in ("running", "waiting") or queued > 0:  # waiting: in its turn, for an answer
        return WORKING
    if status == "idle":
        return INPUT_REQUIRED if parked > 0 else WORKING
    if ended is None:
        return SUBMITTED
    return ENDED.get(ended, FAILED)


def agent_state(agent: dict[str, Any]) -> int:
    """`state_of` an agent resource (`resources/read`'s JSON)."""
    last = agent.get("last_turn") or {}
    return state_of(
        agent["status"], agent.get("parked", 0), last.get("reason"), agent.get("queued", 0)
    )


def text_message(text: str, task_id: str, message_id: str, role: int = Role.ROLE_AGENT) -> Message:
    return Message(
        message_id=message_id,
        context_id=task_id,
        task_id=task_id,
        role=role,  # type: ignore[arg-type]
        parts=[Part(text=text)],
    )


def event_text(data: dict[str, Any]) -> str:
    """The text of a transcript `message` event (its blocks joined with newlines)."""
    blocks = data.get("content") or []
    return "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict))


def status_of(agent: dict[str, Any], note: Message | None = None) -> TaskStatus:
    """The task's status: its state, with the last closing message once a turn ended (or `note`,
    e.g. a report, while it works)."""
    task_id = agent["agent_id"]
    state = agent_state(agent)
    last = agent.get("last_turn") or {}
    message = note
    if message is None and state not in MOVING and last.get("output"):
        message = text_message(last["output"], task_id, f"{task_id}-last")
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    if message is not None:
        status.message.CopyFrom(message)
    return status


def build_task(
    agent: dict[str, Any], events: list[dict[str, Any]], root: str, history_length: int | None
) -> Task:
    """The A2A task of a subagent: its status; history (the root's messages to it and the
    closing messages of its turns, oldest first, the newest `history_length` of them; all when
    None); the closing messages of its newest turns as artifacts."""
    task_id = agent["agent_id"]
    task = Task(id=task_id, context_id=task_id, status=status_of(agent))
    history: list[Message] = []
    artifacts: list[Artifact] = []
    for event in events:
        data = event.get("data") or {}
        if event["type"] == "message":
            source = data.get("source") or {}
            if source.get("sender_session_id") == root:
                history.append(
                    text_message(
                        event_text(data), task_id, data.get("message_id", ""), Role.ROLE_USER
                    )
                )
        elif event["type"] == "turn_end" and data.get("output"):
            turn_id = data.get("turn_id", "")
            history.append(text_message(data["output"], task_id, turn_id))
            artifacts.append(
                Artifact(
                    artifact_id=turn_id,
                    name="closing message",
                    description=f"turn {turn_id} ended {data.get('reason', '')}",
                    parts=[Part(text=data["output"])],
                )
            )
    if history_length is None or history_length > 0:
        kept = history if history_length is None else history[-history_length:]
        task.history.extend(kept)
    task.artifacts.extend(artifacts[-KEPT_ARTIFACTS:])
    task.metadata.update({"subagentd": {"label": agent.get("label") or "", "root": root}})
    return task


def message_text(message: Message) -> str:
    """What an A2A message says, as the subagent's message: text parts as they are, data parts
    as JSON, files named with their media type and URL (their bytes are not passed on)."""
    lines: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            lines.append(part.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToDict

            lines.append(json.dumps(MessageToDict(part.data), sort_keys=True))
        elif kind in ("url", "raw"):
            where = part.url if kind == "url" else f"{len(part.raw)} bytes, not passed on"
            name = part.filename or "a file"
            lines.append(f"[{name} ({part.media_type or 'unknown type'}): {where}]")
    return "\n".join(lines)
