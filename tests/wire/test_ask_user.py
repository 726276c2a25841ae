"""ask_user over real pipes (docs/semantics.md section 14, PROTOCOL.md section 6): served only
with `--ask-user on`; a host that declared `experimental.subagentd.askUser` gets `question/ask`
and answers with `question/answer`; a host that did not makes the call fail at once; a question
that ends unanswered is withdrawn with `question/cancelled`."""

from __future__ import annotations

from typing import Any

import pytest

from subagentd.client import RpcError
from subagentd.core.settings import served_tools

QUESTION = "Delete the old backups?"
ASKED = 'Subagent c1 ("cleaner") asks you:\nDelete the old backups?'


def tree(make_server: Any, ask_user: bool = True, **capabilities: Any) -> Any:
    host = make_server(initialize=False, tools=served_tools(None, False, ask_user)).host
    host.initialize(**capabilities)
    host.open("root")
    host.spawn("root", "c1", label="cleaner")
    return host


def test_ask_user_is_served_only_with_ask_user_on_and_only_to_children(make_server):
    host = tree(make_server, askUser=True)
    names = [
        t["name"] for t in host.call("tools/list", {"_meta": {"subagentd/caller": "c1"}})["tools"]
    ]
    assert names[-2:] == ["ask_parent", "ask_user"]
    names = [
        t["name"] for t in host.call("tools/list", {"_meta": {"subagentd/caller": "root"}})["tools"]
    ]
    assert "ask_user" not in names  # a root's client is the person's own
    off = tree(make_server, ask_user=False, askUser=True)
    names = [
        t["name"] for t in off.call("tools/list", {"_meta": {"subagentd/caller": "c1"}})["tools"]
    ]
    assert "ask_user" not in names


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            {"action": "accept", "answer": "yes, all of them"},
            {
                "action": "accept",
                "answer": "yes, all of them",
                "text": "the person answered: yes, all of them",
            },
        ),
        (
            {"action": "decline"},
            {
                "action": "decline",
                "text": "the person declined to answer; go on without the answer",
            },
        ),
        (
            {"action": "cancel"},
            {
                "action": "cancel",
                "text": "the person dismissed the question without answering; go on without the"
                " answer",
            },
        ),
    ],
)
def test_a_host_is_asked_with_question_ask_and_answers_with_question_answer(
    make_server, reply, expected
):
    host = tree(make_server, askUser=True)
    asking = host.start(
        "ask_user", {"caller": "c1", "question": QUESTION, "options": ["yes", "no"]}
    )
    ask = host.notification("question/ask")
    question_id = ask["question_id"]
    assert ask == {
        "question_id": question_id,
        "root_id": "root",
        "agent_id": "c1",
        "label": "cleaner",
        "question": QUESTION,
        "options": ["yes", "no"],
        "message": ASKED + '\nOffered answers: "yes", "no".',
    }
    assert host.call("question/answer", {"question_id": question_id, **reply}) == {}
    assert host.response(asking)["result"] == expected
    # answered once: a second answer is refused
    with pytest.raises(RpcError) as error:
        host.call("question/answer", {"question_id": question_id, "action": "cancel"})
    assert error.value.message == (
        f"question {question_id} is not open (it was answered or ended, or never asked)"
    )


def test_with_no_way_to_reach_a_person_the_call_fails_at_once(make_server):
    host = tree(make_server)  # the host did not declare askUser
    result = host.call(
        "tools/call",
        {
            "name": "ask_user",
            "arguments": {"question": QUESTION},
            "_meta": {"subagentd/caller": "c1"},
        },
    )
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Error: no person can be asked: the client of this tree's root (root) offers no way to"
        " ask one (an MCP client declares elicitation; a host declares"
        " experimental.subagentd.askUser); go on without the answer"
    )


def test_an_interrupt_ends_the_question_and_withdraws_it(make_server):
    host = tree(make_server, askUser=True)
    asking = host.start("ask_user", {"caller": "c1", "question": QUESTION})
    question_id = host.notification("question/ask")["question_id"]
    host.call("agents/interrupt", {"agent_id": "c1"})
    assert host.notification("question/cancelled") == {
        "question_id": question_id,
        "reason": "interrupted",
    }
    assert host.response(asking)["result"] == {
        "ended": "interrupted",
        "text": "no answer from the person: your turn was interrupted; stop and wait for your"
        " next message",
    }


def test_a_question_nobody_answers_ends_at_the_question_timeout(make_server):
    from subagentd.core.clock import ManualClock

    host = make_server(
        initialize=False, tools=served_tools(None, False, True), clock=ManualClock()
    ).host
    host.initialize(askUser=True)
    host.open("root")
    host.spawn("root", "c1", label="cleaner")
    asking = host.start("ask_user", {"caller": "c1", "question": QUESTION})
    question_id = host.notification("question/ask")["question_id"]
    host.call("clock/advance", {"seconds": 599.9})
    host.barrier()  # everything written so far is read: the question is still open
    assert not [n for n in host.notifications if n.get("method") == "question/cancelled"]
    host.call("clock/advance", {"seconds": 0.2})
    assert host.notification("question/cancelled") == {
        "question_id": question_id,
        "reason": "timeout",
    }
    assert host.response(asking)["result"] == {
        "ended": "timeout",
        "text": "no answer from the person: nobody answered within 600 seconds; go on without"
        " the answer, or ask again",
    }
