"""Questions a running subagent asks its parent (docs/semantics.md sections 12 and 13).

Two kinds share one path, one status (`waiting`) and one answer: `ask_parent` (core/asking.py,
free text, options only offered; source kind `subagent-question`) and, with `--acp-permission
ask-parent`, the ACP runner's `session/request_permission`, held here while the subagent's turn
keeps running. A question ends when it is answered, when the child's turn is interrupted or ends,
when its parent is interrupted or leaves, after its timeout, or at shutdown.

Longer than ~300 lines on purpose: asking, answering and every way a question ends share the
per-child queue and the parent's inbox bound; split, each end would have to be handed them.

Permission questions in detail: The question goes to the subagent's durable parent
as a waking input (a message from the subagent, form `permission`, which `wait_agents` returns
as news); the parent answers with `send_message` whose whole message names one option. A
question nobody answers is cancelled when its turn is interrupted or ends, or after its timeout.
One question per subagent is asked at a time; the next one waits until that one is resolved
(at most WAITING wait, later ones are answered by the deny rule at once), and a question is put
to the parent only while its inbox has room for it and its possible cancellation
(`--max-queued`); when the turn ends, the requests still waiting are cancelled unasked, so the
parent hears of the asked one only. What a question shows of the agent's strings is bounded.
Questions live in memory only: they end with the turn whose agent asked them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.registry import LiveAgent
from subagentd.core.scheduling import Scheduler
from subagentd.core.stamps import mint, now
from subagentd.errors import QuotaExceededError, error_for
from subagentd.schema.codes import Code
from subagentd.schema.messages import Message, Source, TextBlock
from subagentd.schema.tools import SendMessageResult

_encode = msgspec.json.Encoder().encode
_TRIMMED = " \t\r\n`'\"*.!"  # what may surround an answer's option
FORM = "permission"  # the source form of a permission question and of its cancellation
FREE_FORM = "question"  # the source form of an ask_parent question and of its cancellation
FORMS = (FORM, FREE_FORM)
WAITING = 16  # requests of one subagent held at once: the one asked and those waiting their turn
OPTIONS_SHOWN = 10  # options a question lists (the others can still be named by the answer)


@dataclass(frozen=True, slots=True)
class Option:
    """One of the agent's permission options."""

    option_id: str
    name: str
    kind: str


# (the option chosen, None when cancelled or free; why: "answered", "interrupted", "ended",
# "parent", "timeout", "shutdown"; the answer's whole text when answered, else "")
Resolve = Callable[[Option | None, str, str], None]


@dataclass(eq=False)
class Question:
    """One permission request of a subagent's running turn."""

    child_id: str
    turn_id: str
    title: str
    kind: str | None
    options: list[Option]
    timeout: float  # seconds
    resolve: Resolve  # called once, inside the transaction that resolves it
    parent_id: str = ""
    delivered: bool = False  # its message is in the parent's inbox
    free: bool = False  # ask_parent: any text answers it (the options are only offered)
    label: str = ""  # the child's label (a free question names it)
    key: str = field(default_factory=mint)  # its key among an MCP task's inputRequests
    stop_timer: Callable[[], None] | None = field(default=None, repr=False)


