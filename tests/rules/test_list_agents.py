"""list_agents: SEMANTICS.md section 6 (order, walk, diagnostics, rendering), on core/."""

import json

import pytest

from subagentd.schema.host_methods import Scope
from subagentd.schema.records import SessionRecord
from tests.core_host import CoreHost


def build():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="first child")
    core.spawn("root", "c2", label="second child")
    core.spawn("c1", "g1", label="nested leaf")
    core.spawn("root", "once", label="one shot", mode="one-shot")
    core.end("c2")  # settles: ready
    return core


def test_children_scope_lists_direct_continuable_children_in_creation_order():
    core = build()
    result = core.list("root")
    assert (
        result.text == "c1 [running] — first child\nc2 [ready, last turn completed] — second child"
    )
    assert [(a.id, a.status, a.label, a.parent, a.depth) for a in result.agents] == [
        ("c1", "running", "first child", None, None),
        ("c2", "ready", "second child", None, None),
    ]


def test_descendants_scope_is_a_preorder_walk_with_parent_and_depth():
    core = build()
    result = core.list("root", "descendants")
    assert result.text == (
        "c1 [running] parent=root depth=1 — first child\n"
        "g1 [running] parent=c1 depth=2 — nested leaf\n"
        "c2 [ready, last turn completed] parent=root depth=1 — second child"
    )


def test_nothing_to_show_renders_no_subagents():
    core = build()
    assert core.list("g1").text == "(no subagents)"
    assert core.list("nobody", "descendants").text == "(no subagents)"
    assert core.list("g1").agents == []


def insert_session(core, sid, parent, created, kind="subagent", body=None, label="x"):
    core.store.conn.execute(  # in its parent's tree (the parent's root), or its own
        "INSERT INTO sessions (root_id, id, parent_id, kind, label, created_at, depth)"
        " VALUES (coalesce((SELECT root_id FROM sessions WHERE id = ?), ?),?,?,?,?,?,1)",
        (parent, sid, sid, parent, kind, label, created),
    )
    if body is not None:
        core.store.conn.execute(
            "INSERT INTO descriptors (root_id, session_id, body)"
            " SELECT root_id, id, ? FROM sessions WHERE id = ?",
            (body, sid),
        )


def good(label, mode="continuable"):
    return json.dumps({"version": 1, "mode": mode, "label": label})


def test_siblings_order_by_created_at_then_id_in_code_point_order():
    core = CoreHost()
    insert_session(core, "b", "r", "2026-01-01T00:00:00.000002Z", body=good("B"))
    insert_session(core, "a", "r", "2026-01-01T00:00:00.000002Z", body=good("A"))
    insert_session(core, "Z", "r", "2026-01-01T00:00:00.000002Z", body=good("Z"))
    insert_session(core, "z-early", "r", "2026-01-01T00:00:00.000001Z", body=good("early"))
    insert_session(core, "ab", "r", "2026-01-01T00:00:00.000002Z", body=good("AB"))
    assert [a.id for a in core.list("r").agents] == ["z-early", "Z", "a", "ab", "b"]
    assert [a.id for a in core.list("r", "descendants").agents] == ["z-early", "Z", "a", "ab", "b"]


def test_ordinary_and_one_shot_sessions_are_walked_through_but_not_listed():
    core = CoreHost()
    insert_session(core, "fork", "r", "2026-01-01T00:00:01Z", kind="ordinary")
    insert_session(core, "under-fork", "fork", "2026-01-01T00:00:02Z", body=good("below a fork"))
    insert_session(core, "once", "r", "2026-01-01T00:00:03Z", body=good("one", "one-shot"))
    insert_session(
        core, "under-once", "once", "2026-01-01T00:00:04Z", body=good("below a one-shot")
    )
    assert core.list("r").text == "(no subagents)"
    assert core.list("r", "descendants").text == (
        "under-fork [ready] parent=fork depth=2 — below a fork\n"
        "under-once [ready] parent=once depth=2 — below a one-shot"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "corrupt"),
        ("{broken", "corrupt"),
        ('"a string"', "corrupt"),
        ('{"version": 1, "mode": "continuable"}', "corrupt"),
        ('{"version": 1, "mode": "continuable", "label": 5}', "corrupt"),
        ('{"version": 2, "mode": "continuable", "label": "x"}', "unsupported"),
    ],
)
def test_unreadable_descriptors_become_diagnostics_and_the_walk_continues(body, reason):
    core = CoreHost()
    insert_session(core, "bad", "r", "2026-01-01T00:00:01Z", body=body)
    insert_session(core, "below", "bad", "2026-01-01T00:00:02Z", body=good("still listed"))
    assert core.list("r").text == f"bad [diagnostic: {reason}]"
    result = core.list("r", "descendants")
    assert result.text == (
        f"bad [diagnostic: {reason}] parent=r depth=1\nbelow [ready] parent=bad depth=2 — still listed"
    )
    assert result.agents[0].reason == reason


