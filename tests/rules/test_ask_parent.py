"""ask_parent: SEMANTICS.md section 13 (who may ask, the question the parent reads, the answer,
every way a question ends unanswered), on core/ with manual timers."""

from __future__ import annotations

from typing import Any

import pytest

from subagentd.core.waits import Waiter
from subagentd.errors import SubagentdError
from subagentd.schema.tools import AskParentArgs
from tests.core_host import CoreHost


class Asked:
    """One ask_parent call: its answer once the wait is over."""

    def __init__(self, core: CoreHost, caller: str, question: str, options: Any = None):
        self.core = core
        self.answers: list[Any] = []
        waiter = core.svc.asking.ask_parent(
            caller, None, AskParentArgs(question=question, options=options)
        )
        assert isinstance(waiter, Waiter)
        self.waiter = waiter
        waiter.done = self.answers.append

    def result(self) -> Any:
        self.core.svc.waits.check()  # what a write transaction ends with
        return self.answers[0] if self.answers else None


def tree(**settings: Any) -> CoreHost:
    core = CoreHost(**settings)
    core.open("root")
    core.spawn("root", "c1", label="fixer")
    core.notes.clear()
    return core


def question_blocks(seconds: str = "600", options: str | None = None) -> list[str]:
    blocks = [
        'Background subagent c1 ("fixer") asks you a question and waits for your answer; its'
        " turn goes on once you answer:",
        "Which file: a.py or b.py?",
    ]
    if options:
        blocks.append(f"It offers these answers: {options}.")
    blocks.append(
        "Answer with send_message to c1: your whole message is the answer (free text). If nobody"
        f" answers within {seconds} seconds the question is cancelled."
    )
    return blocks


def test_the_parent_is_asked_and_its_next_send_message_is_the_answer():
    core = tree()
    asked = Asked(core, "c1", "Which file: a.py or b.py?", ["a.py", "b.py"])
    assert asked.result() is None
    assert core.status("c1") == "waiting"
    [start] = core.take("turn/start", "root")
    [message] = start["messages"]
    assert [b["text"] for b in message["content"]] == question_blocks(options='"a.py", "b.py"')
    assert message["source"]["kind"] == "subagent-question"
    assert message["source"]["form"] == "question"
    assert message["source"]["sender_session_id"] == "c1"
    listing = core.list("root")
    assert listing.text == "c1 [waiting for your answer] — fixer"
    sent = core.send("root", "c1", "b.py, and keep the tests")
    assert sent.text == "answer delivered to subagent c1; it continues its turn"
    result = asked.result()
    assert result.answered is True
    assert result.text == "the agent that started you answered: b.py, and keep the tests"
    assert core.status("c1") == "running"
    assert core.take("turn/start", "c1") == []  # not a new turn
    # the question is over: the next message is an ordinary one again
    assert core.send("root", "c1", "thanks").text == (
        "message queued as the next turn for subagent c1"
    )


def test_a_one_shot_child_asks_and_is_answered():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "o1", label="once", mode="one-shot")
    asked = Asked(core, "o1", "Which file: a.py or b.py?")
    assert core.send("root", "o1", "a.py").text == (
        "answer delivered to subagent o1; it continues its turn"
    )
    assert asked.result().answer == "a.py"


def refusal(core: CoreHost, caller: str, **args: Any) -> SubagentdError:
    args.setdefault("question", "Which?")
    return core.refusal(core.svc.asking.ask_parent, caller, None, AskParentArgs(**args))


def test_who_may_ask_and_what():
    core = tree()
    assert refusal(core, "root").message == (
        'ask_parent is for subagents: agent "root" was not started by another agent (it has no'
        " parent to ask)"
    )
    assert refusal(core, "c1", options=[str(n) for n in range(11)]).message == (
        "question not asked: options takes at most 10 choices of at most 200 characters each"
    )
    assert refusal(core, "c1", question=" ").message == "question not asked: the question is empty"
    Asked(core, "c1", "first?")
    refused = refusal(core, "c1")
    assert refused.code == 1010
    assert refused.message == (
        'question not asked: agent "c1" already has a question open; wait for its answer before'
        " asking another"
    )
    core.end("c1")
    assert refusal(core, "c1").message == 'agent "c1" can ask only while its turn runs'


ENDS = {
    "the child's turn is interrupted": (
        lambda core: core.interrupt("root", "c1"),
        "no answer to your question: your turn was interrupted; stop and wait for your next"
        " message",
        "its turn was interrupted",
    ),
    "the child's turn ends": (
        lambda core: core.end("c1"),
        "no answer to your question: your turn ended",
        "its turn ended",
    ),
    "the timeout passes": (
        lambda core: core.timers.fire_all(),
        "no answer to your question: nobody answered within 600 seconds; go on without the"
        " answer, or ask again",
        "nobody answered within 600 seconds",
    ),
}


@pytest.mark.parametrize("end", list(ENDS))
def test_every_end_answers_the_call_with_an_error_and_tells_the_parent(end):
    act, text, why = ENDS[end]
    core = tree()
    asked = Asked(core, "c1", "Which file: a.py or b.py?")
    core.take("turn/start", "root")
    act(core)
    result = asked.result()
    assert (result.answered, result.text) == (False, text)
    assert core.status("c1") != "waiting"
    core.end("root")
    told = core.texts_of_turns("root")
    assert told[0] == [
        f"The question of background subagent c1 was cancelled: {why}; do not answer it."
    ]


def test_a_parent_interrupted_before_it_answered_ends_the_question():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="lead")
    core.spawn("c1", "g1", label="fixer")
    asked = Asked(core, "g1", "Which file?")
    assert core.list("root", "descendants").text.splitlines()[1] == (
        "g1 [waiting for an answer from c1] parent=c1 depth=2 — fixer"
    )
    core.interrupt("root", "c1")
    result = asked.result()
    assert (result.answered, result.ended) == (False, "parent")
    assert result.text == (
        "no answer to your question: the agent that started you was interrupted or finished"
        " before it answered; go on without the answer, or report what you need"
    )
    assert core.status("g1") == "running"  # its turn goes on without the answer


def test_a_shutdown_ends_the_question():
    core = tree()
    asked = Asked(core, "c1", "Which file?")
    core.svc.scheduler.interrupt(core.svc.agents.registry.get("c1"), "shutdown", None)
    assert asked.result().text == "no answer to your question: subagentd is shutting down"


def test_a_client_that_stops_waiting_withdraws_the_question():
    core = tree()
    asked = Asked(core, "c1", "Which file?")
    core.take("turn/start", "root")
    core.svc.waits.cancel(asked.waiter, abandoned=True)
    assert core.status("c1") == "running"
    core.end("root")
    assert core.texts_of_turns("root")[0] == [
        "The question of background subagent c1 was cancelled: it stopped waiting for the answer;"
        " do not answer it."
    ]
    assert core.send("root", "c1", "late").text == "message queued as the next turn for subagent c1"
