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


def deep_tree(make_server: Any, **settings: Any) -> Any:
    """root → c1 (planner, its turn open) → c2 (cleaner, its turn open), a host that answers."""
    host = make_server(initialize=False, tools=served_tools(None, False, True), **settings).host
    host.initialize(askUser=True)
    host.open("root")
    host.spawn("root", "c1", label="planner")
    host.spawn("c1", "c2", label="cleaner")
    return host


def shown(host: Any) -> dict[str, Any]:
    """What the listings say: list_agents of c1 (the asker's parent) and of the root (children
    and descendants), the statuses of agents/list and agents/get."""
    listed = host.call("agents/list", {"root_id": "root", "scope": "descendants"})["agents"]
    return {
        "c1 lists": host.call("list_agents", {"caller": "c1"})["text"],
        "root lists": host.call("list_agents", {"caller": "root"})["text"],
        "root lists all": host.call("list_agents", {"caller": "root", "scope": "descendants"})[
            "text"
        ],
        "agents/list": {row["id"]: row["status"] for row in listed},
        "agents/get": {
            agent_id: host.call("agents/get", {"agent_id": agent_id})["status"]
            for agent_id in ("root", "c1", "c2")
        },
    }


WAITING = {
    "c1 lists": "c2 [waiting for the person's answer] — cleaner",
    "root lists": "c1 [waiting: c2 below it waits for the person's answer] — planner",
    "root lists all": (
        "c1 [waiting: c2 below it waits for the person's answer] parent=root depth=1 — planner\n"
        "c2 [waiting for the person's answer] parent=c1 depth=2 — cleaner"
    ),
    "agents/list": {"c1": "waiting", "c2": "waiting"},
    # the root has no open turn (nothing of it waits): it stays idle
    "agents/get": {"root": "idle", "c1": "waiting", "c2": "waiting"},
}
RUNNING = {
    "c1 lists": "c2 [running] — cleaner",
    "root lists": "c1 [running] — planner",
    "root lists all": (
        "c1 [running] parent=root depth=1 — planner\nc2 [running] parent=c1 depth=2 — cleaner"
    ),
    "agents/list": {"c1": "running", "c2": "running"},
    "agents/get": {"root": "idle", "c1": "running", "c2": "running"},
}


def test_the_asker_and_every_agent_above_it_are_shown_waiting_until_the_person_answers(
    make_server,
):
    host = deep_tree(make_server, status_events=True)
    assert shown(host) == RUNNING
    told(host)
    asking = host.start("ask_user", {"caller": "c2", "question": QUESTION})
    question_id = host.notification("question/ask")["question_id"]
    assert shown(host) == WAITING
    assert told(host) == [("c2", "waiting"), ("c1", "waiting")]
    host.call("question/answer", {"question_id": question_id, "action": "accept", "answer": "y"})
    assert host.response(asking)["result"]["action"] == "accept"
    assert shown(host) == RUNNING
    assert told(host) == [("c2", "running"), ("c1", "running")]


def told(host: Any) -> list[tuple[str, str]]:
    """The `agent/status` notifications written so far (taken from the queue)."""
    host.barrier()
    notes = [n for n in host.notifications if n.get("method") == "agent/status"]
    for note in notes:
        host.notifications.remove(note)
    return [(n["params"]["agent_id"], n["params"]["status"]) for n in notes]


def test_an_agent_waits_for_its_own_question_to_its_parent_before_one_below_it(make_server):
    host = deep_tree(make_server)
    host.start("ask_user", {"caller": "c2", "question": QUESTION})
    host.notification("question/ask")
    host.start("ask_parent", {"caller": "c1", "question": "Which branch?"})
    host.notification("turn/start", agent_id="root")  # the question reached the root
    assert host.call("list_agents", {"caller": "root"})["text"] == (
        "c1 [waiting for your answer] — planner"
    )
    assert host.call("list_agents", {"caller": "c1"})["text"] == (
        "c2 [waiting for the person's answer] — cleaner"
    )


def test_the_statuses_come_back_when_the_question_times_out(make_server):
    from subagentd.core.clock import ManualClock

    host = deep_tree(make_server, clock=ManualClock())
    asking = host.start("ask_user", {"caller": "c2", "question": QUESTION})
    host.notification("question/ask")
    assert shown(host) == WAITING
    host.call("clock/advance", {"seconds": 600.1})
    assert host.response(asking)["result"]["ended"] == "timeout"
    assert shown(host) == RUNNING


def test_the_statuses_come_back_when_the_askers_turn_is_interrupted(make_server):
    host = deep_tree(make_server)
    asking = host.start("ask_user", {"caller": "c2", "question": QUESTION})
    host.notification("question/ask")
    host.call("agents/interrupt", {"agent_id": "c2"})
    assert host.response(asking)["result"]["ended"] == "interrupted"
    assert host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
    assert host.call("list_agents", {"caller": "root"})["text"] == "c1 [running] — planner"