# SQLite stores text that is not UTF-8; PostgreSQL refuses it at the write
@pytest.mark.sqlite_only
def test_a_descriptor_that_cannot_be_read_becomes_unavailable_and_the_rest_is_listed():
    core = CoreHost()
    insert_session(core, "garbled", "r", "2026-01-01T00:00:01Z")
    insert_session(core, "fine", "r", "2026-01-01T00:00:02Z", body=good("fine"))
    # text that is not UTF-8: SQLite stores it, Python cannot read it back
    core.store.conn.execute(
        "INSERT INTO descriptors (root_id, session_id, body)"
        " VALUES ('garbled', 'garbled', CAST(x'ff00fe' AS TEXT))"
    )
    assert core.list("r").text == "garbled [diagnostic: unavailable]\nfine [ready] — fine"
    assert core.list("r", "descendants").text == (
        "garbled [diagnostic: unavailable] parent=r depth=1\nfine [ready] parent=r depth=1 — fine"
    )


def test_a_failing_read_becomes_unavailable_and_is_retried_next_call():
    core = CoreHost()
    insert_session(core, "flaky", "r", "2026-01-01T00:00:01Z", body=good("flaky"))
    insert_session(core, "fine", "r", "2026-01-01T00:00:02Z", body=good("fine"))
    store = core.store
    real_tree, real_many, real_one = store.tree_rows, store.get_descriptors, store.get_descriptor
    real_children = store.children_listing
    failing = {"flaky"}

    def tree(root, descendants, with_descriptors=False):
        if with_descriptors and failing:
            raise OSError("disk I/O error")
        return real_tree(root, descendants, with_descriptors)

    def children(*args):
        if failing:
            raise OSError("disk I/O error")
        return real_children(*args)

    def many(ids):
        if failing & set(ids):
            raise OSError("disk I/O error")
        return real_many(ids)

    def one(sid):
        if sid in failing:
            raise OSError("disk I/O error")
        return real_one(sid)

    store.tree_rows, store.get_descriptors, store.get_descriptor = tree, many, one
    store.children_listing = children
    assert core.list("r").text == "flaky [diagnostic: unavailable]\nfine [ready] — fine"
    failing.clear()
    assert core.list("r").text == "flaky [ready] — flaky\nfine [ready] — fine"


def test_when_the_joined_read_fails_descriptors_are_read_in_batches_not_one_by_one():
    core = CoreHost()
    with core.store.atomic():
        for i in range(1000):  # more than one batch of 900
            insert_session(
                core, f"s{i:04d}", "r", f"2026-01-01T00:00:{i % 60:02d}Z", body=good(f"l{i}")
            )
    core.store.commit()
    store = core.store
    real_tree, real_many = store.tree_rows, store.get_descriptors
    batches: list[int] = []

    def tree(root, descendants, with_descriptors=False):
        if with_descriptors:
            raise OSError("disk I/O error")
        return real_tree(root, descendants, with_descriptors)

    def children(*args):
        raise OSError("disk I/O error")

    def many(ids):
        batches.append(len(ids))
        return real_many(ids)

    def one(session_id):
        raise AssertionError(f"{session_id} read alone although its batch could be read")

    store.tree_rows, store.get_descriptors, store.get_descriptor = tree, many, one
    store.children_listing = children
    result = core.list("r")
    assert sorted(batches) == [100, 900]
    assert len(result.agents) == 1000
    assert {a.label for a in result.agents} == {f"l{i}" for i in range(1000)}
    assert {type(a).__name__ for a in result.agents} == {"ChildRow"}  # no diagnostics


def test_cycles_in_corrupt_data_never_loop_and_never_list_the_root():
    core = CoreHost()
    insert_session(core, "a", "r", "2026-01-01T00:00:01Z", body=good("A"))
    insert_session(core, "b", "a", "2026-01-01T00:00:02Z", body=good("B"))
    core.store.conn.execute(
        "INSERT INTO sessions (id, parent_id, kind, label, created_at, depth) VALUES ('r', 'b', 'subagent', 'r', '2026', 0)"
    )
    insert_session(core, "self", "self", "2026-01-01T00:00:03Z", body=good("loop"))
    result = core.list("r", "descendants")
    assert [a.id for a in result.agents] == ["a", "b"]
    assert core.list("self", "descendants").text == "(no subagents)"


