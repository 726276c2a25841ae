"""spawn_agent, wait_agents and agents/wait_idle against core (PROTOCOL.md sections 4 and 5)."""

from __future__ import annotations

from typing import Any

from subagentd.core.clock import Clock
from subagentd.core.waits import PROGRESS_EVERY, Waiter
from subagentd.schema.codes import Code
from subagentd.schema.host_methods import OpenParams
from subagentd.schema.tools import SpawnAgentArgs, WaitAgentsArgs
from tests.core_host import CoreHost

FINISHED = "Background subagent {} finished and will do no further work unless you send it more."


def held_root(**settings: Any) -> CoreHost:
    """An MCP client's root (held: its input waits for the client) and nothing else."""
    core = CoreHost(**settings)
    core.svc.host.open(OpenParams(agent_id="root"), hold=True)
    return core


def spawn(core: CoreHost, caller: str, child_id: str | None = None, **args: Any):
    args.setdefault("label", "task")
    args.setdefault("prompt", "go")
    with core.svc.transaction():
        return core.svc.delegation.spawn_agent(
            caller, None, SpawnAgentArgs(child_id=child_id, **args)
        )


def wait(core: CoreHost, caller: str = "root", token: Any = None, **args: Any):
    """wait_agents as the server runs it: in a write transaction; a Waiter gets a `done`."""
    with core.svc.transaction():
        answer = core.svc.delegation.wait_agents(caller, None, WaitAgentsArgs(**args), token)
    if isinstance(answer, Waiter):
        answers: list[Any] = []
        answer.done = answers.append
        return answer, answers
    return answer


def act(core: CoreHost, action: Any, *args: Any) -> Any:
    """One host request: its own write transaction (which ends by answering finished waits)."""
    with core.svc.transaction():
        return action(*args)


def inbox_states(core: CoreHost, agent_id: str) -> list[str]:
    rows = core.store.conn.execute(
        "SELECT state FROM inbox WHERE session_id = ? ORDER BY position", (agent_id,)
    )
    return [row[0] for row in rows]


# --- spawn_agent ------------------------------------------------------------------------------


def test_spawn_agent_starts_a_continuable_child_with_its_prompt():
    core = held_root()
    result = spawn(core, "root", "c1", label="research", prompt="find it")
    assert (result.child_id, result.text) == ("c1", "started subagent c1")
    [start] = core.take("turn/start", "c1")
    assert [b["text"] for m in start["messages"] for b in m["content"]] == ["find it"]
    assert start["messages"][0]["source"] == {
        "kind": "coordinator",
        "form": "spawn",
        "sender_session_id": "root",
    }
    assert core.list("root").text == "c1 [running] — research"


def test_spawn_agent_mints_an_id_when_none_is_given():
    core = held_root()
    result = spawn(core, "root")
    assert result.text == f"started subagent {result.child_id}"
    assert core.status(result.child_id) == "running"


def test_spawn_agent_refuses_as_agents_spawn_does():
    core = held_root(max_depth=1)
    spawn(core, "root", "c1")
    duplicate = core.refusal(spawn, core, "root", "c1")
    assert (duplicate.code, duplicate.message) == (
        Code.DUPLICATE_CHILD,
        'an agent with id "c1" already exists',
    )
    deep = core.refusal(spawn, core, "c1", "g1")
    assert (deep.code, deep.message) == (
        Code.DEPTH_EXCEEDED,
        "spawning below depth 1 exceeds the maximum depth 1",
    )
    core.svc.host.close_root("root", lambda: None)
    draining = core.refusal(spawn, core, "root", "c2")
    assert (draining.code, draining.message) == (
        Code.DRAINING,
        'continuable subagents below parent "root" are draining; the operation was not admitted',
    )


# --- wait_agents: what arrived already --------------------------------------------------------


