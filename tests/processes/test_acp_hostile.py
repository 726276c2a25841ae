"""Hostile ACP agents (tests/scripts/acp_hostile_agent.py: raw JSON-RPC lines, no SDK): one silent
at `initialize`, one silent at `session/prompt` that ignores `session/cancel`, one flooding
updates, noise, huge chunks, huge titles, an over-long line, updates after its turn ended. Each
costs at most its own `--max-running` slot, for at most `--interrupt-grace`, and bounded memory:
the other slot keeps working, and the hostile turn ends. In-process server, real agent
processes over real pipes (the runner's frame bound is 1 MiB here)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from subagentd.runners.acp_progress import TOOL_TEXT
from tests.processes.test_acp_runner import PATIENCE, AcpServer

HOSTILE = [sys.executable, str(Path(__file__).parents[1] / "scripts" / "acp_hostile_agent.py")]
GRACE = 1.0
FRAME = 1 << 20  # AcpServer's --max-frame-bytes


class HostileServer(AcpServer):
    """Reads whole transcripts (a flood passes one page)."""

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = None
        while True:
            page = self.host.call("transcript/read", {"agent_id": agent_id, "after": after})
            events += page["events"]
            if page.get("next") is None:
                return events
            after = page["next"]


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.processes.test_acp_runner.AGENT", HOSTILE)
    made: list[AcpServer] = []

    def make(**kwargs: Any) -> AcpServer:
        kwargs.setdefault("interrupt_grace", GRACE)
        made.append(HostileServer(tmp_path / "agent-state", **kwargs))
        return made[-1]

    yield make
    for srv in made:
        srv.stop()
    os.environ.pop("ACP_AGENT_STATE", None)


def until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + PATIENCE
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return found


def pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "agent-state" / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def gone(pid: int) -> bool:
    """The process exited and was reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def prompted_silent(tmp_path: Path) -> bool:
    return (tmp_path / "agent-state" / "silent").exists()


def spawn(srv: HostileServer, child: str, prompt: Any) -> None:
    srv.spawn(child, prompt if isinstance(prompt, str) else json.dumps(prompt))


def by_type(srv: HostileServer, child: str, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in srv.events(child) if e["type"] == kind]


