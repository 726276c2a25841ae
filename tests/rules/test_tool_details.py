"""The tool rules' details on core/ (SEMANTICS.md sections 3-7, PROTOCOL.md section 5): argument
violations in schema order, escaped model-visible lines, corrupt parent links, the tools offered
to a caller. Fast and in-process; written for the mutants of core/tools.py, core/arguments.py,
core/listing.py and core/texts.py the other rule tests left alive (docs/mutation.md)."""

from __future__ import annotations

import pytest

from subagentd.core.arguments import check_arguments
from subagentd.core.identifiers import check_new_id
from subagentd.core.settings import TOOL_NAMES, served_tools
from subagentd.errors import InvalidParamsError
from subagentd.schema.base import ID_RULE
from subagentd.schema.codes import Code
from subagentd.schema.messages import ToolFilter
from subagentd.schema.records import SessionRecord
from subagentd.schema.tools import (
    InterruptAgentArgs,
    ListAgentsArgs,
    ReportArgs,
    SendMessageArgs,
    WaitAgentsArgs,
)
from tests.core_host import CoreHost, FakeClock, process, step

# --- argument validation (SEMANTICS.md section 3) ---------------------------------------------

TIMEOUT_RULE = (
    '"timeout_ms" must be an integer from 0 to 50000'  # wait_agents (PROTOCOL.md section 5)
)


@pytest.mark.parametrize(
    ("struct", "arguments", "violations"),
    [
        (
            SendMessageArgs,
            {},
            'missing required property "subagent_id"; missing required property "message"',
        ),
        (
            SendMessageArgs,
            {"subagent_id": None, "message": 5},
            'missing required property "subagent_id"; "message" must be a string',
        ),
        (
            SendMessageArgs,
            {"message": ["x"], "subagent_id": {"a": 1}},
            '"subagent_id" must be a string; "message" must be a string',
        ),
        (ReportArgs, {"output": 1.5}, '"output" must be a string'),
        (InterruptAgentArgs, {"agent_id": True}, '"agent_id" must be a string'),
        (ListAgentsArgs, {"scope": 5}, '"scope" must be one of ["children","descendants"]'),
        (ListAgentsArgs, {"scope": "all"}, '"scope" must be one of ["children","descendants"]'),
        (ListAgentsArgs, {"scope": ""}, '"scope" must be one of ["children","descendants"]'),
        (WaitAgentsArgs, {"agent_ids": "c1"}, '"agent_ids" must be an array of strings'),
        (WaitAgentsArgs, {"agent_ids": ["c1", 2]}, '"agent_ids" must be an array of strings'),
        (WaitAgentsArgs, {"timeout_ms": -1}, TIMEOUT_RULE),
        (WaitAgentsArgs, {"timeout_ms": 600001}, TIMEOUT_RULE),
        (WaitAgentsArgs, {"timeout_ms": True}, TIMEOUT_RULE),
        (WaitAgentsArgs, {"timeout_ms": "5"}, TIMEOUT_RULE),
        (
            WaitAgentsArgs,
            {"agent_ids": 5, "timeout_ms": 1.5, "mode": "some"},
            '"agent_ids" must be an array of strings; '
            + TIMEOUT_RULE
            + '; "mode" must be one of ["any","all"]',
        ),
        (None, [1], '"arguments" must be an object'),
        (None, "x", '"arguments" must be an object'),
    ],
)
def test_argument_violations_are_all_named_in_schema_order(struct, arguments, violations):
    with pytest.raises(InvalidParamsError) as caught:
        check_arguments(struct or ReportArgs, arguments)
    assert caught.value.message == "invalid arguments: " + violations


def test_valid_arguments_build_the_struct_tolerating_null_optionals():
    args = {"subagent_id": "c1", "message": "hi"}
    assert check_arguments(SendMessageArgs, args) == SendMessageArgs(subagent_id="c1", message="hi")
    assert check_arguments(ListAgentsArgs, {"scope": None}) == ListAgentsArgs(scope="children")
    assert check_arguments(ListAgentsArgs, {}) == ListAgentsArgs(scope="children")
    assert check_arguments(ListAgentsArgs, {"scope": "descendants"}) == ListAgentsArgs(
        scope="descendants"
    )
    for bound in (0, 50000):
        waited = {"agent_ids": ["c1", "c2"], "timeout_ms": bound, "mode": "all"}
        assert check_arguments(WaitAgentsArgs, waited) == WaitAgentsArgs(
            agent_ids=["c1", "c2"], timeout_ms=bound, mode="all"
        )