def test_wait_agents_collects_a_report_that_arrived_and_consumes_it():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    core.report("c1", "half done")
    answer = wait(core)
    assert answer.blocks == [
        "Background subagent c1 reported:",
        "half done",
        "still working: c1, c2",
    ]
    assert answer.text == "\n".join(answer.blocks)
    assert [(a.agent_id, a.status, a.reports) for a in answer.agents] == [
        ("c1", "running", ["half done"]),
        ("c2", "running", None),
    ]
    assert answer.timed_out is False
    assert inbox_states(core, "root") == ["claimed"]
    again = wait(core, timeout_ms=0)  # consumed: not collected twice
    assert again.blocks == [
        "wait_agents timed out after 0 ms; still working: c1, c2; call wait_agents again to keep waiting"
    ]
    assert again.timed_out is True


def test_wait_agents_gives_the_settlement_notice_with_its_reason_and_output():
    core = held_root()
    spawn(core, "root", "c1")
    core.end("c1", "completed", "the answer")
    answer = wait(core)
    assert answer.blocks == [
        FINISHED.format("c1"),
        "Its closing message:",
        "the answer",
        "none of the subagents waited for is still working",
    ]
    [entry] = answer.agents
    assert (entry.agent_id, entry.status, entry.reason, entry.output) == (
        "c1",
        "ready",
        "completed",
        "the answer",
    )


def test_wait_agents_with_nothing_left_to_wait_for_answers_at_once():
    core = held_root()
    assert wait(core).text == 'agent "root" has no subagents to wait for'
    spawn(core, "root", "c1")
    core.end("c1", "completed")
    wait(core)  # the notice
    answer = wait(core)  # c1 is ready and nothing new: waiting could never end
    assert answer.blocks == ["none of the subagents waited for is still working"]


def test_wait_agents_consumes_news_a_running_caller_would_have_taken_as_a_turn():
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["work"])
    spawn(core, "root", "c1")
    core.report("c1", "found it")  # root is running: this waits for its next turn
    answer = wait(core)
    assert answer.blocks[:2] == ["Background subagent c1 reported:", "found it"]
    core.take("turn/start", "root")
    core.end("root")
    assert core.take("turn/start", "root") == []  # consumed by the wait: no turn for it
    assert core.status("root") == "idle"
    events = core.svc.records.read_transcript("root", None, None).events
    last = [e for e in events if e.type == "message"][-1]  # the root's transcript has it
    assert [b["text"] for b in last.data["content"]] == answer.blocks[:2]
    assert last.turn_id is not None  # recorded in the turn that waited


# --- wait_agents: waiting -------------------------------------------------------------------


def test_wait_agents_any_answers_when_the_first_news_arrives():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    waiter, answers = wait(core)
    act(core, core.end, "c2", "completed", "c2 done")
    [answer] = answers
    assert answer.blocks == [
        FINISHED.format("c2"),
        "Its closing message:",
        "c2 done",
        "still working: c1",
    ]
    assert core.svc.waits.pending == []
    assert inbox_states(core, "root") == ["claimed"]


def test_wait_agents_all_answers_once_every_one_has_finished():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    waiter, answers = wait(core, mode="all")
    act(core, core.report, "c1", "partial")
    act(core, core.end, "c1", "completed", "one")
    assert answers == []
    act(core, core.end, "c2", "error")
    [answer] = answers
    assert answer.blocks == [
        "Background subagent c1 reported:",
        "partial",
        FINISHED.format("c1"),
        "Its closing message:",
        "one",
        "Background subagent c2 failed before it finished.",
        "It left no closing message.",
        "none of the subagents waited for is still working",
    ]
    assert [(a.agent_id, a.reason, a.output, a.reports) for a in answer.agents] == [
        ("c1", "completed", "one", ["partial"]),
        ("c2", "error", None, None),
    ]


def test_wait_agents_waits_only_for_the_agents_named():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    waiter, answers = wait(core, agent_ids=["c1"])
    act(core, core.report, "c2", "not this one")
    assert answers == []
    act(core, core.report, "c1", "this one")
    [answer] = answers
    assert answer.blocks == ["Background subagent c1 reported:", "this one", "still working: c1"]
    assert inbox_states(core, "root") == ["queued", "claimed"]  # c2's report stays