def test_status_comes_from_the_registry():
    core = build()
    core.end("g1")
    core.end("c1")  # c1 starts the notice turn from g1
    assert core.list("root", "descendants").text.splitlines()[:2] == [
        "c1 [running] parent=root depth=1 — first child",
        "g1 [ready, last turn completed] parent=c1 depth=2 — nested leaf",
    ]


def plans_of_the_listing(core: CoreHost, scope: Scope) -> tuple[list, dict[str, list[str]]]:
    """List once, tracing the SQL the store runs; the query plan of each statement it ran."""
    ran: list[str] = []
    core.store.conn.set_trace_callback(ran.append)  # the statements with their bound values
    try:
        result = core.list("r", scope)
    finally:
        core.store.conn.set_trace_callback(None)
    plans = {
        sql: [row[-1] for row in core.store.conn.execute("EXPLAIN QUERY PLAN " + sql)]
        for sql in ran
        if sql.lstrip().upper().startswith("SELECT")
    }
    assert plans, "the listing ran no query"
    return result.agents, plans


def assert_only_indexed_reads(plans: dict[str, list[str]]) -> None:
    """No full scan of sessions or descriptors, no sort: the listing's cost follows the tree
    below the root, not the whole table."""
    for sql, plan in plans.items():
        for step in plan:
            assert "TEMP B-TREE" not in step, f"sorts instead of using an index: {sql}\n{plan}"
            # owners (alias o) has one row per process sharing the database
            if step.startswith("SCAN") and step.split()[1] not in ("owners", "o"):
                assert "USING INDEX" in step or "USING COVERING INDEX" in step, (
                    f"full scan: {sql}\n{plan}"
                )


def uses(plans: dict[str, list[str]], index: str) -> bool:
    return any(index in step for plan in plans.values() for step in plan)


def thousands_of_sessions(core: CoreHost, *, with_paths: bool) -> list[str]:
    """5000 subagents below r (100 children, each with 49 of its own); their walk order."""
    rows = [
        (
            f"s{i:05d}",
            "r" if i < 100 else f"s{i % 100:05d}",
            f"2026-01-01T00:00:{i % 60:02d}Z",
        )
        for i in range(5000)
    ]
    store = core.store
    with store.atomic():
        for session_id, parent_id, created_at in rows:
            if with_paths:  # as spawn writes them: path and recorded mode
                store.insert_session(
                    SessionRecord(
                        id=session_id,
                        parent_id=parent_id,
                        kind="subagent",
                        label="x",
                        created_at=created_at,
                        depth=1 if parent_id == "r" else 2,
                    ),
                    good("x"),
                    mode="continuable",
                )
            else:  # as an older subagentd wrote them: no path, no mode
                store.conn.execute(
                    "INSERT INTO sessions (root_id, id, parent_id, kind, label, created_at,"
                    " depth) VALUES ('r', ?, ?, 'subagent', 'x', ?, 1)",
                    (session_id, parent_id, created_at),
                )
                store.conn.execute(
                    "INSERT INTO descriptors (root_id, session_id, body) VALUES ('r', ?, ?)",
                    (session_id, good("x")),
                )
    store.commit()
    children: dict[str, list[tuple[str, str]]] = {}
    for session_id, parent_id, created_at in rows:
        children.setdefault(parent_id, []).append((created_at, session_id))
    order: list[str] = []
    for _, child in sorted(children["r"]):
        order.append(child)
        order.extend(grandchild for _, grandchild in sorted(children.get(child, [])))
    return order


# SQLite's query plans (EXPLAIN QUERY PLAN of the traced statements)
@pytest.mark.sqlite_only
@pytest.mark.parametrize("with_paths", [True, False], ids=["range-scan", "level-walk"])
def test_listing_thousands_of_sessions_uses_the_index(with_paths):
    core = CoreHost()
    core.open("r")
    order = thousands_of_sessions(core, with_paths=with_paths)

    agents, plans = plans_of_the_listing(core, "descendants")
    assert [a.id for a in agents] == order
    assert_only_indexed_reads(plans)
    # one range scan of the tree's paths (root_id, path), or (rows without paths) the level walk
    # by parent
    assert uses(plans, "sessions_by_root" if with_paths else "sessions_by_parent")

    agents, plans = plans_of_the_listing(core, "children")
    assert [a.id for a in agents] == [a for a in order if a < "s00100"]
    assert_only_indexed_reads(plans)
    assert uses(plans, "sessions_by_parent")


def test_children_after_a_one_shot_child_are_still_listed():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "o1", mode="one-shot")  # first by created_at, never listed by the tool
    core.spawn("root", "c1", label="after it")
    assert core.list("root").text == "c1 [running] — after it"