def test_the_served_tools_follow_the_options_in_the_fixed_tool_order():
    assert served_tools(None, False) == (
        "send_message",
        "interrupt_agent",
        "list_agents",
        "report",
        "wait_agents",
        "ask_parent",
    )
    assert served_tools(None, True) == tuple(n for n in TOOL_NAMES if n != "ask_user")
    assert served_tools(None, True, True) == (*TOOL_NAMES,)  # --ask-user on
    assert served_tools(("report", "list_agents"), False) == ("list_agents", "report")
    assert served_tools(("wait_agents", "report"), True) == ("report", "spawn_agent", "wait_agents")


# --- escaped model-visible lines --------------------------------------------------------------


def test_characters_beyond_the_basic_plane_are_escaped_with_eight_hex_digits():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="tag\U000e0041\U000e007fend \U0001f600")
    assert core.list("root").text == "c1 [running] — tag\\U000e0041\\U000e007fend \U0001f600"


def older_tree() -> CoreHost:
    """Sessions an older version stored with ids the rule now refuses: root -> "p\\nQ" -> {g1,
    "d\\x1b" with a corrupt descriptor}; none of them live."""
    core = CoreHost()
    core.open("root")
    at = "2026-01-01T00:00:0{}.000000Z"
    body = '{"version":1,"mode":"continuable","label":"leaf"}'
    for i, (agent_id, parent, depth, descriptor) in enumerate(
        [("p\nQ", "root", 1, body), ("g1", "p\nQ", 2, body), ("d\x1b", "p\nQ", 2, "{")]
    ):
        record = SessionRecord(
            id=agent_id,
            parent_id=parent,
            kind="subagent",
            label="leaf",
            created_at=at.format(i),
            depth=depth,
        )
        core.store.insert_session(record, descriptor)
    return core


def test_stored_ids_and_parents_with_control_characters_are_escaped_in_the_listing():
    core = older_tree()
    assert core.list("root", "descendants").text == "\n".join(
        [
            "p\\nQ [ready] parent=root depth=1 — leaf",
            "g1 [ready] parent=p\\nQ depth=2 — leaf",
            "d\\x1b [diagnostic: corrupt] parent=p\\nQ depth=2",
        ]
    )
    assert core.list("p\nQ").text == "g1 [ready] — leaf\nd\\x1b [diagnostic: corrupt]"
    rows = core.list("root", "descendants").agents
    assert [(r.id, r.parent) for r in rows] == [("p\nQ", "root"), ("g1", "p\nQ"), ("d\x1b", "p\nQ")]


# --- interrupt_agent: nothing told about other trees, even through corrupt links ---------------


@pytest.mark.timeout(60)  # a walk that does not notice the cycle never ends
def test_a_cycle_of_parent_links_above_the_target_is_not_below_the_caller():
    core = CoreHost()
    core.open("root")
    for agent_id, parent in (("a", "b"), ("b", "a"), ("x", "a")):
        core.store.insert_session(
            SessionRecord(
                id=agent_id,
                parent_id=parent,
                kind="subagent",
                label="t",
                created_at="2026-01-01T00:00:00.000000Z",
                depth=1,
            ),
            '{"version":1,"mode":"continuable","label":"t"}',
        )
    result = core.interrupt("root", "x")
    assert (result.text, result.accepted, result.previous_status) == (
        "interrupt requested for agent x",
        True,
        None,
    )


# --- tools/list: what a caller is offered -----------------------------------------------------


