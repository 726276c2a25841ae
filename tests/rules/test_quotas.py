"""Quotas (SECURITY.md): each bound refuses with 1011 OVERLOADED naming the quota, writes nothing,
and reads as a tool error the model can act on. Core rules on core/, the wire on a real server."""

from __future__ import annotations

import pytest

from subagentd.core.clock import ManualClock
from subagentd.core.settings import Settings
from subagentd.errors import QuotaExceededError
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import OpenParams
from tests.core_host import CoreHost
from tests.spawned import RpcError


def counts(core: CoreHost) -> tuple[int, ...]:
    """Rows of every table a request may write: a refusal must leave them all unchanged."""
    conn = core.store.conn
    return tuple(
        conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("sessions", "descriptors", "inbox", "events", "idempotency", "leases")
    )


def refused(core: CoreHost, action, *args, **kwargs) -> QuotaExceededError:
    """The refusal, checked to be a quota error that left every table as it was."""
    before = counts(core)
    error = core.refusal(action, *args, **kwargs)
    assert isinstance(error, QuotaExceededError), error
    assert error.code == Code.OVERLOADED
    assert counts(core) == before
    return error


def test_defaults_are_the_documented_ones():
    s = Settings()
    assert (s.max_children, s.max_live_per_root, s.max_live, s.max_queued) == (
        64,
        256,
        10_000,
        1000,
    )
    assert (s.max_text_bytes, s.max_label_bytes) == (256 * 1024, 1024)
    assert (s.report_budget, s.report_window, s.max_db_bytes) == (1024 * 1024, 600.0, 0)


def test_live_children_per_parent_are_bounded_and_a_finished_child_makes_room():
    core = CoreHost(max_children=2)
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("root", "c2")
    error = refused(core, core.spawn, "root", "c3")
    assert error.message == (
        'agent "root" already has 2 live subagents (the limit per parent);'
        " wait until some of them finish"
    )
    assert error.data == {"reason": "max-children", "quota": "max-children", "limit": 2}
    core.end("c1")  # c1 settles: one live child left
    core.spawn("root", "c3")


def test_a_cold_resume_counts_as_a_new_live_child_and_is_refused_as_not_delivered():
    core = CoreHost(max_children=1)
    core.open("root")
    core.spawn("root", "c1")
    core.end("c1")  # ready
    core.spawn("root", "c2")  # the one live child
    error = refused(core, core.send, "root", "c1", "wake up")
    assert error.message == (
        'message not delivered: agent "root" already has 1 live subagents (the limit per parent);'
        " wait until some of them finish"
    )
    assert core.status("c1") == "ready"


def test_live_agents_per_tree_are_bounded_across_generations():
    core = CoreHost(max_live_per_root=3)
    core.open("root")
    core.open("other")
    core.spawn("root", "c1")
    core.spawn("c1", "g1")  # root, c1, g1: the tree is full
    error = refused(core, core.spawn, "c1", "g2")
    assert error.message == (
        'the tree of agent "root" already has 3 live agents (the limit per tree);'
        " wait until some of them finish"
    )
    assert error.data == {"reason": "max-live-per-root", "quota": "max-live-per-root", "limit": 3}
    core.spawn("other", "o1")  # another tree is not affected


def test_live_agents_in_the_process_are_bounded_for_the_host_too():
    core = CoreHost(max_live=2)
    core.open("root")
    core.spawn("root", "c1")
    error = refused(core, core.svc.host.open, OpenParams(agent_id="second"))
    assert error.message == (
        "subagentd already runs 2 live agents (its limit); wait until some of them finish"
    )
    assert refused(core, core.spawn, "root", "c2").data == {
        "reason": "max-live",
        "quota": "max-live",
        "limit": 2,
    }


def test_waiting_messages_per_inbox_are_bounded_for_send_message_followup_and_reports():
    core = CoreHost(max_queued=2)
    core.open("root")
    core.spawn("root", "c1")  # running its first turn
    core.send("root", "c1", "one")
    core.send("root", "c1", "two")
    error = refused(core, core.send, "root", "c1", "three")
    assert error.message == (
        'message not delivered: agent "c1" already has 2 messages waiting (the limit per inbox);'
        " wait until it has taken some"
    )
    assert error.data == {"reason": "max-queued", "quota": "max-queued", "limit": 2}
    assert (
        refused(core, core.svc.host.followup, "c1", "from the host").data["quota"] == "max-queued"
    )
    core.end("c1")  # takes "one": room for one more
    core.send("root", "c1", "three")
    # the parent's inbox bounds reports delivered as wakeups: c1 runs "one", two are waiting
    core.spawn("c1", "g1")
    error = refused(core, core.report, "g1", "found it")
    assert error.message.startswith('report not delivered: agent "c1" already has 2 messages')


