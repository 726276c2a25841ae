"""The host API's details on core/ (PROTOCOL.md sections 4, 6 and 8): every field of its
results, every refusal's exact text, code and order, the durable rows and transcript events it
writes. Fast and in-process; written for the mutants of core/host_api.py that
rules/test_host_api.py left alive (docs/mutation.md)."""

from __future__ import annotations

import json
import re

from subagentd.errors import (
    ActivationClosingError,
    AdmissionDrainingError,
    AgentUnknownError,
    InvalidParamsError,
    StateInvalidError,
)
from subagentd.schema.budgets import BudgetInfo, Spent
from subagentd.schema.host_methods import (
    AgentInfo,
    Event,
    ListParams,
    OpenParams,
    OpenResult,
    SpawnParams,
    SpawnResult,
    StoredEvent,
    TurnEndParams,
)
from subagentd.schema.listing import ChildRow
from tests.core_host import CoreHost, FakeClock, events_of, process, refused, step


def inbox_rows(core: CoreHost, agent_id: str) -> list[tuple]:
    return core.store.conn.execute(
        "SELECT message_id, content, source, state, turn_id FROM inbox"
        " WHERE session_id = ? ORDER BY position",
        (agent_id,),
    ).fetchall()


# --- turns/begin: the durable rows of the host's messages ------------------------------------


def test_a_host_turn_stores_each_message_with_its_content_and_source_as_claimed():
    core = CoreHost()
    core.open("root")
    turn_id = core.svc.host.begin_turn("root", ["first", "second"]).turn_id
    [start] = core.take("turn/start", "root")
    rows = inbox_rows(core, "root")
    assert [(r[0], json.loads(r[1]), json.loads(r[2]), r[3], r[4]) for r in rows] == [
        (
            m["message_id"],
            [{"type": "text", "text": text}],
            {"kind": "user", "form": "direct"},
            "claimed",
            turn_id,
        )
        for m, text in zip(start["messages"], ["first", "second"], strict=True)
    ]


# --- transcript/append and transcript/read ----------------------------------------------------


def test_event_data_nested_too_deeply_is_refused_and_nothing_is_stored():
    core = CoreHost()
    core.open("root")
    before = events_of(core, "root")
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    message = refused(
        core,
        InvalidParamsError,
        core.svc.records.append_transcript,
        "root",
        None,
        [Event(type="fine"), Event(type="deep", data=nested)],
    )
    assert message == "event data is nested too deeply to store"
    assert events_of(core, "root") == before


# --- agents/list ---------------------------------------------------------------------------------


def test_an_invalid_cursor_is_named_by_its_first_64_characters_escaped():
    core = CoreHost()
    core.open("root")
    cursor = "a\n" + "b" * 100
    message = refused(
        core,
        InvalidParamsError,
        core.svc.records.list_host,
        ListParams(root_id="root", cursor=cursor),
    )
    assert message == 'invalid cursor "a\\n' + "b" * 62 + '"'


def test_agents_list_with_descendants_gives_parent_and_depth_and_mode():
    core = CoreHost.with_tree()
    core.spawn("c1", "once", mode="one-shot", label="quick")
    rows = core.svc.records.list_host(ListParams(root_id="root", scope="descendants")).agents
    assert rows == [
        ChildRow(
            id="c1", label="task", status="running", mode="continuable", parent="root", depth=1
        ),
        ChildRow(id="g1", label="task", status="running", mode="continuable", parent="c1", depth=2),
        ChildRow(id="once", label="quick", status="running", mode="one-shot", parent="c1", depth=2),
        ChildRow(
            id="c2", label="task", status="running", mode="continuable", parent="root", depth=1
        ),
    ]
    children = core.svc.records.list_host(ListParams(root_id="root")).agents
    assert [(r.id, r.parent, r.depth) for r in children] == [("c1", None, None), ("c2", None, None)]


# --- messages/cancel with two processes on one database --------------------------------------