def test_report_is_offered_only_to_the_current_activation_of_a_continuable_child():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    activation = core.svc.agents.registry.get("c1").activation_id
    every = ("send_message", "interrupt_agent", "list_agents", "report", "wait_agents")
    others = ("send_message", "interrupt_agent", "list_agents", "wait_agents")
    assert core.svc.tools.offered_tools("c1", None) == (*every, "ask_parent")
    assert core.svc.tools.offered_tools("c1", activation) == (*every, "ask_parent")
    assert core.svc.tools.offered_tools("c1", "an-older-activation") == others
    assert core.svc.tools.offered_tools("root", None) == others  # a root has no one to ask
    assert core.svc.tools.offered_tools(None, None) == others


# --- report: the inbox bound applies only to wakeups, the event names the turn ---------------


def parent_with_one_waiting(**settings) -> CoreHost:
    """root (running a host turn, one follow-up waiting) -> c1 running."""
    core = CoreHost(max_queued=1, **settings)
    core.open("root")
    core.spawn("root", "c1")
    core.svc.host.begin_turn("root", None)
    core.svc.host.followup("root", "waiting")
    return core


def test_a_quiet_report_is_not_bounded_by_the_parents_inbox_but_a_wakeup_is():
    core = parent_with_one_waiting(report_delivery="quiet")
    message_id = core.report("c1", "fyi").message_id
    assert core.svc.records.get_message(message_id).state == "claimed"
    core = parent_with_one_waiting()
    error = core.refusal(core.report, "c1", "fyi")
    assert error.message == (
        'report not delivered: agent "root" already has 1 messages waiting (the limit per inbox);'
        " wait until it has taken some"
    )


def test_the_report_event_names_the_open_turn_or_none_between_turns():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")
    turn = core.turn("c1")
    first = core.report("c1", "while running").message_id
    core.end("c1")  # idle: g1 keeps it resident
    second = core.report("c1", "between turns").message_id
    events = core.svc.records.read_transcript("c1", None, None).events
    assert [(e.turn_id, e.data) for e in events if e.type == "report"] == [
        (turn, {"message_id": first, "output": "while running"}),
        (None, {"message_id": second, "output": "between turns"}),
    ]


# --- tool filters: bound at activation, read from the descriptor when not live ---------------


def test_a_childs_tool_filter_binds_it_live_and_when_it_is_not_live():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", tool_filter=ToolFilter(deny=["list_agents"]))
    refusal = 'tool "list_agents" is not available to agent "c1": its tool_filter excludes it'
    offered = ("send_message", "interrupt_agent", "report", "wait_agents", "ask_parent")
    # live: the filter its activation holds, even when the stored descriptor becomes unreadable
    core.store.conn.execute("UPDATE descriptors SET body = '{' WHERE session_id = 'c1'")
    assert core.refusal(core.svc.tools.check_tool_allowed, "c1", "list_agents").message == refusal
    assert core.svc.tools.offered_tools("c1", None) == offered
    core.store.conn.execute(
        "UPDATE descriptors SET body = ? WHERE session_id = 'c1'",
        ('{"version":1,"mode":"continuable","label":"t","tool_filter":{"deny":["list_agents"]}}',),
    )
    core.end("c1")  # settles: not live, its descriptor decides
    assert core.status("c1") == "ready"
    error = core.refusal(core.svc.tools.check_tool_allowed, "c1", "list_agents")
    assert (error.code, error.message) == (Code.UNAUTHORIZED, refusal)
    core.svc.tools.check_tool_allowed("c1", "send_message")
    assert core.svc.tools.offered_tools("c1", None) == (
        "send_message",
        "interrupt_agent",
        "wait_agents",
    )
    core.svc.tools.check_tool_allowed("root", "list_agents")  # an ordinary session has no filter
    core.svc.tools.check_tool_allowed("nobody", "list_agents")


# --- send_message: admission is checked against the target's tree too ------------------------


def test_a_send_into_a_closing_tree_is_refused_as_draining_whoever_sends_it():
    core = CoreHost.with_tree()
    core.svc.host.close_root("root", lambda: None)
    error = core.refusal(core.send, "stranger", "c1")  # caller's own tree is open
    assert (error.code, error.message) == (
        Code.DRAINING,
        'message not delivered: continuable subagents below parent "root" are draining;'
        " the operation was not admitted",
    )