def test_settlement_notices_are_never_refused_by_the_inbox_quota():
    core = CoreHost(max_queued=1)
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("root", "c2")
    core.svc.host.followup("root", "busy")  # root runs it
    core.end("c1")
    core.end("c2")
    assert core.svc.records.get("root").queued == 2  # both notices wait, past the limit of 1


@pytest.mark.parametrize(
    ("action", "what"),
    [
        (lambda core, text: core.send("root", "c1", text), "message not delivered: the message"),
        (lambda core, text: core.svc.host.followup("c1", text), "the message"),
        (lambda core, text: core.report("c1", text), "report not delivered: the report"),
        (lambda core, text: core.spawn("root", "c2", prompt=text), "the prompt"),
        (lambda core, text: core.svc.host.begin_turn("root", ["ok", text]), "a message"),
        (lambda core, text: core.end("c1", "completed", text), "the output"),
    ],
)
def test_texts_are_bounded_in_utf8_bytes(action, what):
    core = CoreHost(max_text_bytes=100)
    core.open("root")  # idle, no turn: turns/begin may start one
    core.spawn("root", "c1")
    error = refused(core, action, core, "é" * 51)  # 51 characters, 102 bytes
    assert error.message == (
        f"{what} is 102 bytes, over the limit of 100 bytes; it was not accepted, make it shorter"
    )
    assert error.data == {"reason": "max-text-bytes", "quota": "max-text-bytes", "limit": 100}
    action(core, "é" * 50)  # exactly the limit passes


def test_the_descriptor_is_bounded_by_one_text_plus_one_label():
    core = CoreHost(max_text_bytes=100, max_label_bytes=10)
    core.open("root")
    error = refused(core, core.spawn, "root", "c1", persona="p" * 100)
    assert error.message == (
        "the descriptor (persona, model, tool filter, label) is 162 bytes, over the limit of 110"
        " bytes; it was not accepted, make it shorter"
    )
    assert error.data == {"reason": "max-text-bytes", "quota": "max-text-bytes", "limit": 110}
    core.spawn("root", "c1", persona="p" * 48)  # 110 bytes


def test_labels_are_bounded_in_utf8_bytes_for_spawn_and_open():
    core = CoreHost(max_label_bytes=8)
    core.open("root")
    error = refused(core, core.spawn, "root", "c1", label="x" * 9)
    assert error.message == (
        "the label is 9 bytes, over the limit of 8 bytes; it was not accepted, make it shorter"
    )
    assert error.data == {"reason": "max-label-bytes", "quota": "max-label-bytes", "limit": 8}
    assert refused(core, core.svc.host.open, OpenParams(agent_id="r2", label="€€€")).data == {
        "reason": "max-label-bytes",
        "quota": "max-label-bytes",
        "limit": 8,
    }
    core.spawn("root", "c1", label="x" * 8)


def test_report_budget_refuses_reports_past_it_instead_of_injecting_them():
    for delivery in ("wakeup", "quiet"):
        core = CoreHost(report_budget=10, report_delivery=delivery)
        core.open("root")
        core.spawn("root", "c1")
        core.report("c1", "12345")
        core.report("c1", "67890")  # exactly the budget
        core.notes.clear()
        error = refused(core, core.report, "c1", "1")
        assert error.message == (
            'report not delivered: reports from agent "c1" used their budget of 10 bytes per'
            " 600 seconds; send one self-contained report later"
        )
        assert error.data == {"reason": "report-budget", "quota": "report-budget", "limit": 10}
        assert core.notes == []  # nothing injected, no turn started


def test_report_budget_renews_with_the_next_window():
    clock = ManualClock()
    core = CoreHost(report_budget=4, report_window=60.0, clock=clock)
    core.open("root")
    core.spawn("root", "c1")
    core.report("c1", "abcd")
    refused(core, core.report, "c1", "e")
    clock.advance(59.999)
    refused(core, core.report, "c1", "e")
    clock.advance(0.001)
    core.report("c1", "abcd")


def test_database_size_bound_refuses_model_driven_writes_but_not_turn_ends():
    core = CoreHost(max_db_bytes=1)  # any database is larger
    core.open("root")  # the host opening a root is not bounded by it
    error = refused(core, core.spawn, "root", "c1")
    assert error.message == "the database reached its size limit of 1 bytes; nothing was stored"
    assert error.data == {"reason": "max-db-bytes", "quota": "max-db-bytes", "limit": 1}
    assert refused(core, core.svc.host.followup, "root", "hi").data["quota"] == "max-db-bytes"