def test_a_message_of_an_agent_live_in_another_process_cannot_be_cancelled(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    message_id = step(first, first.send, "root", "c1", "waiting").message_id
    error = second.refusal(step, second, second.svc.host.cancel_message, message_id)
    assert type(error) is StateInvalidError
    assert error.message == 'agent "c1" is live in another subagentd process'
    assert step(first, first.svc.records.get_message, message_id).state == "queued"
    assert step(first, first.svc.host.cancel_message, message_id).state == "cancelled"


# --- agents/followup with two processes on one database -------------------------------------


def test_a_followup_to_an_agent_live_in_another_process_is_run_there(tmp_path):
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    for agent_id in ("root", "c1"):
        step(second, second.svc.host.followup, agent_id, f"for {agent_id}")
    assert second.store.inbox_counts("c1") == (1, 0)
    assert first.take("turn/start", "root") == []  # nothing reached p1 before it takes them
    step(first, first.svc.scheduler.take_signals)
    assert first.texts_of_turns("root")[-1] == ["for root"]  # root was idle: its turn starts
    assert first.svc.agents.registry.get("c1").pending == 1  # c1 runs its first turn still
    step(first, first.svc.scheduler.take_signals)  # taken once: nothing runs twice
    assert first.take("turn/start", "root") == []


# --- agents/get: every field ---------------------------------------------------------------------


def test_agents_get_fills_every_field_from_the_session_and_its_inbox():
    core = CoreHost()
    core.open("root", label="top")
    core.spawn("root", "c1", label="worker")
    core.send("root", "c1", "next")
    stored = {a: core.store.get_session(a) for a in ("root", "c1")}
    assert core.svc.records.get("root") == AgentInfo(
        agent_id="root",
        parent_id=None,
        kind="ordinary",
        mode=None,
        label="top",
        status="idle",
        depth=0,
        created_at=stored["root"].created_at,
        queued=0,
        parked=0,
        usage=Spent(turns=0, spawns=1, input_tokens=0, output_tokens=0, cost=0.0),
        tree_usage=Spent(turns=1, spawns=1, input_tokens=0, output_tokens=0, cost=0.0),
        budget=BudgetInfo(max_turns=10_000, max_spawns=1_000),  # the serve defaults
    )
    assert core.svc.records.get("c1") == AgentInfo(
        agent_id="c1",
        parent_id="root",
        kind="continuable",
        mode="continuable",
        label="worker",
        status="running",
        depth=1,
        created_at=stored["c1"].created_at,
        queued=1,
        parked=0,
        usage=Spent(turns=1, spawns=0, input_tokens=0, output_tokens=0, cost=0.0),
        tree_usage=Spent(turns=1, spawns=0, input_tokens=0, output_tokens=0, cost=0.0),
    )


# --- transcript/read: every field of a stored event -----------------------------------------------


def test_a_read_event_carries_its_time_and_a_stored_null_stays_absent():
    core = CoreHost()
    core.open("root")
    seq = core.svc.records.append_transcript("root", "t1", [Event(type="note", data={"k": 1})])
    core.store.append_events("root", None, [("bare", None)], "2026-01-01T00:00:00.000000Z")
    [note, bare] = core.svc.records.read_transcript("root", seq - 1, None).events
    stored = core.store.read_events("root", seq - 1, 1, 1024)[0][0]
    assert note == StoredEvent(seq=seq, type="note", data={"k": 1}, at=stored.at, turn_id="t1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", note.at)
    assert bare == StoredEvent(
        seq=seq + 1, type="bare", data=None, at="2026-01-01T00:00:00.000000Z", turn_id=None
    )


# --- agents/open -----------------------------------------------------------------------------


def test_open_without_an_id_mints_one_and_returns_the_activation():
    core = CoreHost()
    result = core.svc.host.open(OpenParams())
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", result.agent_id
    )
    assert result.activation_id == core.svc.agents.registry.get(result.agent_id).activation_id
    named = core.svc.host.open(OpenParams(agent_id="root"))
    assert named == OpenResult(
        agent_id="root", activation_id=core.svc.agents.registry.get("root").activation_id
    )
    assert named.activation_id != result.activation_id