def test_wait_agents_timeout_says_which_are_still_working():
    core = held_root()
    spawn(core, "root", "c1")
    waiter, answers = wait(core, timeout_ms=1500)
    [timer] = [e for e in core.timers.scheduled if e[2]]
    assert timer[0] == 1.5
    act(core, core.timers.fire_all)
    [answer] = answers
    assert answer.blocks == [
        "wait_agents timed out after 1500 ms; still working: c1; call wait_agents again to keep waiting"
    ]
    assert (answer.timed_out, answer.agents[0].status) == (True, "running")


def test_a_cancelled_wait_consumes_nothing_afterwards():
    core = held_root()
    spawn(core, "root", "c1")
    waiter, answers = wait(core)
    core.svc.waits.cancel(waiter)
    act(core, core.report, "c1", "after the cancel")
    assert answers == []
    assert inbox_states(core, "root") == ["queued"]
    assert not any(entry[2] for entry in core.timers.scheduled)  # its timer is stopped


def test_a_wait_with_a_progress_token_sends_progress_until_it_ends():
    core = held_root()
    spawn(core, "root", "c1")
    waiter, answers = wait(core, token="tok-1", timeout_ms=60000)
    [first] = core.take("notifications/progress")
    assert first == {
        "progressToken": "tok-1",
        "progress": 0,
        "total": 60000,
        "message": "waiting for c1",
    }
    progress_timer = [e for e in core.timers.scheduled if e[2] and e[0] == 5.0]
    assert len(progress_timer) == 1
    progress_timer[0][2] = False  # fired
    act(core, progress_timer[0][1])
    [second] = core.take("notifications/progress")
    assert second["progressToken"] == "tok-1" and second["message"] == "waiting for c1"
    act(core, core.report, "c1", "news")
    assert len(answers) == 1
    assert not any(entry[2] for entry in core.timers.scheduled)


# --- wait_agents: who may wait for whom -------------------------------------------------------


def test_wait_agents_refuses_agents_that_are_not_the_callers_children():
    core = held_root()
    core.open("stranger")
    spawn(core, "root", "c1")
    spawn(core, "c1", "g1")
    spawn(core, "stranger", "s1")
    for target in ("g1", "s1", "nobody", "root"):
        error = core.refusal(wait, core, agent_ids=["c1", target])
        assert (error.code, error.message) == (
            Code.UNAUTHORIZED,
            f'subagent "{target}" was not started by agent "root";'
            " wait_agents waits only for your own subagents",
        )
    assert inbox_states(core, "root") == []


def test_wait_agents_needs_a_live_current_caller():
    core = held_root()
    spawn(core, "root", "c1")
    error = core.refusal(
        core.svc.delegation.wait_agents, "root", "an-old-activation", WaitAgentsArgs()
    )
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'agent "root" is not live or its activation is not current;'
        " only a live agent can wait for its subagents",
    )


# --- agents/wait_idle -------------------------------------------------------------------------


def test_wait_idle_answers_when_the_whole_tree_is_quiet():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "c1", "g1")
    waiter = core.svc.delegation.wait_idle("root", 30000)
    answers: list[Any] = []
    waiter.done = answers.append
    act(core, core.end, "c1", "completed")  # g1 still runs
    assert answers == []
    act(core, core.end, "g1", "completed")  # g1 settles, c1 runs its notice
    assert answers == []
    act(core, core.end, "c1", "completed")  # c1 settles; root holds the notice for the client
    [answer] = answers
    assert (answer.idle, answer.running, answer.runnable) == (True, None, None)
    assert core.svc.delegation.wait_idle("root", 0).idle is True


