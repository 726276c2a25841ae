"""Remote children (`--a2a-agent NAME=URL`, spawn option `agent: {a2a: NAME}`): their turns run
as A2A messages to agents built on a2a-sdk's server classes (tests/processes/remote_agents.py),
served on loopback ports: one that answers, one that asks for input, one that fails, one that
rejects, one that asks for authentication, one that is slow and cancelled, one whose connection
drops mid-stream (docs/a2a.md, "A remote child")."""

from __future__ import annotations

import time
from typing import Any

import pytest

from subagentd.client import RpcError
from subagentd.runners.a2a_child import wire
from tests.processes.remote_agents import RemoteAgent
from tests.spawned import TIMEOUT, InProcessServer


class RemoteServer(InProcessServer):
    """An in-process server with remote children (no --runner: the host runs the root's turns);
    root `root` is opened."""

    def __init__(self, agents: dict[str, str], **settings: Any) -> None:
        def serve_with(connection: Any) -> Any:
            options = {"a2a_agent": tuple(agents.items()), "shutdown_grace": 5.0}
            return wire(connection, options, connection.serve)

        super().__init__(serve_with=serve_with, a2a_agents=tuple(agents), **settings)
        self.host.initialize(statusEvents=True)
        self.host.open("root")

    def spawn(self, child_id: str, prompt: str, name: str) -> dict[str, Any]:
        return self.host.call(
            "agents/spawn",
            {
                "caller": "root",
                "child_id": child_id,
                "label": "remote",
                "prompt": prompt,
                "agent": {"a2a": name},
            },
        )

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        return self.host.call("transcript/read", {"agent_id": agent_id})["events"]

    def ends(self, agent_id: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait until the agent ended `count` turns; their turn_end events' data."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            ends = [e["data"] for e in self.events(agent_id) if e["type"] == "turn_end"]
            if len(ends) >= count:
                return ends
            assert time.monotonic() < deadline, f"{agent_id} ended {len(ends)} turn(s)"
            self.host.notification("agent/status", agent_id=agent_id)

    def root_turn(self) -> dict[str, Any]:
        return self.host.notification("turn/start", timeout=TIMEOUT, agent_id="root")


@pytest.fixture
def remote():
    made: list[Any] = []

    def make(kind: str, **kwargs: Any) -> tuple[RemoteServer, RemoteAgent]:
        agent = RemoteAgent(kind, streaming=kwargs.pop("streaming", True)).__enter__()
        made.append(agent)
        srv = RemoteServer({"far": agent.url}, **kwargs)
        made.append(srv)
        return srv, agent

    yield make
    for thing in reversed(made):
        if isinstance(thing, RemoteAgent):
            thing.__exit__(None, None, None)
        else:
            thing.stop()


@pytest.mark.parametrize("streaming", [True, False])
def test_a_remote_child_answers_its_turn_and_its_follow_up_in_one_context(remote, streaming):
    srv, agent = remote("answers", streaming=streaming)
    srv.spawn("c1", "hello there", "far")
    [first] = srv.ends("c1")
    assert first["reason"] == "completed"
    assert first["output"] == "done\n\nanswer: hello there"
    assert first["usage"] == {"input_tokens": 7, "output_tokens": 3, "cost": 0.0}
    srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "and now?"})
    second = srv.ends("c1", 2)[1]
    assert second["output"] == "done\n\nanswer: and now?"
    events = srv.events("c1")
    tasks = [e["data"] for e in events if e["type"] == "a2a_task"]
    assert len(tasks) == 2 and tasks[0]["context_id"] == tasks[1]["context_id"]
    assert tasks[0]["agent"] == "far" and tasks[0]["task_id"] != tasks[1]["task_id"]
    turns = [e["data"]["turn_id"] for e in events if e["type"] == "turn_end"]
    assert agent.executor.message_ids == turns  # each turn's message id is the turn's id
    assert agent.executor.seen == ["hello there", "and now?"]
    if streaming:  # the status updates are in the transcript as they came
        states = [e["data"]["state"] for e in events if e["type"] == "a2a_status"][:2]
        assert states == ["submitted", "working"] or states[0] == "working"
    descriptor = next(e["data"] for e in events if e["type"] == "descriptor")
    assert descriptor["agent"] == {"a2a": "far"}


def test_an_unknown_name_is_refused_with_the_names_the_deployment_lists(remote):
    srv, _ = remote("answers")
    with pytest.raises(RpcError) as refused:
        srv.spawn("c1", "hello", "elsewhere")
    assert refused.value.code == -32602
    assert refused.value.message == (
        'agent.a2a "elsewhere" is not an A2A agent this deployment lists'
        " (--a2a-agent NAME=URL); it lists: far"
    )
    assert srv.host.call("list_agents", {"caller": "root"})["agents"] == []  # nothing spawned


