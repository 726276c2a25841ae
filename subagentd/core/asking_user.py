"""ask_user: a running subagent asks the person behind its tree's root and waits (served only
with `--ask-user on`; docs/semantics.md section 14).

The question goes up the tree to the root's client: `question/ask` (schema/notifications.py)
is emitted, which the connection writes to a host that declared
`experimental.subagentd.askUser` as that notification, or to an MCP client that declared
`elicitation` as an `elicitation/create` request (server/dispatcher.py); the answer comes back
as `question/answer` (or the elicitation's response, turned into it). With no way to reach a
person (`Agents.person` says so for the root) the call fails at once. A question ends
unanswered when the asking turn is interrupted or ends, after `--question-timeout`, or at
shutdown; the client is told with `question/cancelled`. While a question is open, the asker
and every live agent above it whose turn is open are shown `waiting`. Questions live in memory
only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.asking import checked_options
from subagentd.core.questions import Questions
from subagentd.core.stamps import mint
from subagentd.core.waits import Waiter, Waits
from subagentd.errors import error_for
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import QuestionAnswerParams
from subagentd.schema.notifications import QuestionAsk, QuestionOver
from subagentd.schema.tools import AskUserArgs, AskUserResult

TASK_PREFIX = "task:"  # a question id that names a task's input: task:<task id>:<key>
SLACK = 2.0  # the wait outlives its question by this factor: the question's own timer ends it


@dataclass(eq=False)
class UserQuestion:
    """One open ask_user question."""

    question_id: str
    child_id: str
    turn_id: str
    root_id: str
    lineage: tuple[str, ...] = ()  # the asker and its durable ancestors, nearest first
    ended: list[AskUserResult] = field(default_factory=list)
    stop_timer: Callable[[], None] | None = None


class AskingUser:
    """The ask_user tool and the answers to it; authority only from the caller (a live child
    in its turn) and, for an answer, the connection of the question's root."""

    def __init__(self, agents: Agents, questions: Questions, waits: Waits) -> None:
        self.agents = agents
        self.registry = agents.registry
        self.questions = questions
        self.waits = waits
        self.pending: dict[str, UserQuestion] = {}  # by question id
        self.by_child: dict[str, str] = {}  # child id -> its open question's id
        # an answer to a task's elicited input (`task:<task id>:<key>`; set to TaskRules')
        self.task_answer: Callable[[str | None, str, str, dict[str, Any]], None] | None = None

    def ask_user(
        self,
        caller: str,
        activation: str | None,
        args: AskUserArgs,
        token: str | int | None = None,
    ) -> AskUserResult | Waiter:
        child = self.agents.live_caller(caller, activation)
        shown = texts.shown(caller)
        if child is None or child.disposing or child.turn is None or child.turn.interrupted:
            raise error_for(Code.INVALID_STATE, texts.USER_NOT_RUNNING.format(id=shown))
        options = checked_options(args.question, args.options)
        if caller in self.by_child or self.questions.pending.get(caller):
            raise error_for(Code.INVALID_STATE, texts.USER_OPEN.format(id=shown))
        root = child.lineage[-1] if child.lineage else caller
        if not self.agents.person(root):
            raise error_for(Code.INVALID_STATE, texts.USER_UNREACHABLE.format(root=root))
        self.agents.quotas.text("the question", args.question)
        record = self.agents.store.get_session(caller)
        label = (record.label or "") if record is not None else ""
        turn_id = child.turn.turn_id
        timeout = self.agents.settings.question_timeout
        question = UserQuestion(mint(), caller, turn_id, root, child.lineage or (caller,))
        self.pending[question.question_id] = question
        self.by_child[caller] = question.question_id
        listed = ", ".join(f'"{texts.shown(o)}"' for o in dict.fromkeys(options))
        lines = [texts.USER_ASKED.format(id=shown, label=texts.shown(label)), args.question]
        if options:
            lines.append(texts.USER_OPTIONS.format(options=listed))
        self.agents.emit(
            "question/ask",
            QuestionAsk(
                question_id=question.question_id,
                root_id=root,
                agent_id=caller,
                label=label,
                question=args.question,
                options=list(dict.fromkeys(options)) or None,
                message="\n".join(lines),
            ),
        )
        asked = {"question": args.question, "to": "user", "question_id": question.question_id}
        self.agents.record(caller, turn_id, "question", asked)
        self._hold(question, True)
        question.stop_timer = self.agents.timers.call_later(
            timeout, lambda: self._end(question, "timeout")
        )

        def check(timed_out: bool) -> AskUserResult | None:
            if question.ended:
                return question.ended[0]
            if timed_out:  # the question's own timer ends it first; this is a backstop
                self._end(question, "timeout")
                return question.ended[0]
            return None

        waiter = self.waits.add(check, int(timeout * 1000 * SLACK) + 1000, token)
        waiter.abandoned = lambda: self._end(question, "ended")
        return waiter

    def answer(self, p: QuestionAnswerParams, root: str | None) -> None:
        """`question/answer` (or an elicitation's response): the person's action. `root`: the
        connection's own root when it serves one (--caller), which must be the question's."""
        task, _, key = p.question_id.removeprefix(TASK_PREFIX).partition(":")
        if p.question_id.startswith(TASK_PREFIX) and key and self.task_answer is not None:
            response: dict[str, Any] = {"action": p.action}
            if p.action == "accept":
                response["content"] = {"answer": p.answer or ""}
            self.task_answer(root, task, key, response)
            return
        question = self.pending.get(p.question_id)
        if question is None or (root is not None and question.root_id != root):
            raise error_for(
                Code.INVALID_PARAMS, texts.USER_NO_QUESTION.format(id=texts.shown(p.question_id))
            )
        if p.action == "accept":
            answer = p.answer or ""
            text = texts.USER_ANSWERED.format(answer=answer)
            result = AskUserResult(action="accept", answer=answer, text=text)
        elif p.action == "decline":
            result = AskUserResult(action="decline", text=texts.USER_DECLINED)
        else:
            result = AskUserResult(action="cancel", text=texts.USER_CANCELLED)
        self._close(question, result, p.action)

    def agent_over(self, agent_id: str, turn_id: str | None, why: str) -> None:
        """The agent's turn is interrupted or ended (`why`), or it left: its question ends."""
        question_id = self.by_child.get(agent_id)
        question = self.pending.get(question_id or "")
        if question is not None and (not turn_id or turn_id == question.turn_id):
            self._end(question, why if why in texts.USER_WHY else "ended")

    def _end(self, question: UserQuestion, why: str) -> None:
        if question.question_id not in self.pending:
            return
        seconds = f"{self.agents.settings.question_timeout:g}"
        text = texts.USER_ENDED.format(why=texts.USER_WHY[why].format(seconds=seconds))
        result = AskUserResult(ended=why, text=text)  # type: ignore[arg-type]
        self._close(question, result, why)
        self.agents.emit(
            "question/cancelled",
            QuestionOver(question_id=question.question_id, reason=why),  # type: ignore[arg-type]
        )

    def _close(self, question: UserQuestion, result: AskUserResult, why: str) -> None:
        self.pending.pop(question.question_id, None)
        self.by_child.pop(question.child_id, None)
        if question.stop_timer is not None:
            question.stop_timer()
        question.ended.append(result)
        self.agents.record(question.child_id, question.turn_id, "question_end", {"why": why})
        self._hold(question, False)

    def _hold(self, question: UserQuestion, held: bool) -> None:
        """The asker and each live agent above it are shown `waiting` while the question is open
        (those with an open turn: `LiveAgent.status`), and their status again once it ends."""
        asker = question.child_id
        for agent_id in question.lineage:
            agent = self.registry.get(agent_id)
            if agent is None or (asker in agent.person) == held:
                continue
            before = agent.status
            if held:
                agent.person = (*agent.person, asker)
            else:
                agent.person = tuple(a for a in agent.person if a != asker)
            if agent.status != before:
                self.agents.status_changed(agent)