class Questions:
    """The pending questions, per subagent, oldest first."""

    def __init__(self, agents: Agents, scheduler: Scheduler) -> None:
        self.agents = agents
        self.registry = agents.registry
        self.scheduler = scheduler
        self.pending: dict[str, list[Question]] = {}
        # an asked question and its end, told to MCP tasks (core/tasks.py: 2025-11-25's
        # elicitation of a task's input)
        self.asked: Callable[[Question], None] = lambda question: None
        self.over: Callable[[Question], None] = lambda question: None

    def ask(self, question: Question) -> bool:
        """File the question (inside a transaction); False when there is nobody to ask: the
        turn is no longer the subagent's open one, or its parent is not live here or closing."""
        child = self.registry.get(question.child_id)
        if child is None or child.turn is None or child.turn.turn_id != question.turn_id:
            return False
        parent = self.registry.get(child.parent_id) if child.parent_id else None
        if parent is None or parent.disposing:
            return False
        queue = self.pending.get(question.child_id, [])
        if len(queue) >= WAITING or (not queue and not self._room(parent)):
            return False
        question.parent_id = parent.agent_id
        self.pending[question.child_id] = [*queue, question]
        if not queue:
            self._deliver(question, parent)
        return True

    def _room(self, parent: LiveAgent) -> bool:
        """The parent's inbox has room for a question and its cancellation (--max-queued)."""
        try:
            self.agents.quotas.inbox(parent.agent_id, parent, extra=2)
        except QuotaExceededError:
            return False
        return True

    def answer(self, target: LiveAgent, message: str) -> SendMessageResult | None:
        """A send_message from the target's parent (every rule passed) while the target has a
        question: the option the message names answers it. None when no question is pending;
        a refusal when the message names no option."""
        queue = self.pending.get(target.agent_id)
        if not queue:
            return None
        question = queue[0]
        if target.turn is None or target.turn.turn_id != question.turn_id:  # ended unseen
            self.cancel(target.agent_id, question.turn_id, "ended")
            return None
        option = None if question.free else match(question.options, message)
        if option is None and not question.free:
            ids = _listed([_cut(o.option_id) for o in question.options])
            reason = texts.PERMISSION_NO_OPTION.format(
                id=texts.shown(target.agent_id), title=_title(question), ids=ids
            )
            raise error_for(Code.INVALID_STATE, texts.NOT_DELIVERED.format(reason=reason))
        message_id = mint()
        source = Source(kind="coordinator", form="relay", sender_session_id=question.parent_id)
        blocks = [TextBlock(text=message)]
        store = self.agents.store
        store.insert_message(
            message_id,
            target.agent_id,
            _encode(blocks).decode(),
            _encode(source).decode(),
            "claimed",
            now(),
        )
        self.agents.record(
            target.agent_id,
            question.turn_id,
            "message",
            Message(message_id=message_id, content=blocks, source=source),
        )
        self._resolve(question, option, "answered", message)
        if option is None:  # a free question's answer
            text = texts.QUESTION_ANSWERED.format(id=texts.shown(target.agent_id))
        else:
            text = texts.PERMISSION_ANSWERED.format(
                id=texts.shown(target.agent_id), option=texts.shown(option.option_id)
            )
        return SendMessageResult(text=text, message_id=message_id)

    def input_request(self, child_id: str) -> tuple[str, dict[str, Any]] | None:
        """The child's open question as an MCP task shows it (`input_required`): its key and an
        `elicitation/create` request (a form of one string field, `answer`; for a permission
        question an enum of its option ids). None when it has none."""
        question = self.open_question(child_id)
        if question is None:
            return None
        # what the parent reads, but for how to answer by send_message
        blocks = (_free_blocks if question.free else _permission_blocks)(question)[:-1]
        answer: dict[str, Any] = {"type": "string", "title": texts.INPUT_ANSWER_TITLE}
        if question.free:
            answer["description"] = texts.INPUT_FREE_ANSWER
        else:
            answer["description"] = texts.INPUT_OPTION_ANSWER
            answer["enum"] = [o.option_id for o in question.options]
        params = {
            "mode": "form",
            "message": "\n".join(b.text for b in blocks),
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": answer},
                "required": ["answer"],
            },
        }
        return question.key, {"method": "elicitation/create", "params": params}

    def answer_input(self, target: LiveAgent, key: str, response: Any) -> bool:
        """An MCP client's answer to the child's open question with this key (`tasks/update`'s
        `inputResponses`, an ElicitResult): `accept` with `content.answer` answers it as the
        parent's send_message would; `decline` or `cancel` ends it (why `declined`). False when
        no open question has this key (the response is ignored)."""
        question = self.open_question(target.agent_id)
        if question is None or question.key != key:
            return False
        action = response.get("action") if isinstance(response, dict) else None
        content = response.get("content") if isinstance(response, dict) else None
        if action in ("decline", "cancel"):
            self._resolve(question, None, "declined")
            return True
        text = content.get("answer") if isinstance(content, dict) else None
        if action != "accept" or not isinstance(text, str):
            raise error_for(Code.INVALID_PARAMS, texts.INPUT_BAD_RESPONSE.format(key=key))
        self.answer(target, text)
        return True

    def open_question(self, child_id: str) -> Question | None:
        """The child's question put to its parent, if it has one."""
        queue = self.pending.get(child_id)
        return queue[0] if queue and queue[0].delivered else None

    def agent_over(self, agent_id: str, turn_id: str | None, why: str) -> None:
        """The agent's turn is interrupted or ended (`why`), or it left (turn_id None): its own
        questions of that turn are cancelled with `why`; interrupted or gone, the questions put
        to it as a parent are cancelled too (cause `parent`)."""
        queue = self.pending.get(agent_id)
        if queue:
            turns = {q.turn_id for q in queue} if turn_id is None else {turn_id}
            for turn in turns:
                self.cancel(agent_id, turn, why)
        if why == "ended" and turn_id is not None:
            return  # a parent's turn that ends leaves the questions put to it open
        asked = [
            q
            for child in list(self.pending)
            for q in self.pending.get(child, ())
            if q.parent_id == agent_id and q.child_id != agent_id
        ]
        cause = "shutdown" if why == "shutdown" else "parent"
        for child_id, turn in dict.fromkeys((q.child_id, q.turn_id) for q in asked):
            self.cancel(child_id, turn, cause)

    def shutdown(self) -> None:
        """The server stops: every question ends (the parent is not told: it stops too)."""
        for child_id in list(self.pending):
            for question in list(self.pending.get(child_id, ()))[::-1]:
                self._resolve(question, None, "shutdown")

    def cancel(self, child_id: str, turn_id: str, why: str) -> None:
        """Cancel the subagent's questions of that turn (inside a transaction); the parent is
        told of the one it was asked. The waiting ones go first (last to first), so none of them
        is put to the parent on the way."""
        for question in [q for q in self.pending.get(child_id, ()) if q.turn_id == turn_id][::-1]:
            self._resolve(question, None, why)

    def _expire(self, question: Question) -> None:
        if question in self.pending.get(question.child_id, ()):
            self._resolve(question, None, "timeout")

    def _resolve(
        self, question: Question, option: Option | None, why: str, answer: str = ""
    ) -> None:
        queue = self.pending.get(question.child_id, [])
        queue.remove(question)
        if not queue:
            self.pending.pop(question.child_id, None)
        if question.stop_timer is not None:
            question.stop_timer()
        parent = self.registry.get(question.parent_id)
        live = parent is not None and not parent.disposing
        told = why != "answered"
        if question.delivered and told and live:
            assert parent is not None
            reason = texts.PERMISSION_WHY[why].format(seconds=_seconds(question.timeout))
            if question.free:
                first = texts.QUESTION_CANCELLED.format(
                    id=texts.shown(question.child_id), why=reason
                )
            else:
                first = texts.PERMISSION_CANCELLED.format(
                    id=texts.shown(question.child_id), title=_title(question), why=reason
                )
            self._send(parent, question, [TextBlock(text=first)])
        if question.delivered:
            self._status(question.child_id, False)
            self.over(question)
        question.resolve(option, why, answer)
        if queue and question.delivered:  # the asked one: the next waiting one, if it can be
            following = queue[0]
            if parent is not None and live and self._room(parent):
                self._deliver(following, parent)
            else:
                self._resolve(following, None, "ended")

    def _status(self, child_id: str, waiting: bool) -> None:
        """The child is shown `waiting` while its question is open (`running` again after)."""
        child = self.registry.get(child_id)
        if child is not None and child.asking != waiting:
            child.asking = waiting
            self.agents.status_changed(child)

    def _deliver(self, question: Question, parent: LiveAgent) -> None:
        """The question into the parent's inbox, and its timeout armed."""
        if question.free:
            blocks = _free_blocks(question)
        else:
            blocks = _permission_blocks(question)
        question.delivered = True
        self._send(parent, question, blocks)
        self._status(question.child_id, True)
        question.stop_timer = self.agents.timers.call_later(
            question.timeout, lambda: self._expire(question)
        )
        self.asked(question)

    def _send(self, parent: LiveAgent, question: Question, blocks: list[TextBlock]) -> None:
        source = Source(
            kind="subagent-question" if question.free else "subagent-report",
            form=FREE_FORM if question.free else FORM,
            summary=texts.summary_of(blocks[0].text),
            sender_session_id=question.child_id,
        )
        self.scheduler.accept(parent.agent_id, blocks, source, parent)


