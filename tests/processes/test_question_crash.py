"""A question open when subagentd is killed (SIGKILL): the question stays in the parent's inbox,
and after a restart the parent is told that it was cancelled because the child's turn ended.
A Python host drives the real `python -m subagentd` over pipes and answers as the root."""

from __future__ import annotations

import signal
from typing import Any

from tests.spawned import ServerProcess

QUESTION = "Which file: a.py or b.py?"
CANCELLED = (
    "The question of background subagent c1 was cancelled: its turn ended; do not answer it."
)


def c1_asks(host: Any, question: str = QUESTION) -> tuple[int, dict[str, Any]]:
    """root and its child c1 ("fixer"), which asks `question`: the ask_parent call's id and the
    root's turn/start that carries the question."""
    host.initialize()
    host.open("root")
    host.spawn("root", "c1", label="fixer")
    asking = host.start("ask_parent", {"caller": "c1", "question": question})
    return asking, host.notification("turn/start", agent_id="root")


def texts(turn: dict) -> list[str]:
    return [b["text"] for m in turn["messages"] for b in m["content"]]


def test_a_python_host_answers_a_question_as_the_root(tmp_path):
    server = ServerProcess(db=str(tmp_path / "q.db"))
    try:
        host = server.host
        asking, turn = c1_asks(host)
        assert texts(turn)[1] == QUESTION
        sent = host.tool("send_message", "root", subagent_id="c1", message="a.py")
        assert sent["text"] == "answer delivered to subagent c1; it continues its turn"
        answer = host.response(asking)
        assert answer["result"]["text"] == "the agent that started you answered: a.py"
        assert answer["result"]["answered"] is True
    finally:
        server.stop()


def test_a_question_open_at_a_kill_is_cancelled_after_the_restart(tmp_path):
    db = str(tmp_path / "q.db")
    server = ServerProcess(db=db)
    try:
        host = server.host
        _, turn = c1_asks(host)
        assert texts(turn)[1] == QUESTION  # asked: committed, the root's turn runs on it
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    finally:
        assert server.stop() == -signal.SIGKILL
    again = ServerProcess(db=db)
    try:
        host = again.host
        host.initialize()
        host.open("root")
        told: list[str] = []
        while CANCELLED not in told:
            turn = host.notification("turn/start", agent_id="root")
            told += texts(turn)
            host.end_turn("root", turn["turn_id"])
        assert told.count(CANCELLED) == 1
    finally:
        again.stop()