def test_input_required_is_a_question_to_the_parent_whose_answer_continues_the_task(remote):
    srv, agent = remote("asks")
    srv.spawn("c1", "paint the shed", "far")
    turn = srv.root_turn()
    (message,) = turn["messages"]
    assert [b["text"] for b in message["content"]][:2] == [
        'Background subagent c1 ("remote") asks you a question and waits for your answer; its'
        " turn goes on once you answer:",
        "which colour?",
    ]
    assert srv.host.call("agents/get", {"agent_id": "c1"})["status"] == "waiting"
    sent = srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "red"})
    assert sent["text"] == "answer delivered to subagent c1; it continues its turn"
    srv.host.end_turn("root", turn["turn_id"])
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == ("completed", "painted it red")
    assert agent.executor.seen == ["paint the shed", "red"]
    tasks = {e["data"]["task_id"] for e in srv.events("c1") if e["type"] == "a2a_task"}
    assert len(tasks) == 1  # the answer continued the same remote task


@pytest.mark.parametrize(
    ("kind", "reason", "output"),
    [
        ("fails", "error", 'the A2A agent "far" failed the task: the disk is full'),
        ("rejects", "refusal", 'the A2A agent "far" rejected the task: not my kind of work'),
        (
            "needs-auth",
            "error",
            'the A2A agent "far" asks for authentication (auth-required), which subagentd does'
            " not give; its task was cancelled: sign in first",
        ),
    ],
)
def test_failed_rejected_and_auth_required_end_the_turn_with_their_texts(
    remote, kind, reason, output
):
    srv, agent = remote(kind)
    srv.spawn("c1", "do it", "far")
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == (reason, output)
    if kind == "needs-auth":  # not left open on the agent
        assert agent.executor.cancelled.wait(TIMEOUT)


def test_an_interrupt_cancels_the_slow_remote_task(remote):
    srv, agent = remote("slow")
    srv.spawn("c1", "take your time", "far")
    assert agent.executor.started.wait(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while not any(e["type"] == "a2a_task" for e in srv.events("c1")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    srv.host.call("interrupt_agent", {"caller": "root", "agent_id": "c1"})
    [end] = srv.ends("c1")
    assert end["reason"] == "aborted"
    assert agent.executor.cancelled.wait(TIMEOUT)  # CancelTask reached the agent
    ending = [e["data"] for e in srv.events("c1") if e["type"] == "a2a_end"]
    assert ending[0]["state"] == "canceled"


def test_a_stream_cut_mid_task_is_followed_to_its_end_without_sending_twice(remote):
    srv, agent = remote("drops")
    srv.spawn("c1", "hold on", "far")
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == ("completed", "survived: hold on")
    assert len(agent.executor.seen) == 1  # the message was not sent again


def test_a_connection_dropped_before_the_task_was_known_is_retried_with_the_same_message(remote):
    srv, agent = remote("drops-before")
    srv.spawn("c1", "hold on", "far")
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == ("completed", "survived: hold on")
    assert agent.executor.message_ids == [end["turn_id"]]  # the retry: the same message, once
    assert agent.app.streams == 1  # the dropped request never reached the agent


def test_an_agent_lost_for_good_mid_task_ends_the_turn_saying_its_outcome_is_unknown(remote):
    srv, agent = remote("drops-gone")
    srv.spawn("c1", "hold on", "far")
    [end] = srv.ends("c1")
    assert end["reason"] == "error"
    assert end["output"].startswith('the connection to the A2A agent "far" was lost (')
    assert end["output"].endswith(
        ") and could not be made again after 4 tries; whether it ran the turn is unknown"
    )
    assert len(agent.executor.seen) == 1


def test_an_agent_that_cannot_be_reached_ends_the_turn_saying_nothing_was_sent(remote):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the probe is closed
    srv = RemoteServer({"far": f"http://127.0.0.1:{port}/"})
    try:
        srv.spawn("c1", "anyone?", "far")
        [end] = srv.ends("c1")
        assert end["reason"] == "error"
        assert end["output"].startswith('the A2A agent "far" could not be reached (')
        assert end["output"].endswith("); the turn was not sent to it")
    finally:
        srv.stop()


def test_an_unanswered_question_cancels_the_remote_task_and_ends_the_turn_saying_so(remote):
    srv, agent = remote("asks", question_timeout=0.5)
    srv.spawn("c1", "paint the shed", "far")
    srv.root_turn()  # the question; nobody answers it
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == (
        "error",
        'the A2A agent "far" asked for input and no answer came (timeout); its task was cancelled',
    )
    assert agent.executor.cancelled.wait(TIMEOUT)


@pytest.mark.parametrize("streaming", [True, False])
def test_a_direct_message_answer_is_the_turns_closing_message(remote, streaming):
    srv, agent = remote("replies", streaming=streaming)
    srv.spawn("c1", "quick one", "far")
    [end] = srv.ends("c1")
    assert (end["reason"], end["output"]) == ("completed", "at once: quick one")
    srv.host.call("send_message", {"caller": "root", "subagent_id": "c1", "message": "another"})
    assert srv.ends("c1", 2)[1]["output"] == "at once: another"
    assert len(set(agent.executor.contexts)) == 1  # the second message kept the conversation
