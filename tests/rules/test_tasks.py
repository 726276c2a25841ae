"""MCP tasks against core, on both backends: a task is made with its delegation (all or
nothing), ends with its child's settling, is seen only inside the asker's subtree, expires, and
counts against --max-tasks (core/tasks.py; PROTOCOL.md section 5, Tasks)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from subagentd.errors import InvalidParamsError, QuotaExceededError
from subagentd.schema.host_methods import OpenParams
from subagentd.schema.tools import ReportArgs, SpawnAgentArgs
from tests.core_host import CoreHost

FINISHED = "Background subagent {} finished and will do no further work unless you send it more."


def held(**settings: Any) -> CoreHost:
    core = CoreHost(**settings)
    core.svc.host.open(OpenParams(agent_id="root"), hold=True)  # an MCP client's root
    core.svc.host.open(OpenParams(agent_id="other"), hold=True)
    return core


def spawn_task(core: CoreHost, caller: str, child_id: str, ttl: int | None = None) -> str:
    """spawn_agent as a task, as mcp/tasks.py runs it: one write transaction for both."""
    with core.svc.transaction():
        core.svc.tasks.check_quota(caller)
        spawned = core.svc.delegation.spawn_agent(
            caller, None, SpawnAgentArgs(label="l", prompt="p", child_id=child_id)
        )
        task = core.svc.tasks.create(
            caller, spawned.child_id, "spawn_agent", {"child_id": child_id}, ttl, None
        )
    return task.taskId


def status(core: CoreHost, caller: str, task_id: str) -> str:
    with core.svc.transaction():
        core.svc.tasks.check()
        return core.svc.tasks.find(caller, task_id).status


def test_a_task_is_made_with_its_spawn_or_not_at_all(backend):
    core = held()
    with pytest.raises(RuntimeError), core.svc.transaction():
        spawned = core.svc.delegation.spawn_agent(
            "root", None, SpawnAgentArgs(label="l", prompt="p", child_id="c1")
        )
        task = core.svc.tasks.create("root", spawned.child_id, "spawn_agent", {}, None, None)
        raise RuntimeError("the request failed after both were written")
    assert core.store.get_task(task.taskId) is None
    assert core.store.get_session("c1") is None
    assert core.store.working_tasks() == []


def test_a_task_completes_when_its_child_settles_and_fails_when_it_errs(backend):
    core = held()
    done, failed = spawn_task(core, "root", "c1"), spawn_task(core, "root", "c2")
    assert status(core, "root", done) == status(core, "root", failed) == "working"
    core.svc.tools.report("c1", None, ReportArgs(output="mid"))
    assert status(core, "root", done) == "working"  # a report does not end it
    with core.svc.transaction():
        core.end("c1", output="all done")
        core.end("c2", reason="error", output="boom")
    assert status(core, "root", done) == "completed"
    assert status(core, "root", failed) == "failed"
    record = core.store.get_task(done)
    assert record is not None and record.status_message == FINISHED.format("c1")
    result = core.svc.tasks.result(record)
    assert result is not None and result["isError"] is False
    (block,) = result["content"]  # one block: nothing lost to a client that shows the first
    assert block["text"].split("\n") == [
        "Background subagent c1 reported:",
        "mid",
        FINISHED.format("c1"),
        "Its closing message:",
        "all done",
        "none of the subagents waited for is still working",
    ]
    # the news is consumed with the task's end: nothing from c1 waits in the root's inbox
    assert core.store.waiting_messages("root") == []
    notified = core.take("notifications/tasks/status")
    assert sorted((n["taskId"], n["status"]) for n in notified) == sorted(
        [(done, "completed"), (failed, "failed")]
    )


def test_a_task_outside_the_callers_subtree_is_the_same_refusal_as_a_missing_one(backend):
    core = held()
    theirs = spawn_task(core, "other", "o1")
    mine = spawn_task(core, "root", "c1")
    deep = spawn_task(core, "c1", "g1")

    def refused(caller: str, task_id: str) -> tuple[int, str, Any]:
        with pytest.raises(InvalidParamsError) as exc:
            core.svc.tasks.find(caller, task_id)
        return exc.value.code, exc.value.message, exc.value.data

    assert refused("root", theirs) == (-32602, f"task not found: {theirs}", None)
    assert refused("root", "missing") == (-32602, "task not found: missing", None)
    assert refused("c1", mine)[1] == f"task not found: {mine}"  # an ancestor's: not the child's
    assert refused("g1", deep)[1] == f"task not found: {deep}"
    assert core.svc.tasks.find("root", deep).agent_id == "g1"  # a descendant's: the root's too
    listed, cursor = core.svc.tasks.page("root", None)
    assert {t.taskId for t in listed} == {mine, deep} and cursor is None
    with pytest.raises(InvalidParamsError):
        core.svc.tasks.page("root", theirs)  # another tree's id is no cursor here


def test_an_expired_task_is_not_found_and_prune_deletes_it(backend):
    core = held()
    gone = spawn_task(core, "root", "c1", ttl=0)
    kept = spawn_task(core, "root", "c2")
    with pytest.raises(InvalidParamsError):
        core.svc.tasks.find("root", gone)
    with core.svc.transaction():
        assert core.store.delete_expired_tasks(core.store.clock()) == 1
    assert core.store.get_task(gone) is None
    assert core.store.get_task(kept) is not None


def test_working_tasks_count_against_max_tasks_and_ended_ones_do_not(backend):
    core = held(max_tasks=1)
    spawn_task(core, "root", "c1")
    with pytest.raises(QuotaExceededError) as exc:
        spawn_task(core, "root", "c2")
    assert exc.value.message == (
        'agent "root" already has 1 working tasks (the limit per agent, --max-tasks);'
        " wait until some of them finish"
    )
    assert core.store.get_session("c2") is None
    with core.svc.transaction():
        core.end("c1")
    spawn_task(core, "root", "c2")  # c1's task ended: room again


def test_after_a_lost_group_the_working_tasks_are_read_again(backend):
    core = held()
    task_id = spawn_task(core, "root", "c1")
    core.svc.tasks.reload()  # what recovery.rebuild does after a lost commit group
    with core.svc.transaction():
        core.end("c1")
    assert status(core, "root", task_id) == "completed"


def test_tasks_list_of_a_tree_past_every_bind_parameter_limit_lists_its_tasks(backend):
    core = held()
    first = spawn_task(core, "root", "c1")
    second = spawn_task(core, "c1", "g1")
    # 70,000 sessions below g1 (written as rows: past PostgreSQL's 65,535 bind parameters and
    # SQLite's 32,766 when the subtree's ids are sent as one list)
    rows = [
        ("root", f"s{i:05d}", "g1", "subagent", "l", "2026-01-01T00:00:00.000000Z", 3)
        for i in range(70_000)
    ]
    with core.svc.transaction():
        core.store.set_parked("g1", False)  # opens the write transaction
        sql = (
            "INSERT INTO sessions (root_id, id, parent_id, kind, label, created_at, depth) VALUES "
        )
        if backend == "sqlite":
            core.store.conn.executemany(sql + "(?, ?, ?, ?, ?, ?, ?)", rows)
        else:
            with core.store.conn.raw.cursor() as cursor:
                cursor.executemany(sql + "(%s, %s, %s, %s, %s, %s, %s)", rows)
        # and a task of the last of them (in the last batch of owners a listing reads)
        last = msgspec.structs.replace(
            core.store.get_task(second),
            task_id="t-last",
            owner_id="s69999",
            agent_id="s69999",
            created_at="2999-01-01T00:00:00.000000Z",  # the newest
        )
        core.store.insert_task(last)
    core.svc.commit()
    with core.svc.transaction():
        tasks, cursor = core.svc.tasks.page("root", None)
    listed = [t.taskId for t in tasks]
    assert sorted(listed[:2]) == sorted([first, second]) and listed[2:] == ["t-last"]
    assert cursor is None


def test_a_task_whose_asker_left_before_its_child_ends_when_the_child_settles(backend):
    core = held()
    with core.svc.transaction():  # c1, one-shot: it leaves when its turn ends
        core.svc.delegation.spawn_agent(
            "root", None, SpawnAgentArgs(label="l", prompt="p", child_id="c1", mode="one-shot")
        )
    task = spawn_task(core, "c1", "g1")  # c1 asks for g1 as a task
    with core.svc.transaction():
        core.end("c1", output="left")
    assert core.svc.agents.registry.get("c1") is None  # the asker is gone, g1 runs on
    assert status(core, "root", task) == "working"
    with core.svc.transaction():
        core.end("g1", output="g1 done")
    assert status(core, "root", task) == "completed"
    record = core.store.get_task(task)
    assert record is not None and record.status_message == FINISHED.format("g1")