def _free_blocks(question: Question) -> list[TextBlock]:
    """An ask_parent question as its parent's model reads it (docs/semantics.md section 13)."""
    shown_id = texts.shown(question.child_id)
    blocks = [
        TextBlock(text=texts.QUESTION_ASKED.format(id=shown_id, label=_label(question.label))),
        TextBlock(text=question.title),
    ]
    if question.options:
        listed = ", ".join(f'"{texts.shown(o.option_id)}"' for o in question.options)
        blocks.append(TextBlock(text=texts.QUESTION_OPTIONS.format(options=listed)))
    how = texts.QUESTION_HOW.format(id=shown_id, seconds=_seconds(question.timeout))
    blocks.append(TextBlock(text=how))
    return blocks


def _permission_blocks(question: Question) -> list[TextBlock]:
    """A permission question as its parent's model reads it (docs/semantics.md section 12)."""
    shown_id = texts.shown(question.child_id)
    kind = texts.PERMISSION_KIND.format(kind=texts.shown(question.kind)) if question.kind else ""
    options = _listed([f"{_cut(o.option_id)} ({_cut(o.name)})" for o in question.options])
    return [
        TextBlock(
            text=texts.PERMISSION_ASKED.format(id=shown_id, title=_title(question), kind=kind)
        ),
        TextBlock(text=texts.PERMISSION_OPTIONS.format(options=options)),
        TextBlock(
            text=texts.PERMISSION_HOW.format(id=shown_id, seconds=_seconds(question.timeout))
        ),
    ]


