"""A model-based test of ask_parent's questions, driving core/ directly (SEMANTICS.md §13).

Hypothesis runs random programs over a root (run by the test as the host) with three children:
a child asks (ask_parent), the root sends a message (an answer while the child waits, else an
ordinary message), the host or the root interrupts a child or the root, a child's turn ends, the
question timeout fires, and idle children are given a new turn. After every step it checks: every
ask_parent call is answered at most once, and once its question is over it has its one answer;
a child is `waiting` exactly while its call has no answer and its turn is the one that asked; a
message handed to a call as its answer is never also queued as a turn, and an ordinary message
is never taken as an answer; no call is left without an answer once its turn ended. The rule
order Hypothesis picks covers the interleavings (an answer racing an interrupt, a timeout racing
an answer, a turn ending with its question open).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from subagentd.core.waits import Waiter
from subagentd.errors import SubagentdError
from subagentd.schema.tools import AskParentArgs
from tests.core_host import CoreHost

CHILDREN = ("c1", "c2", "c3")


@dataclass
class Call:
    """One ask_parent call: the turn that asked, and the answers it got (at most one)."""

    child: str
    turn_id: str
    answers: list[Any] = field(default_factory=list)


class QuestionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = CoreHost()
        self.core.open("root")
        for child in CHILDREN:
            self.core.spawn("root", child)
        self.calls: list[Call] = []
        self.sent: dict[str, str] = {}  # text -> "answer" or "message" (what send_message said)
        self.counter = 0

    def check(self) -> None:
        """What a write transaction ends with: the waits it ended are answered."""
        self.core.svc.waits.check()

    def open_call(self, child: str) -> Call | None:
        found = [c for c in self.calls if c.child == child and not c.answers]
        assert len(found) <= 1, found  # one question at a time
        return found[0] if found else None

    @rule(child=st.sampled_from(CHILDREN))
    def ask(self, child: str) -> None:
        turn_id = self.core.turn(child)
        try:
            waiter = self.core.svc.asking.ask_parent(
                child, None, AskParentArgs(question=f"q{self.counter}?")
            )
        except SubagentdError:
            # refused only when not in a running turn, or with a question already open
            agent = self.core.svc.agents.registry.get(child)
            interrupted = agent is not None and agent.turn is not None and agent.turn.interrupted
            assert turn_id is None or interrupted or self.open_call(child) is not None
            return
        assert turn_id is not None
        assert self.open_call(child) is None, "a second question was accepted"
        assert isinstance(waiter, Waiter)
        call = Call(child, turn_id)
        waiter.done = call.answers.append
        self.calls.append(call)
        self.counter += 1
        self.check()

    @rule(child=st.sampled_from(CHILDREN))
    def answer(self, child: str) -> None:
        text = f"m{self.counter}"
        self.counter += 1
        waiting = self.core.status(child) == "waiting"
        try:
            result = self.core.send("root", child, text)
        except SubagentdError:
            return
        if result.text.startswith("answer delivered"):
            assert waiting
            self.sent[text] = "answer"
        else:
            assert not waiting
            self.sent[text] = "message"
        self.check()

    @rule(child=st.sampled_from(CHILDREN))
    def interrupt_child(self, child: str) -> None:
        try:
            self.core.interrupt("root", child)
        except SubagentdError:
            return
        self.check()

    @rule()
    def interrupt_root(self) -> None:
        root = self.core.svc.agents.registry.get("root")
        if root is not None:
            self.core.svc.scheduler.interrupt(root, "user", None)
            self.check()

    @rule(child=st.sampled_from(("root", *CHILDREN)))
    def end_turn(self, child: str) -> None:
        if self.core.turn(child) is not None:
            self.core.end(child)
            self.check()

    @rule()
    def timeout(self) -> None:
        self.core.timers.fire_all()
        self.check()

    @rule()
    def take_notes(self) -> None:
        """The turns started so far: no answer was also queued as a turn."""
        for start in self.core.take("turn/start"):
            for message in start["messages"]:
                for block in message["content"]:
                    assert self.sent.get(block["text"]) != "answer", block["text"]

    @invariant()
    def each_call_has_at_most_one_answer_and_one_once_its_turn_is_over(self) -> None:
        for call in self.calls:
            assert len(call.answers) <= 1
            if not call.answers:
                # unanswered: its turn is still the child's open one, and the child waits
                assert self.core.turn(call.child) == call.turn_id, call
                assert self.core.status(call.child) == "waiting", call

    @invariant()
    def waiting_only_while_a_call_waits(self) -> None:
        for child in CHILDREN:
            if self.core.svc.agents.registry.get(child) is None:
                continue
            if self.core.status(child) == "waiting":
                assert self.open_call(child) is not None, child

    @invariant()
    def answered_calls_got_what_was_sent(self) -> None:
        for call in self.calls:
            if call.answers and call.answers[0].answered:
                assert self.sent.get(call.answers[0].answer) == "answer"


TestQuestions = QuestionMachine.TestCase
TestQuestions.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
