"""`--acp-permission ask-parent`: an ACP agent's permission request held, its turn running, as a
question for the subagent's parent (docs/acp.md "Permissions", docs/semantics.md §12). The
scripted ACP agent (tests/scripts/acp_agent.py) asks over real pipes; the parent is the host's
root (its turns come to this test as `turn/start`) or another ACP agent (its model sees the
question as a `wait_agents` result)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from subagentd.client.errors import RpcError
from subagentd.core.questions import Option, match
from subagentd.core.texts import summary_of
from subagentd.view.inspect import summarize
from tests.processes import test_acp_runner
from tests.processes.test_acp_runner import AGENT, PATIENCE, AcpServer, steps

acp = test_acp_runner.acp  # the fixture: the scripted agent's server

CLAUDE_LIKE = [  # the options claude-code-acp offers for a tool call
    ["allow_always", "Always Allow", "allow_always"],
    ["allow", "Allow", "allow_once"],
    ["reject", "Reject", "reject_once"],
]


def question(child: str, title: str, kind: str | None, seconds: str = "600") -> list[str]:
    """The question's blocks, exactly as the parent's model is given them."""
    shown_kind = f" (kind: {kind})" if kind else ""
    return [
        f"Background subagent {child} asks your permission for a tool call and waits for your"
        f' answer: "{title}"{shown_kind}.',
        "Its options: allow_always (Always Allow), allow (Allow), reject (Reject).",
        f"Answer with send_message to {child} whose whole message is one option id; if nobody"
        f" answers within {seconds} seconds the request is cancelled.",
    ]


def root_turn(srv: AcpServer) -> dict[str, Any]:
    """The root's next turn/start (the host runs the root here)."""
    return srv.host.notification("turn/start", timeout=PATIENCE, agent_id="root")


def answer(srv: AcpServer, child: str, message: str) -> dict[str, Any]:
    return srv.host.call(
        "send_message", {"caller": "root", "subagent_id": child, "message": message}
    )


def permissions(srv: AcpServer, agent_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in srv.events(agent_id) if e["type"] == "acp_permission"]


def ask_to_write(path: Path) -> str:
    return steps(
        {
            "permission": "Write notes.txt",
            "kind": "edit",
            "options": CLAUDE_LIKE,
            "write": str(path),
        }
    )


def test_the_root_is_asked_answers_allow_and_the_childs_tool_call_runs(acp, tmp_path):
    srv = acp(permission="ask-parent")
    target = tmp_path / "notes.txt"
    srv.spawn("c1", ask_to_write(target))
    turn = root_turn(srv)
    (message,) = turn["messages"]
    blocks = question("c1", "Write notes.txt", "edit")
    assert [b["text"] for b in message["content"]] == blocks
    assert message["source"] == {
        "kind": "subagent-report",
        "form": "permission",
        "sender_session_id": "c1",
        "summary": summary_of(blocks[0]),
    }
    assert srv.host.call("agents/get", {"agent_id": "c1"})["status"] == "waiting"  # it waits
    assert not target.exists()
    result = answer(srv, "c1", " Allow. ")  # the id, whatever the case and the punctuation
    assert (
        result["text"]
        == 'answered the permission request of subagent c1 with "allow"; its turn goes on'
    )
    srv.host.end_turn("root", turn["turn_id"])
    end = srv.ends("c1", 1)[0]
    assert (end["reason"], end["output"]) == ("completed", "wrote notes.txt")
    assert target.read_text() == "done"
    assert permissions(srv, "c1") == [
        {
            "title": "Write notes.txt",
            "outcome": "asked",
            "parent": "root",
            "options": ["allow_always", "allow", "reject"],
        },
        {"title": "Write notes.txt", "outcome": "selected", "optionId": "allow", "by": "root"},
    ]
    shown = [summarize(e["type"], e["data"]) for e in srv.events("c1")]  # inspect, watch
    assert "permission for Write notes.txt: asked root" in shown
    assert "permission for Write notes.txt: selected allow by root" in shown
    said = [e for e in srv.events("c1") if e["type"] == "message"]
    assert said[-1]["data"]["message_id"] == result["message_id"]  # the answer, in c1's turn
    assert said[-1]["data"]["content"] == [{"type": "text", "text": " Allow. "}]
    got = srv.host.call("messages/get", {"message_id": result["message_id"]})
    assert got["state"] == "claimed"