def match(options: list[Option], message: str) -> Option | None:
    """The option a message names: the whole message, trimmed of spaces, quotes, backticks,
    `*`, `.` and `!`, compared without case (and with spaces, `-` and `_` alike) to each option's
    id, else its name, else its kind; None when it names none, or several at the first level
    that matches."""
    wanted = _normal(message)
    if not wanted:
        return None
    for part in ("option_id", "name", "kind"):
        found = [o for o in options if _normal(getattr(o, part)) == wanted]
        if found:
            return found[0] if len(found) == 1 else None
    return None


def _normal(text: str) -> str:
    return "_".join(text.strip(_TRIMMED).casefold().replace("-", " ").replace("_", " ").split())


def _title(question: Question) -> str:
    title = texts.shown(question.title[: texts.TITLE_LIMIT * 4])
    if len(title) > texts.TITLE_LIMIT:
        return title[: texts.TITLE_LIMIT - 1] + "…"
    return title


def _cut(text: str) -> str:
    """An agent's option id or name as a question shows it: one line, at most OPTION_LIMIT
    characters (cut to one less and `…`)."""
    shown = texts.shown(text[: texts.OPTION_LIMIT * 4])
    if len(shown) > texts.OPTION_LIMIT:
        return shown[: texts.OPTION_LIMIT - 1] + "…"
    return shown


def _listed(items: list[str]) -> str:
    """At most OPTIONS_SHOWN items joined by `, `, then `and <n> more` for the others."""
    shown = ", ".join(items[:OPTIONS_SHOWN])
    more = len(items) - OPTIONS_SHOWN
    return shown if more <= 0 else texts.OPTIONS_MORE.format(shown=shown, more=more)


def _label(label: str) -> str:
    shown = texts.shown(label[: texts.TITLE_LIMIT * 4])
    return shown[: texts.TITLE_LIMIT - 1] + "…" if len(shown) > texts.TITLE_LIMIT else shown


def _seconds(value: float) -> str:
    return f"{value:g}"