def test_open_creates_an_ordinary_session_below_its_parent_with_its_label():
    core = CoreHost()
    core.open("root", label="top")
    core.spawn("root", "c1")
    core.open("fork", label="forked", parent_id="c1")
    record = core.store.get_session("fork")
    assert (record.id, record.parent_id, record.kind, record.label, record.depth) == (
        "fork",
        "c1",
        "ordinary",
        "forked",
        2,
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record.created_at)
    assert core.store.get_session("root").depth == 0
    # the fork is live below c1: it keeps c1 resident, and spawns below its own depth
    assert core.svc.host.spawn(SpawnParams(caller="fork", child_id="f1", label="l", prompt="p"))
    assert core.store.get_session("f1").depth == 3
    assert core.svc.agents.registry.get("fork").depth == 2
    core.end("c1")
    assert core.status("c1") == "idle"
    message = refused(
        core, AgentUnknownError, core.svc.host.open, OpenParams(agent_id="x", parent_id="nobody")
    )
    assert message == 'agent "nobody" does not exist'


def test_reopening_keeps_the_stored_parent_label_and_parking():
    core = CoreHost()
    core.open("root", label="top")
    core.open("fork", label="kept", parent_id="root")
    core.svc.host.begin_turn("fork", None)
    core.svc.host.followup("fork", "queued while running")
    core.svc.host.host_interrupt("fork")
    core.end("fork", "aborted")
    assert core.svc.records.get("fork").parked == 1
    core.svc.host.close_root("fork", lambda: None)
    core.notes.clear()
    core.svc.host.open(OpenParams(agent_id="fork", label="ignored"))
    info = core.svc.records.get("fork")
    assert (info.parent_id, info.label, info.depth, info.status, info.parked) == (
        "root",
        "kept",
        1,
        "idle",
        1,
    )
    assert core.take("turn/start") == []  # still parked: no waking input yet
    core.svc.host.followup("fork", "wake")
    assert core.texts_of_turns("fork") == [["queued while running"]]


def test_open_refusals_name_the_agent():
    core = CoreHost.with_tree()
    message = refused(core, StateInvalidError, core.svc.host.open, OpenParams(agent_id="root"))
    assert message == 'agent "root" is already live'
    core.end("c2")
    message = refused(core, StateInvalidError, core.svc.host.open, OpenParams(agent_id="c2"))
    assert message == 'agent "c2" is a subagent session; its parent resumes it with send_message'
    message = refused(core, InvalidParamsError, core.svc.host.open, OpenParams(agent_id="@x"))
    assert message.startswith("invalid params: agent_id: it starts with @, which is reserved; ")
    core.svc.settlement.shutdown(lambda: None)
    message = refused(core, AdmissionDrainingError, core.svc.host.open, OpenParams(agent_id="new"))
    assert message == "continuable subagents are draining; the operation was not admitted"
    assert core.store.get_session("new") is None


def test_open_checks_its_label_and_the_live_quotas_of_its_parent():
    core = CoreHost(max_label_bytes=4, max_children=1)
    core.open("root")
    error = core.refusal(core.svc.host.open, OpenParams(agent_id="a", label="12345"))
    assert (error.message, error.data["quota"]) == (
        "the label is 5 bytes, over the limit of 4 bytes; it was not accepted, make it shorter",
        "max-label-bytes",
    )
    core.open("fork", parent_id="root", label="1234")
    error = core.refusal(core.svc.host.open, OpenParams(agent_id="second", parent_id="root"))
    assert error.message == (
        'agent "root" already has 1 live subagents (the limit per parent);'
        " wait until some of them finish"
    )
    assert core.store.get_session("second") is None
    core.open("other")
    core.svc.host.close_root("other", lambda: None)
    core.store.conn.execute("UPDATE sessions SET parent_id = 'root' WHERE id = 'other'")
    error = core.refusal(core.svc.host.open, OpenParams(agent_id="other"))  # stored parent counts
    assert error.data["quota"] == "max-children"


def test_a_held_root_takes_no_turn_for_its_input():
    core = CoreHost()
    core.svc.host.open(OpenParams(agent_id="root"), hold=True)
    core.spawn("root", "c1")
    core.end("c1")  # settles: its notice waits in root's inbox
    assert core.take("turn/start", "root") == []
    assert core.svc.records.get("root").queued == 1
    core.svc.host.close_root("root", lambda: None)
    core.open("root")  # not held: it runs now
    assert core.texts_of_turns("root") == [
        [
            "Background subagent c1 finished and will do no further work unless you send it more.",
            "It left no closing message.",
        ]
    ]


# --- turns/end ---------------------------------------------------------------------------------


