"""ask_parent: a running subagent asks the agent that started it and waits (SEMANTICS.md §13).

The call files a free question with core/questions.py (one message in the parent's inbox, the
child shown `waiting`) and answers later, as a Waiter, when the question ends: the parent's next
`send_message` to the child is the answer; the child's turn interrupted or ended, the parent
interrupted or gone, `--question-timeout`, shutdown or the caller hanging up end it unanswered,
with an error result that says which.
"""

from __future__ import annotations

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.questions import Option, Question, Questions
from subagentd.core.waits import Waiter, Waits
from subagentd.errors import BudgetExceededError, QuotaExceededError, error_for
from subagentd.schema.codes import Code
from subagentd.schema.tools import AskParentArgs, AskParentResult

THE_QUESTION = "the question"
SLACK = 2.0  # the wait outlives its question by this factor: the question's own timer ends it


class Asking:
    """The ask_parent tool; authority only from the caller (a live child in its turn)."""

    def __init__(self, agents: Agents, questions: Questions, waits: Waits) -> None:
        self.agents = agents
        self.registry = agents.registry
        self.questions = questions
        self.waits = waits

    def ask_parent(
        self,
        caller: str,
        activation: str | None,
        args: AskParentArgs,
        token: str | int | None = None,
    ) -> AskParentResult | Waiter:
        child = self.agents.live_caller(caller, activation)
        shown = texts.shown(caller)
        if child is None:
            record = self.agents.store.get_session(caller)
            if record is not None and record.parent_id is not None:
                raise error_for(Code.INVALID_STATE, texts.ASK_NOT_RUNNING.format(id=shown))
        if child is None or child.parent_id is None:
            raise error_for(Code.UNAUTHORIZED, texts.ASK_NOT_CHILD.format(id=shown))
        if child.disposing:
            raise error_for(Code.ACTIVATION_CLOSING, texts.ASK_NOT_RUNNING.format(id=shown))
        if child.turn is None or child.turn.interrupted:
            raise error_for(Code.INVALID_STATE, texts.ASK_NOT_RUNNING.format(id=shown))
        options = checked_options(args.question, args.options)
        if self.questions.pending.get(caller):
            raise error_for(Code.INVALID_STATE, texts.ASK_OPEN.format(id=shown))
        parent = self.registry.get(child.parent_id)
        if parent is None or parent.disposing:
            raise error_for(Code.PARENT_UNAVAILABLE, texts.ASK_PARENT_GONE)
        quotas = self.agents.quotas
        try:
            quotas.text(THE_QUESTION, args.question)
            quotas.inbox(parent.agent_id, parent, extra=2)  # the question and its cancellation
            quotas.database()
            self.agents.budgets.require(parent.lineage)  # it wakes the parent: one of its turns
        except (QuotaExceededError, BudgetExceededError) as exc:
            raise exc.reworded(texts.QUESTION_NOT_ASKED) from None
        ended: list[AskParentResult] = []
        timeout = self.agents.settings.question_timeout
        turn_id = child.turn.turn_id

        def resolve(option: Option | None, why: str, answer: str) -> None:
            ended.append(_result(why, answer, timeout))
            self.agents.record(caller, turn_id, "question_end", {"why": why})

        record = self.agents.store.get_session(caller)
        question = Question(
            child_id=caller,
            turn_id=turn_id,
            title=args.question,
            kind=None,
            options=[Option(o, o, "") for o in dict.fromkeys(options)],
            timeout=timeout,
            resolve=resolve,
            free=True,
            label=(record.label or "") if record is not None else "",
        )
        if not self.questions.ask(question):
            raise error_for(Code.PARENT_UNAVAILABLE, texts.ASK_PARENT_GONE)
        asked = {"question": args.question, "parent": parent.agent_id}
        if options:
            asked["options"] = options  # type: ignore[assignment]
        self.agents.record(caller, turn_id, "question", asked)

        def check(timed_out: bool) -> AskParentResult | None:
            if ended:
                return ended[0]
            if timed_out:  # the question's own timer ends it first; this is a backstop
                self.questions.cancel(caller, turn_id, "timeout")
                return ended[0] if ended else _result("timeout", "", timeout)
            return None

        waiter = self.waits.add(check, int(timeout * 1000 * SLACK) + 1000, token)
        waiter.abandoned = lambda: self.questions.cancel(caller, turn_id, "withdrawn")
        return waiter


def checked_options(question: str, options: list[str] | None) -> list[str]:
    """A question's rules, for both kinds (ask_parent, ask_user): a question that says something
    and at most ASK_OPTION_COUNT short options; the options offered."""
    offered = options or []
    if len(offered) > texts.ASK_OPTION_COUNT or any(
        len(o) > texts.ASK_OPTION_CHARS for o in offered
    ):
        counts = {"count": texts.ASK_OPTION_COUNT, "chars": texts.ASK_OPTION_CHARS}
        raise error_for(Code.INVALID_PARAMS, texts.ASK_OPTIONS.format(**counts))
    if not question.strip():
        raise error_for(Code.INVALID_PARAMS, texts.ASK_EMPTY)
    return offered


def _result(why: str, answer: str, timeout: float) -> AskParentResult:
    if why == "answered":
        text = texts.ASK_ANSWERED.format(answer=answer)
        return AskParentResult(answered=True, answer=answer, text=text)
    reason = texts.ASK_WHY.get(why, texts.ASK_WHY["ended"]).format(seconds=f"{timeout:g}")
    shown_why = why if why in texts.ASK_WHY else "ended"
    return AskParentResult(
        answered=False,
        ended=shown_why,  # type: ignore[arg-type]
        text=texts.ASK_ENDED.format(why=reason),
    )