def test_wait_idle_timeout_names_what_is_running_and_what_waits_to_run():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.svc.host.followup("c1", "later")
    answer = core.svc.delegation.wait_idle("root", 0)
    assert (answer.idle, answer.running, answer.runnable) == (False, ["c1"], ["c1"])
    waiter = core.svc.delegation.wait_idle("root", 250)
    answers: list[Any] = []
    waiter.done = answers.append
    act(core, core.timers.fire_all)
    assert [(a.idle, a.running) for a in answers] == [(False, ["c1"])]


def test_wait_idle_of_an_unknown_agent_is_refused():
    core = CoreHost()
    error = core.refusal(core.svc.delegation.wait_idle, "nobody", 10)
    assert (error.code, error.message) == (Code.UNKNOWN_AGENT, 'agent "nobody" does not exist')


# --- parked messages are visible --------------------------------------------------------------


def test_a_parked_agent_shows_its_parked_messages_in_every_listing():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="worker")
    core.spawn("c1", "g1")
    core.send("root", "c1", "one")
    core.send("root", "c1", "two")
    core.interrupt("root", "c1")
    core.end("c1", "aborted")  # g1 keeps it live: idle, two messages parked
    assert core.list("root").text == "c1 [idle, 2 parked] — worker"
    assert core.list("root", "descendants").text == (
        "c1 [idle, 2 parked] parent=root depth=1 — worker\ng1 [running] parent=c1 depth=2 — task"
    )
    assert core.list("root").agents[0].parked == 2
    assert [row.parked for row in core.list("root", "descendants").agents] == [2, None]
    info = core.svc.records.get("c1")
    assert (info.status, info.queued, info.parked) == ("idle", 0, 2)
    from subagentd.schema.host_methods import ListParams

    [row] = core.svc.records.list_host(ListParams(root_id="root")).agents
    assert (row.status, row.parked) == ("idle", 2)
    core.send("root", "c1", "three")  # a waking input: they run again
    assert core.list("root").text == "c1 [running] — worker"


def test_a_wait_whose_answer_was_rolled_back_waits_again():
    core = held_root()
    spawn(core, "root", "c1")
    waiter, answers = wait(core)
    act(core, core.report, "c1", "first")
    assert len(answers) == 1 and core.svc.waits.pending == []
    core.svc.waits.rearm(waiter, answers.append)  # what the server does after a lost group
    assert core.svc.waits.pending == [waiter]
    act(core, core.report, "c1", "second")
    assert answers[1].blocks[:2] == ["Background subagent c1 reported:", "second"]


# --- wait_agents: what it consumes, and the caller it leaves --------------------------------


def test_news_a_running_caller_consumes_is_claimed_by_its_turn_under_its_own_id():
    core = CoreHost()
    core.open("root")
    core.svc.host.begin_turn("root", ["work"])
    spawn(core, "root", "c1")
    reported = core.report("c1", "found it")
    wait(core)
    info = core.svc.records.get_message(reported.message_id)
    assert (info.state, info.turn_id) == ("claimed", core.turn("root"))
    events = core.svc.records.read_transcript("root", None, None).events
    assert [e for e in events if e.type == "message"][-1].data["message_id"] == reported.message_id


def test_a_wait_answered_at_once_with_news_has_not_timed_out():
    core = held_root()
    spawn(core, "root", "c1")
    core.report("c1", "early")
    answer = wait(core, timeout_ms=0)
    assert answer.timed_out is False
    assert answer.blocks == ["Background subagent c1 reported:", "early", "still working: c1"]


def test_consumed_news_leaves_the_inbox_bound_counting_only_what_still_waits():
    core = held_root(max_queued=2)
    spawn(core, "root", "c1")
    core.report("c1", "one")
    wait(core)  # consumes the report: nothing waits in root's inbox any more
    core.svc.host.followup("root", "a")
    core.svc.host.followup("root", "b")
    error = core.refusal(core.svc.host.followup, "root", "c")
    assert (error.code, error.message) == (
        Code.OVERLOADED,
        'agent "root" already has 2 messages waiting (the limit per inbox);'
        " wait until it has taken some",
    )