def test_ending_a_turn_needs_its_open_turn_and_a_bounded_output():
    core = CoreHost(max_text_bytes=8)
    core.open("root")
    core.spawn("root", "c1", prompt="p")
    turn = core.turn("c1")
    message = refused(
        core,
        StateInvalidError,
        core.svc.host.finish_turn,
        TurnEndParams(agent_id="c1", turn_id="other", reason="completed"),
    )
    assert message == 'turn "other" is not the open turn of agent "c1"'
    error = core.refusal(
        core.svc.host.finish_turn,
        TurnEndParams(agent_id="c1", turn_id=turn, reason="completed", output="123456789"),
    )
    assert error.message == (
        "the output is 9 bytes, over the limit of 8 bytes; it was not accepted, make it shorter"
    )
    assert core.turn("c1") == turn  # refused: the turn stays open
    core.svc.host.finish_turn(
        TurnEndParams(agent_id="c1", turn_id=turn, reason="refusal", output="12345678")
    )
    [end] = [e for e in events_of(core, "c1") if e.type == "turn_end"]
    assert end.data == {"turn_id": turn, "reason": "refusal", "output": "12345678"}
    message = refused(
        core,
        StateInvalidError,
        core.svc.host.finish_turn,
        TurnEndParams(agent_id="root", turn_id=turn, reason="completed"),
    )
    assert message == f'turn "{turn}" is not the open turn of agent "root"'


# --- agents/spawn ----------------------------------------------------------------------------


def test_spawn_returns_every_field_and_writes_the_child_as_stored():
    core = CoreHost()
    core.open("root")
    result = core.svc.host.spawn(
        SpawnParams(caller="root", child_id="c\u00a01", label="worker", prompt="do it")
    )
    child = core.svc.agents.registry.get("c\u00a01")
    [start] = core.take("turn/start", "c\u00a01")
    [message] = start["messages"]
    assert result == SpawnResult(
        child_id="c\u00a01",
        activation_id=child.activation_id,
        message_id=message["message_id"],
        text="started subagent c\\xa01",  # a model-visible line: escaped
    )
    assert message["content"] == [{"type": "text", "text": "do it"}]
    assert message["source"] == {
        "kind": "coordinator",
        "form": "spawn",
        "sender_session_id": "root",
    }
    record = core.store.get_session("c\u00a01")
    assert (record.parent_id, record.kind, record.label, record.depth, record.parked) == (
        "root",
        "subagent",
        "worker",
        1,
        False,
    )
    row = core.store.conn.execute("SELECT mode FROM sessions WHERE id = 'c\u00a01'").fetchone()
    assert row == ("continuable",)  # recorded at spawn: listings need not read the descriptor
    minted = core.svc.host.spawn(SpawnParams(caller="root", label="l", prompt="p", mode="one-shot"))
    assert minted.text == f"started subagent {minted.child_id}"
    assert core.store.get_session(minted.child_id).depth == 1
    row = core.store.conn.execute(
        "SELECT mode FROM sessions WHERE id = ?", (minted.child_id,)
    ).fetchone()
    assert row == ("one-shot",)


def test_spawn_bounds_its_prompt():
    core = CoreHost(max_text_bytes=8)
    core.open("root")
    error = core.refusal(core.spawn, "root", "c1", prompt="123456789")
    assert (error.message, error.data["quota"]) == (
        "the prompt is 9 bytes, over the limit of 8 bytes; it was not accepted, make it shorter",
        "max-text-bytes",
    )
    assert core.store.get_session("c1") is None
    core.spawn("root", "c1", prompt="12345678")


def test_a_caller_being_disposed_below_an_open_root_cannot_spawn():
    """Closing an ordinary fork drains its own subtree, while admissions above it stay open."""
    core = CoreHost()
    core.open("root")
    core.open("fork", parent_id="root")
    core.svc.host.begin_turn("fork", None)
    core.svc.host.close_root("fork", lambda: None)  # waits for the fork's turn to end
    error = core.refusal(core.spawn, "fork", "f1")
    assert type(error) is ActivationClosingError
    assert error.message == 'agent "fork" activation is being disposed'
    assert core.store.get_session("f1") is None
    core.spawn("root", "c1")  # the tree above is not draining