# --- send_message to a child live in another process sharing the database ----------------------


def test_a_send_to_a_draining_child_live_in_another_process_is_refused_as_draining(tmp_path):
    """A state the lease rules never produce, made by removing the parent's lease row (as in
    processes/test_multiprocess.py), so the second process can open the parent while the first runs c1,
    and c1 is draining there: the refusal is the one the first process would give."""
    path, clock = str(tmp_path / "shared.db"), FakeClock()
    first = process(path, clock, "p1")
    second = process(path, clock, "p2")
    step(first, first.open, "root")
    step(first, first.spawn, "root", "c1")
    step(first, first.svc.host.close_root, "root", lambda: None)  # c1's turn keeps both draining
    with second.svc.transaction():
        second.store.conn.execute("DELETE FROM leases WHERE session_id = 'root'")
    second.svc.commit()
    step(second, second.open, "root")
    error = second.refusal(step, second, second.send, "root", "c1", "x")
    assert (error.code, error.message) == (
        Code.DRAINING,
        'message not delivered: continuable subagents below parent "c1" are draining;'
        " the operation was not admitted",
    )
    assert second.store.inbox_counts("c1") == (0, 0)
    assert second.store.take_signals("p1") == []


# --- send_message: a cold resume is bounded like any other send --------------------------------


def test_a_cold_resume_checks_the_message_size_and_the_stored_inbox():
    core = CoreHost(max_text_bytes=8, max_queued=1)
    core.open("root")
    core.spawn("root", "c1", prompt="go")
    core.send("root", "c1", "queued")
    core.interrupt("root", "c1")
    core.end("c1", "aborted")  # idle, holding "queued" parked
    core.svc.host.close_root("root", lambda: None)  # c1 leaves with it: ready, one message stored
    core.open("root")
    assert core.status("c1") == "ready"
    error = core.refusal(core.send, "root", "c1", "123456789")
    assert (error.code, error.message) == (
        Code.OVERLOADED,
        "message not delivered: the message is 9 bytes, over the limit of 8 bytes;"
        " it was not accepted, make it shorter",
    )
    error = core.refusal(core.send, "root", "c1", "short")
    assert (error.code, error.message) == (
        Code.OVERLOADED,
        'message not delivered: agent "c1" already has 1 messages waiting (the limit per inbox);'
        " wait until it has taken some",
    )
    assert core.status("c1") == "ready"  # nothing resumed


# --- list_agents when the joined read fails: the walk without descriptors ---------------------


def failing_joined_read(core: CoreHost) -> list[list[str]]:
    """Make the tree read with descriptors fail; returns the id batches read instead."""
    store = core.store
    real_tree, real_many = store.tree_rows, store.get_descriptors
    batches: list[list[str]] = []

    def tree(root, descendants, with_descriptors=False):
        if with_descriptors:
            raise OSError("disk I/O error")
        return real_tree(root, descendants, with_descriptors)

    def children(*args):
        raise OSError("disk I/O error")

    def many(ids):
        batches.append(list(ids))
        return real_many(ids)

    store.tree_rows, store.get_descriptors, store.children_listing = tree, many, children
    return batches


def test_the_walk_without_descriptors_lists_the_same_and_reads_only_what_it_lacks():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="spawned")  # its mode is recorded at spawn
    core.spawn("c1", "g1", label="deeper")
    core.open("fork", parent_id="root")  # ordinary: walked through, never read
    core.store.insert_session(  # as an older version stored it: no recorded mode
        SessionRecord(
            id="old",
            parent_id="fork",
            kind="subagent",
            label="x",
            created_at="2030-01-01T00:00:00.000000Z",
            depth=2,
        )
    )
    core.store.conn.execute(
        "INSERT INTO descriptors (root_id, session_id, body) VALUES"
        ' (\'root\', \'old\', \'{"version":1,"mode":"continuable","label":"from the descriptor"}\')'
    )
    expected = "\n".join(
        [
            "c1 [running] parent=root depth=1 — spawned",
            "g1 [running] parent=c1 depth=2 — deeper",
            "old [ready] parent=fork depth=2 — from the descriptor",
        ]
    )
    assert core.list("root", "descendants").text == expected
    batches = failing_joined_read(core)
    assert core.list("root", "descendants").text == expected
    assert batches == [["old"]]
    assert core.list("root").text == "c1 [running] — spawned"