SILENT = {"silent": True}
CASES = {  # hostile prompt -> how its turn ends (None: only when interrupted)
    "silent at initialize": ("hello", None),
    "silent at prompt, cancel ignored": (SILENT, None),
    "flooding updates": ({"flood": 20_000}, "completed"),
    "flooding noise": ({"noise": 100_000}, "completed"),
    "huge chunks": ({"chunks": 40, "size": 512 * 1024}, "completed"),
    "a huge title": ({"title": FRAME - 4096}, "completed"),
    "a line over the frame bound": ({"line": 2 * FRAME}, "error"),
    "updates of no turn": ({"stale": 20_000}, "completed"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_agent_costs_at_most_its_own_slot_and_its_turn_ends(hostile, tmp_path, case):
    prompt, ends = CASES[case]
    if case == "silent at initialize":
        (tmp_path / "agent-state").mkdir()
        (tmp_path / "agent-state" / "silent-initialize").touch()
    srv = hostile(max_running=2)
    spawn(srv, "bad", prompt)
    until(lambda: pids(tmp_path), "the hostile agent never started")
    hostile_pid = pids(tmp_path)[0]
    # the other slot keeps working meanwhile, turn after turn
    for child in ("ok1", "ok2"):
        spawn(srv, child, "hi")
        end = srv.ends(child, 1)[0]
        assert (end["reason"], end["output"]) == ("completed", "done: hi")
    if ends is None:  # it never ends by itself: the interrupt and the grace end it
        if prompt == SILENT:
            until(lambda: prompted_silent(tmp_path), "the agent was never prompted")
        srv.host.call("agents/interrupt", {"agent_id": "bad"})
        ends = "aborted"
    assert srv.ends("bad", 1)[0]["reason"] == ends
    # each event it made is bounded (--max-text-bytes, 256 KiB, and a little for the keys)
    assert max(len(json.dumps(e["data"])) for e in srv.events("bad")) <= 256 * 1024 + 1024
    # its slot is free again: both slots run turns
    assert srv.running is not None
    runner = srv.running.runner
    until(lambda: not runner.running, "the hostile turn kept its slot")
    for child in ("ok3", "ok4"):
        spawn(srv, child, "again")
    assert srv.ends("ok3", 1)[0]["output"] == "done: again"
    assert srv.ends("ok4", 1)[0]["output"] == "done: again"
    if case.startswith("silent") or case.startswith("a line"):
        until(lambda: gone(hostile_pid), "the hostile agent process was never stopped")


def test_an_agent_silent_at_initialize_does_not_hold_up_the_other_processes(hostile, tmp_path):
    (tmp_path / "agent-state").mkdir()
    (tmp_path / "agent-state" / "silent-initialize").touch()
    srv = hostile(max_running=4)
    spawn(srv, "bad", "hello")
    until(lambda: pids(tmp_path), "the agent never started")
    for child in ("c1", "c2", "c3"):
        spawn(srv, child, child)
    for child in ("c1", "c2", "c3"):
        assert srv.ends(child, 1)[0]["output"] == f"done: {child}"
    assert len(pids(tmp_path)) == 4  # each turn its own process: 4 of --max-running 4
    srv.host.call("agents/interrupt", {"agent_id": "bad"})
    end = srv.ends("bad", 1)[0]
    assert end["reason"] == "aborted"
    until(lambda: gone(pids(tmp_path)[0]), "the silent agent process was never stopped")


def test_a_prompt_never_answered_frees_its_slot_at_the_grace(hostile, tmp_path):
    srv = hostile(max_running=1, interrupt_grace=GRACE)
    spawn(srv, "bad", SILENT)
    until(lambda: prompted_silent(tmp_path), "the agent was never prompted")
    spawn(srv, "next", "waiting for the slot")
    srv.host.call("agents/interrupt", {"agent_id": "bad"})
    assert srv.ends("bad", 1)[0]["reason"] == "aborted"
    assert srv.ends("next", 1)[0]["output"] == "done: waiting for the slot"
    first = pids(tmp_path)[0]
    until(lambda: gone(first), "the agent process was never stopped")
    assert len(pids(tmp_path)) == 2  # the next turn ran on a new process


def test_joined_chunks_stop_at_max_text_bytes_and_say_they_were_cut(hostile):
    srv = hostile(max_text_bytes=100_000)
    spawn(srv, "c1", {"chunks": 40, "size": 512 * 1024})  # 20 MiB in chunks of 512 KiB
    end = srv.ends("c1", 1)[0]
    assert end["reason"] == "completed"
    assert end["output"] == "x" * 100_000
    assert by_type(srv, "c1", "acp_message") == [{"text": "x" * 100_000, "cut": True}]


def test_a_chunk_cut_mid_character_keeps_whole_characters(hostile):
    srv = hostile(max_text_bytes=63)
    spawn(srv, "c1", {"chunks": 1, "size": 40, "char": "é"})  # 80 bytes, two a character
    assert srv.ends("c1", 1)[0]["output"] == "é" * 31
    assert by_type(srv, "c1", "acp_message") == [{"text": "é" * 31, "cut": True}]


def test_a_huge_tool_call_title_is_cut(hostile):
    srv = hostile()
    spawn(srv, "c1", {"title": FRAME - 4096})
    assert srv.ends("c1", 1)[0]["reason"] == "completed"
    (call,) = by_type(srv, "c1", "acp_tool_call")
    assert call == {"toolCallId": "t", "title": "T" * TOOL_TEXT}


def test_a_line_over_the_frame_bound_stops_the_agent_and_ends_its_turn_error(hostile):
    srv = hostile()
    spawn(srv, "c1", {"line": 2 * FRAME})
    assert srv.ends("c1", 1)[0]["reason"] == "error"
    (acp_end,) = by_type(srv, "c1", "acp_end")
    assert acp_end["error"] == f"the ACP agent sent a line over {FRAME} bytes; stopped"


def test_updates_after_the_turn_ended_are_dropped_and_logged_once_a_decade(hostile, caplog):
    caplog.set_level(logging.WARNING, logger="subagentd")
    srv = hostile(max_running=1)
    spawn(srv, "c1", "first")
    assert srv.ends("c1", 1)[0]["output"] == "done: first"
    assert srv.running is not None
    (process,) = srv.running.runner.executor.pool
    until(lambda: not process.sinks, "the ended turn's updates are still held")
    spawn(srv, "c2", {"stale": 20_000})  # on the same process: updates of c1's session first
    assert srv.ends("c2", 1)[0]["output"] == "after the stale updates"
    assert process.stray.count == 20_000
    assert [e for e in srv.events("c1") if e["data"].get("title") == "late"] == []
    said = [r.getMessage() for r in caplog.records if "no turn running" in r.getMessage()]
    assert said == [
        f"an ACP agent sent {n} session/update(s) of a session with no turn running; ignored"
        for n in (1, 10, 100, 1000, 10_000)
    ]


def test_lines_that_are_not_json_are_logged_once_a_decade(hostile, caplog):
    caplog.set_level(logging.WARNING, logger="subagentd")
    srv = hostile()
    spawn(srv, "c1", {"noise": 100_000})
    assert srv.ends("c1", 1)[0]["output"] == "after the noise"
    said = [r.getMessage() for r in caplog.records if "not JSON" in r.getMessage()]
    assert said == [
        f"an ACP agent wrote {n} line(s) that are not JSON; ignored"
        for n in (1, 10, 100, 1000, 10_000, 100_000)
    ]


def test_a_flood_of_updates_is_written_whole_while_the_reader_waits_for_room(hostile):
    srv = hostile()
    spawn(srv, "c1", {"flood": 5_000})
    assert srv.ends("c1", 1)[0]["reason"] == "completed"
    calls = by_type(srv, "c1", "acp_tool_call")
    assert [c["toolCallId"] for c in calls] == [f"t{n}" for n in range(5_000)]


def test_thirty_permission_requests_ask_one_bounded_question_at_a_time(hostile, tmp_path):
    """`--acp-permission ask-parent`: 30 requests at once in one turn, each offering an option
    whose name is about a frame long. The parent is asked one question at a time, within
    `--max-queued`, each showing a bounded option name; at most WAITING (16) requests are held,
    the others answered by the deny rule at once; an interrupt cancels the held ones unasked
    and tells the parent of the asked one only."""
    from tests.processes.test_acp_questions import answer, root_turn

    srv = hostile(permission="ask-parent", max_queued=10)
    spawn(srv, "c1", {"permissions": 30, "name": FRAME - 8192})
    answers = tmp_path / "agent-state" / "answers"

    def answered() -> list[dict[str, Any]]:
        lines = answers.read_text().splitlines() if answers.exists() else []
        return [json.loads(line) for line in lines]

    first = root_turn(srv)
    (message,) = first["messages"]
    texts = [b["text"] for b in message["content"]]
    assert texts[0] == (
        "Background subagent c1 asks your permission for a tool call and waits for your"
        ' answer: "step 0" (kind: edit).'
    )
    assert texts[1] == f"Its options: allow ({'A' * 99}…), reject (Reject)."
    # 14 past the 16 held were answered by the deny rule at once, without asking
    until(lambda: len(answered()) == 14, "the requests past the 16 held were not answered")
    assert {a["outcome"]["optionId"] for a in answered()} == {"reject"}
    assert answer(srv, "c1", "allow")["text"] == (
        'answered the permission request of subagent c1 with "allow"; its turn goes on'
    )
    until(lambda: len(answered()) == 15, "the answer did not reach the agent")
    selected = {"outcome": "selected", "optionId": "allow"}
    assert answered()[-1] == {"id": "perm-0", "outcome": selected}
    srv.host.call("agents/interrupt", {"agent_id": "c1"})
    assert srv.ends("c1", 1)[0]["reason"] == "aborted"
    until(lambda: len(answered()) == 30, "the held requests were not answered")
    assert [a["outcome"] for a in answered()[15:]] == [{"outcome": "cancelled"}] * 15
    # what the root was sent: the first question, the second, the second's cancellation
    srv.host.end_turn("root", first["turn_id"])
    told = []
    for _ in range(2):
        turn = root_turn(srv)
        told += [m["content"][0]["text"] for m in turn["messages"]]
        srv.host.end_turn("root", turn["turn_id"])
    assert told == [
        "Background subagent c1 asks your permission for a tool call and waits for your"
        ' answer: "step 1" (kind: edit).',
        'The permission request of background subagent c1 ("step 1") was cancelled: its turn'
        " was interrupted; do not answer it.",
    ]
    said = [
        e
        for e in srv.events("root")
        if e["type"] == "message" and e["data"]["source"].get("form") == "permission"
    ]
    assert len(said) == 3
    assert max(len(json.dumps(e["data"])) for e in said) < 2048  # no option name copied whole