def test_an_acp_parent_sees_the_question_in_wait_agents_and_rejects(acp, tmp_path):
    srv = acp(permission="ask-parent")
    target = tmp_path / "notes.txt"
    c1 = steps(
        {
            "tool": "spawn_agent",
            "args": {"label": "w", "prompt": ask_to_write(target), "child_id": "g1"},
        },
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "mode": "all", "timeout_ms": 50000}},
        {"tool": "send_message", "args": {"subagent_id": "g1", "message": "reject"}},
        {"tool": "wait_agents", "args": {"agent_ids": ["g1"], "mode": "all", "timeout_ms": 50000}},
        {"say": "c1 done"},
    )
    srv.spawn("c1", c1)
    end = srv.ends("c1", 1)[0]
    assert (end["reason"], end["output"]) == ("completed", "c1 done")
    calls = [e["data"] for e in srv.events("c1") if e["type"] == "acp_tool_call"]
    results = [call["text"] for call in calls if "text" in call]
    # what c1's model was given: the question ended a wait in mode "all" at once
    assert results[1] == "\n".join(
        [*question("g1", "Write notes.txt", "edit"), "still working: g1"]
    )
    assert (
        results[2]
        == 'answered the permission request of subagent g1 with "reject"; its turn goes on'
    )
    assert results[3].startswith("Background subagent g1 finished")
    assert results[3].endswith(
        "Its closing message:\nnot written\nnone of the subagents waited for is still working"
    )
    assert not target.exists()
    g1 = srv.ends("g1", 1)[0]
    assert (g1["reason"], g1["output"]) == ("completed", "not written")
    assert permissions(srv, "g1")[-1] == {
        "title": "Write notes.txt",
        "outcome": "selected",
        "optionId": "reject",
        "by": "c1",
    }


def test_an_interrupt_cancels_the_pending_question_and_the_parent_is_told(acp, tmp_path):
    srv = acp(permission="ask-parent")
    target = tmp_path / "notes.txt"
    srv.spawn("c1", ask_to_write(target))
    first = root_turn(srv)
    assert first["messages"][0]["source"]["form"] == "permission"
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "aborted"
    assert permissions(srv, "c1")[-1] == {
        "title": "Write notes.txt",
        "outcome": "cancelled",
        "why": "interrupted",
    }
    assert not target.exists()
    shown = [summarize(e["type"], e["data"]) for e in srv.events("c1")]
    assert "permission for Write notes.txt: cancelled (interrupted)" in shown
    srv.host.end_turn("root", first["turn_id"])
    told = root_turn(srv)["messages"]
    assert [b["text"] for b in told[0]["content"]] == [
        'The permission request of background subagent c1 ("Write notes.txt") was cancelled: its'
        " turn was interrupted; do not answer it."
    ]
    assert told[0]["source"]["form"] == "permission"