# --- new agent ids (core/identifiers.py, the full check behind the schema's pattern) -----------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "it is empty"),
        ("@", "it starts with @, which is reserved"),
        ("@x", "it starts with @, which is reserved"),
        ("x" * 129, "it is longer than 128 bytes"),
        ("é" * 65, "it is longer than 128 bytes"),
        ("x" * 127 + "é", "it is longer than 128 bytes"),
        ("ab\ncd", "it holds the character U+000A at index 2"),
        ("\x7f", "it holds the character U+007F at index 0"),
        ("a\u202eb\x00", "it holds the character U+202E at index 1"),
        ("tag\U000e0041", "it holds the character U+E0041 at index 3"),
    ],
)
def test_a_new_id_that_breaks_the_rule_is_refused_naming_what_breaks_it(value, problem):
    with pytest.raises(InvalidParamsError) as caught:
        check_new_id("child_id", value)
    assert caught.value.message == f"invalid params: child_id: {problem}; {ID_RULE}"


@pytest.mark.parametrize("value", ["x", "a@", "x" * 128, "é" * 64, "x" * 126 + "é", "日本 語"])
def test_a_new_id_within_the_rule_is_accepted(value):
    check_new_id("agent_id", value)


# --- quotas at their edges ------------------------------------------------------------------------


def test_the_descriptor_is_bounded_only_while_both_text_and_label_bounds_are_on():
    for settings in ({"max_text_bytes": 100, "max_label_bytes": 0}, {"max_text_bytes": 0}):
        core = CoreHost(**settings)
        core.open("root")
        core.spawn("root", "c1", persona="p" * 500)  # no bound: accepted
    core = CoreHost(max_text_bytes=100, max_label_bytes=10)
    core.open("root")
    error = core.refusal(core.spawn, "root", "c1", persona="p" * 500)
    assert error.data["quota"] == "max-text-bytes"


def test_the_database_bound_refuses_from_the_limit_itself():
    core = CoreHost()
    core.open("root")
    size = core.store.size_bytes()
    core.svc.settings.max_db_bytes = size + 1
    core.svc.host.followup("root", "below the limit: stored")
    core.svc.settings.max_db_bytes = core.store.size_bytes()
    error = core.refusal(core.svc.host.followup, "root", "at the limit")
    assert error.message == (
        f"the database reached its size limit of {core.store.size_bytes()} bytes; nothing was stored"
    )


def test_a_report_budget_goes_with_the_activation_that_spent_it():
    core = CoreHost(report_budget=4)
    core.open("root")
    core.spawn("root", "c1")
    core.report("c1", "abcd")
    assert core.refusal(core.report, "c1", "e").data["quota"] == "report-budget"
    core.end("c1")  # settles: its window is forgotten with it
    core.end("root")  # the notice turn
    core.send("root", "c1", "again")  # a cold resume: a new activation, a new budget
    core.report("c1", "abcd")


@pytest.mark.parametrize(
    ("struct", "arguments", "violations"),
    [
        (
            InterruptAgentArgs,
            {"subagent_id": "c1"},
            'missing required property "agent_id"; unknown property "subagent_id";'
            ' did you mean "agent_id"?',
        ),
        (
            SendMessageArgs,
            {"agent_id": "c1", "message": "hi"},
            'missing required property "subagent_id"; unknown property "agent_id";'
            ' did you mean "subagent_id"?',
        ),
        (
            WaitAgentsArgs,
            {"timeout": 50, "colour": "blue"},
            'unknown property "timeout"; did you mean "timeout_ms"?; unknown property "colour"',
        ),
    ],
)
def test_an_unknown_argument_is_refused_naming_the_closest_known_one(struct, arguments, violations):
    with pytest.raises(InvalidParamsError) as refused:
        check_arguments(struct, arguments)
    assert refused.value.message == f"invalid arguments: {violations}"