def test_consuming_news_of_a_parked_caller_keeps_the_rest_parked_until_none_is_left():
    core = held_root()
    spawn(core, "root", "c1")
    core.report("c1", "one")
    core.svc.host.followup("root", "later")
    core.svc.host.host_interrupt("root")  # both park
    info = core.svc.records.get("root")
    assert (info.queued, info.parked) == (0, 2)
    wait(core)  # takes the report; "later" stays parked
    info = core.svc.records.get("root")
    assert (info.queued, info.parked) == (0, 1)
    assert core.store.get_session("root").parked is True
    core.svc.host.cancel_message(
        core.store.conn.execute(
            "SELECT message_id FROM inbox WHERE session_id = 'root' AND state = 'parked'"
        ).fetchone()[0]
    )
    core.report("c1", "two")  # a waking input: unparks root's (now empty) parked inbox
    core.svc.host.host_interrupt("root")
    wait(core)  # the only parked message was the news: the inbox is not parked any more
    assert core.store.get_session("root").parked is False


def test_a_wait_whose_caller_was_closed_is_answered_without_taking_its_news():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    reported = core.report("c1", "for the next activation")
    waiter, answers = wait(core, mode="all")
    closed: list[bool] = []
    act(core, core.svc.host.close_root, "root", lambda: closed.append(True))
    act(core, core.end, "c1", "aborted")
    act(core, core.end, "c2", "aborted")
    assert closed == [True]
    [answer] = answers
    assert answer.blocks == ["none of the subagents waited for is still working"]
    assert core.svc.records.get_message(reported.message_id).state == "queued"


def test_wait_idle_of_an_agent_that_is_not_live_answers_idle_at_once():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    core.end("c1", "completed")  # settles: ready
    answer = core.svc.delegation.wait_idle("c1", 30000)
    assert (answer.idle, answer.running, answer.runnable) == (True, None, None)


# --- progress and the clock of waits ----------------------------------------------------------


class SteppingClock(Clock):
    """monotonic() for core/waits.py: where the test sets it, `step` seconds later each read."""

    def __init__(self, now: float = 1000.0, step: float = 0.0) -> None:
        self.now, self.step = now, step

    def monotonic(self) -> float:
        value = self.now
        self.now += self.step
        return value


def fire(core: CoreHost, delay: float) -> None:
    """Fire the pending timers of one delay, each in its own write transaction."""
    for entry in [e for e in core.timers.scheduled if e[2] and e[0] == delay]:
        entry[2] = False
        act(core, entry[1])


def test_progress_counts_the_milliseconds_waited_and_names_the_live_agents():
    clock = SteppingClock(step=0.001)  # time moves on between any two reads
    core = held_root(clock=clock)
    spawn(core, "root", "c1")
    spawn(core, "root", "c2")
    waiter, answers = wait(core, token=7, timeout_ms=60000, mode="all")  # deadline: 1060.0
    [first] = core.take("notifications/progress")
    assert first == {
        "progressToken": 7,
        "progress": 0,
        "total": 60000,
        "message": "waiting for c1, c2",
    }
    clock.now, clock.step = 1007.5, 0.0
    act(core, core.end, "c2", "completed")  # ready; c1 still works
    fire(core, PROGRESS_EVERY)
    [second] = core.take("notifications/progress")
    assert (second["progress"], second["message"]) == (7500, "waiting for c1")
    core.end("c1", "completed")  # outside a write transaction: no check answers the wait yet
    clock.now = 1012.5
    fire(core, PROGRESS_EVERY)
    [third] = core.take("notifications/progress")
    assert (third["progress"], third["message"]) == (12500, "waiting for -")


def test_a_wait_without_a_description_sends_progress_without_a_message():
    core = CoreHost()
    core.svc.waits.add(lambda timed_out: None, 2000, token="t")
    assert core.take("notifications/progress") == [
        {"progressToken": "t", "progress": 0, "total": 2000}
    ]