def test_zero_turns_a_quota_off():
    core = CoreHost(max_children=0, max_queued=0, max_text_bytes=0)
    core.open("root")
    for i in range(70):
        core.spawn("root", f"c{i}")
    for _ in range(1001):
        core.send("root", "c0", "more")
    core.send("root", "c1", "x" * 300_000)


# --- the wire --------------------------------------------------------------------------------


def test_a_quota_refusal_is_a_tool_error_result_for_mcp_and_names_the_quota_on_the_host_api(
    make_server,
):
    srv = make_server(max_queued=1)
    host = srv.host
    host.open("root")
    host.spawn("root", "c1")
    host.tool("send_message", "root", subagent_id="c1", message="one")
    result = host.call(
        "tools/call",
        {
            "name": "send_message",
            "arguments": {"subagent_id": "c1", "message": "two"},
            "_meta": {"subagentd/caller": "root"},
        },
    )
    text = (
        'message not delivered: agent "c1" already has 1 messages waiting (the limit per inbox);'
        " wait until it has taken some"
    )
    assert result == {"content": [{"type": "text", "text": f"Error: {text}"}], "isError": True}
    with pytest.raises(RpcError) as caught:
        host.tool("send_message", "root", subagent_id="c1", message="two")
    assert (caught.value.code, caught.value.message) == (Code.OVERLOADED, text)
    assert caught.value.data == {
        "reason": "max-queued",
        "quota": "max-queued",
        "limit": 1,
        "text": f"Error: {text}",
    }
    with pytest.raises(RpcError) as caught:
        host.call("agents/followup", {"agent_id": "c1", "message": "three"})
    assert caught.value.code == Code.OVERLOADED
    assert caught.value.data == {"reason": "max-queued", "quota": "max-queued", "limit": 1}
    assert host.call("agents/get", {"agent_id": "c1"})["queued"] == 1


def test_a_refused_turn_end_keeps_the_turn_open_for_a_shorter_retry(make_server):
    srv = make_server(max_text_bytes=60)
    host = srv.host
    host.open("root")
    child = host.spawn("root", "c1")
    with pytest.raises(RpcError) as caught:
        host.end_turn("c1", child["turn_id"], "completed", "x" * 61)
    assert caught.value.data == {"reason": "max-text-bytes", "quota": "max-text-bytes", "limit": 60}
    assert host.call("agents/get", {"agent_id": "c1"})["status"] == "running"
    host.end_turn("c1", child["turn_id"], "completed", "x" * 60)
    assert host.notification("agent/settled", agent_id="c1")["reason"] == "completed"


# --- the serve options and their SUBAGENTD_* defaults ------------------------------------------


def serve_args(*argv: str):
    """The serve options as `subagentd serve ARGV` parses them (environment included)."""
    from types import SimpleNamespace

    from subagentd.cli.commands import serve

    return SimpleNamespace(**serve.make_context("serve", list(argv)).params)


def test_every_quota_is_a_serve_option_with_the_documented_default():
    args = serve_args()
    assert (args.max_children, args.max_live_per_root, args.max_live) == (64, 256, 10_000)
    assert (args.max_queued, args.max_text_bytes, args.max_label_bytes) == (1000, 262144, 1024)
    assert (args.report_budget, args.report_window, args.max_db_bytes) == (1048576, 600.0, 0)
    assert args.max_depth == 8


def test_every_serve_option_takes_its_default_from_a_subagentd_variable(monkeypatch):
    from subagentd.cli.commands import serve

    options = [p.opts[0] for p in serve.params if p.expose_value and p.opts[0].startswith("--")]
    assert len(options) >= 20
    values = {"--caller": "someone", "--log-level": "debug", "--log-format": "json"}
    values |= {"--framing": "lsp", "--durability": "full", "--report-delivery": "quiet"}
    values |= {"--db": "/tmp/x.db", "--max-depth": "5", "--tools": "list_agents,report"}
    values |= {"--event-loop": "trio", "--retention": "30s", "--spawn-tool": "on"}
    values |= {"--clock": "manual", "--ask-user": "on"}
    values |= {"--runner-protocol": "acp", "--acp-permission": "allow", "--detach": "on"}
    values |= {"--a2a-agent": "far=http://127.0.0.1:9/ near=https://a.example/"}  # space-split
    for option in options:
        name = "SUBAGENTD_" + option[2:].upper().replace("-", "_")
        monkeypatch.setenv(name, values.get(option, "3"))
    args = serve_args()
    for option in options:
        dest = option[2:].replace("-", "_")
        expected = "30" if option == "--retention" else values.get(option, "3")  # 30s: seconds
        got = getattr(args, dest)
        if option == "--tools":
            assert got == ("list_agents", "report")
        elif option == "--a2a-agent":
            assert got == (("far", "http://127.0.0.1:9/"), ("near", "https://a.example/"))
        else:
            assert str(got) in (expected, f"{expected}.0"), option
    assert serve_args("--max-children", "9").max_children == 9  # the command line wins