def test_an_answer_naming_no_option_is_refused_and_the_question_stays_open(acp, tmp_path):
    srv = acp(permission="ask-parent")
    target = tmp_path / "notes.txt"
    srv.spawn("c1", ask_to_write(target))
    turn = root_turn(srv)
    for text in ("sure, go ahead", "allow or reject", ""):
        with pytest.raises(RpcError) as refused:
            answer(srv, "c1", text)
        assert refused.value.code == 1010
        assert refused.value.message == (
            'message not delivered: subagent "c1" is waiting for your answer to its permission'
            ' request "Write notes.txt"; the message must be one of its option ids:'
            " allow_always, allow, reject"
        )
    assert srv.host.call("agents/get", {"agent_id": "c1"})["status"] == "waiting"
    result = answer(srv, "c1", "`reject_once`")  # an option's kind names it too
    assert result["text"].endswith('with "reject"; its turn goes on')
    srv.host.end_turn("root", turn["turn_id"])
    assert srv.ends("c1", 1)[0]["output"] == "not written"
    # with the question answered, a message is an ordinary one again: the next turn
    assert answer(srv, "c1", "thanks")["text"] == "message queued as the next turn for subagent c1"


def test_a_question_nobody_answers_is_cancelled_after_the_timeout(acp, tmp_path):
    srv = acp(permission="ask-parent", permission_timeout=2.0)
    srv.spawn("c1", steps({"permission": "Run make", "kind": "execute", "options": CLAUDE_LIKE}))
    turn = root_turn(srv)
    assert [b["text"] for b in turn["messages"][0]["content"]] == question(
        "c1", "Run make", "execute", seconds="2"
    )
    end = srv.ends("c1", 1)[0]
    assert (end["reason"], end["output"]) == ("completed", "permission cancelled -")
    srv.host.end_turn("root", turn["turn_id"])
    told = root_turn(srv)["messages"][0]
    assert told["content"][0]["text"] == (
        'The permission request of background subagent c1 ("Run make") was cancelled: nobody'
        " answered within 2 seconds; do not answer it."
    )


def test_an_agent_killed_while_asking_ends_its_turn_and_the_parent_is_told(acp, tmp_path):
    srv = acp(permission="ask-parent")
    pid = tmp_path / "pid"
    srv.spawn("c1", steps({"pid": str(pid)}, {"permission": "Run make", "options": CLAUDE_LIKE}))
    first = root_turn(srv)
    os.kill(int(pid.read_text()), signal.SIGKILL)
    assert srv.ends("c1", 1)[0]["reason"] == "error"
    srv.host.end_turn("root", first["turn_id"])
    told = root_turn(srv)["messages"][0]["content"][0]["text"]
    assert told == (
        'The permission request of background subagent c1 ("Run make") was cancelled: its turn'
        " ended; do not answer it."
    )
    # the question is gone: a message is an ordinary one (the child's next turn)
    assert answer(srv, "c1", "allow")["text"] == "message queued as the next turn for subagent c1"


def test_the_childs_deadline_cancels_its_question(acp, tmp_path):
    srv = acp(permission="ask-parent")
    srv.spawn("c1", steps({"permission": "Run make", "options": CLAUDE_LIKE}))
    first = root_turn(srv)
    assert first["messages"][0]["source"]["form"] == "permission"  # asked, and waiting
    # a deadline set now, already passed: the running turn is interrupted (cause deadline)
    srv.host.call("agents/budget", {"agent_id": "c1", "budget": {"max_seconds": 0}})
    end = srv.ends("c1", 1)[0]
    assert (end["reason"], end["cause"]) == ("aborted", "deadline")
    assert end["output"] == "permission cancelled -"
    assert permissions(srv, "c1")[-1]["why"] == "interrupted"
    srv.host.end_turn("root", first["turn_id"])
    told = root_turn(srv)["messages"][0]["content"][0]["text"]
    assert told.endswith("was cancelled: its turn was interrupted; do not answer it.")