def test_a_wait_armed_again_waits_only_until_its_first_deadline():
    clock = SteppingClock()
    core = held_root(clock=clock)
    spawn(core, "root", "c1")
    waiter, answers = wait(core, token="tok", timeout_ms=60000)  # deadline: 1060.0
    act(core, core.report, "c1", "first")
    assert len(answers) == 1
    core.take("notifications/progress")
    clock.now = 1020.0
    core.svc.waits.rearm(waiter, answers.append)  # its answer was lost with its group
    assert [e[0] for e in core.timers.scheduled if e[2]] == [40.0, PROGRESS_EVERY]
    [again] = core.take("notifications/progress")
    assert (again["progress"], again["total"]) == (20000, 60000)
    core.svc.waits.cancel(waiter)
    clock.now = 1070.0  # past its deadline: the timeout is due at once
    core.svc.waits.rearm(waiter, answers.append)
    assert [e[0] for e in core.timers.scheduled if e[2]] == [0.0, PROGRESS_EVERY]


def test_an_answer_that_ends_another_wait_answers_that_one_in_the_same_check():
    core = CoreHost()
    consumed: list[str] = []
    answers: list[Any] = []
    first = core.svc.waits.add(lambda timed_out: "first" if consumed else None, 1000)
    second = core.svc.waits.add(lambda timed_out: consumed.append("news") or "second", 1000)
    first.done = second.done = answers.append
    core.svc.waits.check()
    assert answers == ["second", "first"]
    assert core.svc.waits.pending == []


def test_a_wait_whose_request_still_runs_is_skipped_not_the_waits_after_it():
    core = CoreHost()
    answers: list[Any] = []
    running = core.svc.waits.add(lambda timed_out: "early", 1000)  # no `done` yet
    over = core.svc.waits.add(lambda timed_out: "over", 1000)
    over.done = answers.append
    core.svc.waits.check()
    assert answers == ["over"]
    assert core.svc.waits.pending == [running]


def test_spawn_agent_needs_the_current_activation_and_keeps_the_mode_asked_for():
    core = held_root()
    error = core.refusal(
        core.svc.delegation.spawn_agent,
        "root",
        "an-old-activation",
        SpawnAgentArgs(label="t", prompt="p"),
    )
    assert (error.code, error.message) == (
        Code.UNAUTHORIZED,
        'spawning requires the exact live caller; agent "root" is not live or its activation is not current',
    )
    spawn(core, "root", "o1", mode="one-shot")
    assert core.svc.records.get("o1").mode == "one-shot"


def test_wait_agents_by_default_waits_for_the_children_and_a_held_roots_one_shot_ones():
    core = held_root()
    spawn(core, "root", "c1")
    spawn(core, "c1", "g1")  # a grandchild is not waited for
    spawn(core, "root", "o1", mode="one-shot")  # a held root also waits for a live one-shot
    answer = wait(core, timeout_ms=0)
    assert [a.agent_id for a in answer.agents] == ["c1", "o1"]
    core.end("o1", "completed", "counted: 3")  # its output is queued for the held root
    answer = wait(core, timeout_ms=0)
    assert answer.blocks == [
        "Background one-shot subagent o1 finished; it takes no further messages.",
        "Its closing message:",
        "counted: 3",
        "still working: c1",
    ]
    assert [(a.agent_id, a.status, a.reason) for a in answer.agents] == [
        ("c1", "running", None),
        ("o1", "ready", "completed"),
    ]
    assert [a.agent_id for a in wait(core, timeout_ms=0).agents] == ["c1"]  # consumed: gone
    empty = held_root()
    assert wait(empty).agents == []


def test_a_one_shot_childs_output_reaches_an_unheld_parent_only_through_its_host():
    core = CoreHost()
    core.svc.host.open(OpenParams(agent_id="root"))  # a host's root: not held
    spawn(core, "root", "o1", mode="one-shot")
    core.end("o1", "completed", "counted: 3")
    assert inbox_states(core, "root") == []  # no notice: the host's delegation call has it