@pytest.mark.parametrize(
    ("argv", "env", "option", "says"),
    [
        (("--max-depth", "65"), {}, "--max-depth", "65 is not in the range 1<=x<=64"),
        ((), {"SUBAGENTD_MAX_DEPTH": "1000"}, "--max-depth", "1000 is not in the range"),
        (("--max-queued", "-1"), {}, "--max-queued", "-1 is not in the range x>=0"),
        (
            (),
            {"SUBAGENTD_FRAMING": "carrier-pigeon"},
            "--framing",
            "'carrier-pigeon' is not one of",
        ),
        ((), {"SUBAGENTD_MAX_CHILDREN": "lots"}, "--max-children", "'lots' is not a valid integer"),
        (("--interrupt-grace", "-1"), {}, "--interrupt-grace", "-1.0 is not in the range x>=0"),
        (("--report-rate", "-2"), {}, "--report-rate", "-2 is not in the range x>=0"),
        (("--lease-ttl", "-5"), {}, "--lease-ttl", "-5.0 is not in the range x>0"),
        (("--lease-ttl", "0"), {}, "--lease-ttl", "0.0 is not in the range x>0"),
        (("--tools", "send_mesage"), {}, "--tools", "unknown tool(s) send_mesage; choose from"),
    ],
)
def test_out_of_range_options_and_variables_stop_start_up(
    monkeypatch, capsys, argv, env, option, says
):
    from subagentd.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert f"Error: Invalid value for '{option}'" in err and says in err, err


def test_max_depth_is_capped_at_64():
    assert serve_args("--max-depth", "64").max_depth == 64


# --- every event type's bound (docs/architecture.md, "Bounds on every write") ---------------

TEXT = 4096  # --max-text-bytes for the largest cases below
FIXED = 2048  # bytes an event holds besides its bounded texts: ids, stamps, fixed sentences
BOUNDS = {  # event type -> its bound, as docs/architecture.md lists it
    "activated": FIXED,
    "descriptor": TEXT + 1024 + FIXED,  # one text plus one label (--max-label-bytes 1024)
    "message": TEXT + FIXED,
    "notice": TEXT + FIXED,
    "report": TEXT + FIXED,
    "turn_start": FIXED,
    "interrupt": FIXED,
    "turn_end": TEXT + FIXED,
    "settled": FIXED,
    "message_cancelled": FIXED,
}


def largest_events() -> dict[str, int]:
    """Each event type's largest stored size after every input is the largest accepted."""
    import msgspec

    from subagentd.schema.budgets import StopParams
    from tests.core_host import events_of

    big = "é" * (TEXT // 2)  # exactly --max-text-bytes
    core = CoreHost(max_text_bytes=TEXT)
    core.open("root")
    core.spawn("root", "c1", label="l" * 1024, prompt=big, persona="p" * (TEXT - 1024))
    core.spawn("root", "o1", prompt=big, mode="one-shot")
    core.spawn("o1", "g1", prompt=big)
    core.report("c1", big)
    core.send("root", "c1", big)  # queued behind its turn
    core.end("c1", output=big)  # its next turn runs the message
    core.interrupt("root", "c1")
    core.end("c1", reason="aborted", output=big)  # it settles: a notice for root
    core.send("root", "c1", big)  # c1's next turn
    core.send("root", "c1", big)  # queued: cancelled by the stop below
    core.end("g1", output=big)  # its notice is recorded for o1, a one-shot parent
    core.svc.budgets.stop(StopParams(agent_id="c1", queues="clear"))
    largest: dict[str, int] = {}
    for agent in ("root", "c1", "o1", "g1"):
        for event in events_of(core, agent):
            size = len(msgspec.json.encode(event.data))
            largest[event.type] = max(largest.get(event.type, 0), size)
    return largest


@pytest.mark.parametrize("event_type", sorted(BOUNDS))
def test_the_largest_event_of_each_type_stays_within_its_documented_bound(backend, event_type):
    largest = largest_events()
    assert event_type in largest  # the scenario made one
    assert largest[event_type] <= BOUNDS[event_type], largest