def test_an_mcp_clients_root_gets_the_question_from_wait_agents_and_answers_it(tmp_path):
    """`subagentd --caller root --runner-protocol acp --acp-permission ask-parent` as a real
    process, driven by the official MCP SDK client (the root's model)."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "subagentd", "--db", str(tmp_path / "q.db"), "--caller", "root"),
            *("--runner-protocol", "acp", "--runner", " ".join(AGENT)),
            *("--acp-permission", "ask-parent", "--acp-permission-timeout", "300"),
        ],
        env={**os.environ, "ACP_AGENT_STATE": str(tmp_path / "agent-state")},
    )
    target = tmp_path / "notes.txt"
    wait = {"agent_ids": ["c1"], "mode": "all", "timeout_ms": min(int(PATIENCE * 1000), 50_000)}
    seen: dict[str, Any] = {}

    async def run() -> None:
        with anyio.fail_after(PATIENCE):
            async with Client(params) as client:
                spawn = {"label": "t", "prompt": ask_to_write(target), "child_id": "c1"}
                await client.call_tool("spawn_agent", spawn)
                seen["asked"] = await client.call_tool("wait_agents", wait)
                message = {"subagent_id": "c1", "message": "allow_always"}
                seen["answer"] = await client.call_tool("send_message", message)
                seen["settled"] = await client.call_tool("wait_agents", wait)

    anyio.run(run)
    (asked,) = seen["asked"].content  # one block: nothing lost to a client that shows the first
    texts = asked.text.split("\n")
    assert texts == [*question("c1", "Write notes.txt", "edit", seconds="300"), "still working: c1"]
    assert seen["asked"].structured_content["agents"][0]["questions"] == ["\n".join(texts[:3])]
    assert seen["answer"].content[0].text == (
        'answered the permission request of subagent c1 with "allow_always"; its turn goes on'
    )
    settled = "\n".join(block.text for block in seen["settled"].content)
    assert "Its closing message:\nwrote notes.txt" in settled
    assert target.read_text() == "done"


OPTIONS = [Option(*o) for o in CLAUDE_LIKE]


@pytest.mark.parametrize(
    ("message", "chosen"),
    [
        ("allow", "allow"),
        ("ALLOW_ALWAYS", "allow_always"),
        ("allow-always", "allow_always"),
        ("Always Allow", "allow_always"),  # the name
        ('"Reject."', "reject"),
        ("**allow**!", "allow"),
        ("reject_once", "reject"),  # the kind
        ("don't allow", None),
        ("allow, please", None),
        ("yes", None),
        ("", None),
    ],
)
def test_an_answer_is_the_whole_message_matched_to_an_id_a_name_or_a_kind(message, chosen):
    found = match(OPTIONS, message)
    assert (found.option_id if found else None) == chosen


def test_a_name_two_options_share_names_neither():
    twins = [Option("a", "Go", "allow_once"), Option("b", "Go", "allow_always")]
    assert match(twins, "go") is None
    assert match(twins, "b") == twins[1]


def test_a_shutdown_with_a_question_pending_cancels_it_and_does_not_hang(tmp_path, monkeypatch):
    from subagentd.storage.database import SqliteStore
    from subagentd.storage.reader import StoreReader
    from subagentd.view.inspect import transcript

    db = str(tmp_path / "run.db")
    monkeypatch.setenv("ACP_AGENT_STATE", "")  # AcpServer sets it; restored after the test
    srv = AcpServer(tmp_path / "agent-state", permission="ask-parent", store=SqliteStore(db))
    log = tmp_path / "log"
    srv.spawn("c1", steps({"permission": "Run make", "options": CLAUDE_LIKE, "log": str(log)}))
    root_turn(srv)
    srv.stop()  # (once: not through the fixture) EOF: the turns end, the question is answered cancelled, the agents stop
    assert log.read_text() == "cancelled -\n"  # the agent was answered before it was stopped
    events = transcript(StoreReader(db), "c1")
    asked = [e["data"] for e in events if e["type"] == "acp_permission"]
    assert [a["outcome"] for a in asked] == ["asked"]  # what came after the turn ended is not kept
    assert [e["data"]["reason"] for e in events if e["type"] == "turn_end"] == ["aborted"]


def elicit(schema: dict[str, Any] | None = None, **extra: Any) -> str:
    return steps({"elicit": "Which file should I edit?", "schema": schema or FILE_FORM, **extra})


FILE_FORM = {"type": "object", "properties": {"file": {"type": "string"}}, "required": ["file"]}


def elicitations(srv: AcpServer, agent_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in srv.events(agent_id) if e["type"] == "acp_elicitation"]


def test_an_agents_form_elicitation_is_a_question_its_parent_answers_with_send_message(acp):
    srv = acp()  # any permission policy: an elicitation always goes to the parent
    srv.spawn("c1", elicit())
    turn = root_turn(srv)
    (message,) = turn["messages"]
    texts = [b["text"] for b in message["content"]]
    assert texts[0].startswith("Background subagent c1 ")
    assert texts[0].endswith(
        "asks you a question and waits for your answer; its turn goes on once you answer:"
    )
    assert texts[1] == "Which file should I edit?"
    assert message["source"]["kind"] == "subagent-question"
    assert srv.host.call("agents/get", {"agent_id": "c1"})["status"] == "waiting"
    result = answer(srv, "c1", " b.py ")
    assert result["text"] == "answer delivered to subagent c1; it continues its turn"
    srv.host.end_turn("root", turn["turn_id"])
    end = srv.ends("c1", 1)[0]
    assert (end["reason"], end["output"]) == ("completed", 'elicited accept {"file": "b.py"}')
    assert elicitations(srv, "c1") == [
        {"message": "Which file should I edit?", "outcome": "asked", "parent": "root"},
        {
            "message": "Which file should I edit?",
            "outcome": "accept",
            "parent": "root",
            "why": "answered",
        },
    ]
    shown = [summarize(e["type"], e["data"]) for e in srv.events("c1")]  # inspect, watch
    assert 'form question "Which file should I edit?": asked root' in shown
    assert 'form question "Which file should I edit?": accept root (answered)' in shown


@pytest.mark.parametrize(
    ("spec", "reply", "said"),
    [
        ({"type": "string", "enum": ["a.py", "b.py"]}, "B.PY", 'elicited accept {"pick": "b.py"}'),
        ({"type": "string", "enum": ["a.py", "b.py"]}, "c.py", "elicited decline null"),
        ({"type": "integer"}, "42", 'elicited accept {"pick": 42}'),
        ({"type": "number"}, "many", "elicited decline null"),
        ({"type": "boolean"}, "Yes", 'elicited accept {"pick": true}'),
    ],
)
def test_a_one_field_forms_answer_becomes_its_value_or_a_decline(acp, spec, reply, said):
    srv = acp()
    srv.spawn("c1", elicit({"type": "object", "properties": {"pick": spec}}))
    turn = root_turn(srv)
    if "enum" in spec:
        assert 'It offers these answers: "a.py", "b.py".' in [
            b["text"] for b in turn["messages"][0]["content"]
        ]
    answer(srv, "c1", reply)
    srv.host.end_turn("root", turn["turn_id"])
    assert srv.ends("c1", 1)[0]["output"] == said


def test_url_and_several_field_elicitations_are_declined_without_asking(acp):
    srv = acp()
    two = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    srv.spawn("c1", elicit(url="https://example.com/login"))
    assert srv.ends("c1", 1)[0]["output"] == "elicited decline null"
    srv.spawn("c2", elicit(two))
    assert srv.ends("c2", 1)[0]["output"] == "elicited decline null"
    assert elicitations(srv, "c1") == elicitations(srv, "c2") == []


def test_an_interrupt_cancels_an_elicitation_and_the_agent_is_told_cancel(acp):
    srv = acp()
    srv.spawn("c1", elicit())
    first = root_turn(srv)
    assert first["messages"][0]["source"]["kind"] == "subagent-question"
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "aborted"
    assert elicitations(srv, "c1")[-1] == {
        "message": "Which file should I edit?",
        "outcome": "cancel",
        "parent": "root",
        "why": "interrupted",
    }
