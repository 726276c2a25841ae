"""What storage keeps so a listing is cheap, and that it never changes what a listing says.

Materialized tree paths (storage/paths.py): one range scan lists a subtree in walk order. The
oracle is written here from SEMANTICS' ordering rule (pre-order; siblings by created_at, then id
in code-point order), independent of both the range scan and the level-by-level walk.

The recorded mode (migration m004): written at spawn, cleared by triggers whenever the
descriptor (or the session's label or kind) changes, so on-disk changes still show.
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from subagentd.schema.records import SessionRecord
from subagentd.storage.database import SqliteStore
from subagentd.storage.migrations import migrations
from subagentd.storage.paths import backfill, child_path, segment
from subagentd.storage.trees import WITH_BODY, Trees
from tests.core_host import CoreHost


def expected_walk(rows: list[tuple[str, str | None, str]], root: str) -> list[tuple[str, int]]:
    """(id, depth below root) in pre-order, siblings by (created_at, id)."""
    children: dict[str | None, list[tuple[str, str]]] = {}
    for session_id, parent_id, created_at in rows:
        children.setdefault(parent_id, []).append((created_at, session_id))
    out: list[tuple[str, int]] = []

    def visit(parent: str, depth: int) -> None:
        for _, session_id in sorted(children.get(parent, [])):
            out.append((session_id, depth))
            visit(session_id, depth + 1)

    visit(root, 1)
    return out


def insert(store: SqliteStore, rows: list[tuple[str, str | None, str]]) -> None:
    depth: dict[str, int] = {}
    with store.atomic():
        for session_id, parent_id, created_at in rows:
            depth[session_id] = 0 if parent_id is None else depth[parent_id] + 1
            store.insert_session(
                SessionRecord(
                    id=session_id,
                    parent_id=parent_id,
                    kind="subagent" if parent_id else "ordinary",
                    label=session_id,
                    created_at=created_at,
                    depth=depth[session_id],
                ),
                '{"version":1,"mode":"continuable","label":"x"}' if parent_id else None,
            )
    store.commit()


# ids that are prefixes of each other, non-ASCII (code-point order = UTF-8 byte order), and
# timestamps that tie, so sibling order is decided by every part of the rule
IDS = ["a", "ab", "a0", "b", "B", "é", "éa", "z", "日本", "\U0001f600", "a b", "0"]
STAMPS = ["2026-01-01T00:00:00.000001Z", "2026-01-01T00:00:00.000002Z", "2026-01-02T00:00:00Z"]


@st.composite
def forests(draw):
    names = draw(st.permutations(IDS))
    count = draw(st.integers(min_value=1, max_value=len(IDS)))
    rows: list[tuple[str, str | None, str]] = [("root", None, STAMPS[0])]
    for i, name in enumerate(names[:count]):
        parent = draw(st.sampled_from(["root", *[r[0] for r in rows[1 : i + 1]]]))
        rows.append((name, parent, draw(st.sampled_from(STAMPS))))
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=forests(), pick=st.integers(min_value=0))
def test_the_range_scan_the_level_walk_and_the_rule_agree(rows, pick):
    store = SqliteStore(":memory:")
    insert(store, rows)
    root = rows[pick % len(rows)][0]
    trees = Trees(store.group)
    ranged = trees.subtree(root, WITH_BODY)
    assert ranged is not None  # every session written by this version has a path
    walked = trees.walk(root, WITH_BODY)
    assert ranged == walked  # rows: (id, parent_id, depth, kind, label, mode, descriptor)
    assert [(r[0], r[2]) for r in ranged] == expected_walk(rows, root)
    assert all(r[6] is not None for r in ranged)
    store.close()


def test_a_session_written_without_a_path_sends_listings_back_to_the_walk():
    store = SqliteStore(":memory:")
    insert(store, [("root", None, STAMPS[0]), ("c1", "root", STAMPS[1])])
    store.conn.execute(  # as a hand edit would write it: in the tree, without a path
        "INSERT INTO sessions (root_id, id, parent_id, kind, label, created_at, depth)"
        " VALUES ('root', 'c0', 'root', 'subagent', 'c0', ?, 1)",
        (STAMPS[0],),
    )
    assert Trees(store.group).subtree("root", WITH_BODY) is None
    assert [r.id for r in store.tree("root", True)] == ["c0", "c1"]
    store.close()


def test_ids_that_cannot_be_encoded_get_no_path_and_are_still_listed_in_order():
    assert segment(STAMPS[0], "a\x00b") is None
    assert segment(STAMPS[0], "a\x01b") is None
    assert child_path(None, STAMPS[0], "a") is None
    store = SqliteStore(":memory:")
    rows = [("root", None, STAMPS[0]), ("a\x01b", "root", STAMPS[1]), ("a", "root", STAMPS[1])]
    insert(store, rows)
    assert store.conn.execute("SELECT path FROM sessions WHERE id = 'a\x01b'").fetchone() == (None,)
    assert [(r.id, r.depth) for r in store.tree("root", True)] == expected_walk(rows, "root")
    store.close()


def test_upgrading_a_database_fills_paths_for_every_reachable_session(tmp_path):
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path, isolation_level=None)
    migrations.apply(Database(conn), stop_before="m003_tree_paths")
    rows = [
        ("root", None, STAMPS[0]),
        ("c2", "root", STAMPS[1]),
        ("c1", "root", STAMPS[1]),
        ("g1", "c2", STAMPS[0]),
        ("x", "y", STAMPS[0]),  # a parent cycle: reachable from no top-level session
        ("y", "x", STAMPS[0]),
        ("orphan", "missing", STAMPS[0]),
    ]
    conn.executemany(
        "INSERT INTO sessions (id, parent_id, kind, label, created_at, depth)"
        " VALUES (?, ?, 'subagent', 'l', ?, 1)",
        rows,
    )
    conn.close()
    store = SqliteStore(path)  # applies m003
    paths = dict(store.conn.execute("SELECT id, path FROM sessions").fetchall())
    assert {k for k, v in paths.items() if v is None} == {"x", "y", "orphan"}
    assert paths["g1"] == paths["c2"] + segment(STAMPS[0], "g1")
    # the cycle leaves rows without paths: listings walk, and agree with the rule
    assert [r.id for r in store.tree("root", True)] == ["c1", "c2", "g1"]
    store.close()


def test_backfill_skips_cycles_and_orphans():
    rows = [("r", None, "t"), ("a", "r", "t"), ("b", "c", "t"), ("c", "b", "t"), ("o", "?", "t")]
    paths = backfill(rows)
    assert set(paths) == {"r", "a"}
    assert paths["a"] == segment("t", "r") + segment("t", "a")


def recorded_modes(core: CoreHost) -> dict[str, str | None]:
    return dict(core.store.conn.execute("SELECT id, mode FROM sessions WHERE kind = 'subagent'"))


def test_spawn_records_the_mode_and_listings_use_it_without_reading_descriptors():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="first")
    core.spawn("root", "once", label="one shot", mode="one-shot")
    assert recorded_modes(core) == {"c1": "continuable", "once": "one-shot"}
    rows = core.store.tree("root", True, with_descriptors=True)
    assert [(r.id, r.mode, r.label, r.descriptor) for r in rows] == [
        ("c1", "continuable", "first", None),  # no descriptor read for a recorded mode
        ("once", "one-shot", "one shot", None),
    ]
    assert core.list("root", "descendants").text == "c1 [running] parent=root depth=1 — first"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("UPDATE descriptors SET body = '{' WHERE session_id = 'c1'", "c1 [diagnostic: corrupt]"),
        (
            "UPDATE descriptors SET body = '{\"version\": 9}' WHERE session_id = 'c1'",
            "c1 [diagnostic: unsupported]",
        ),
        ("DELETE FROM descriptors WHERE session_id = 'c1'", "c1 [diagnostic: corrupt]"),
        (
            "UPDATE descriptors SET body = json_set(body, '$.label', 'renamed')"
            " WHERE session_id = 'c1'",
            "c1 [running] — renamed",
        ),
        ("UPDATE sessions SET label = 'hand edit' WHERE id = 'c1'", "c1 [running] — first"),
        ("UPDATE sessions SET mode = 'bogus' WHERE id = 'c1'", "c1 [running] — first"),
    ],
)
def test_any_change_to_a_descriptor_after_spawn_shows_in_listings(change, expected):
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1", label="first")
    assert core.list("root").text == "c1 [running] — first"
    core.store.conn.execute(change)  # as a hand edit or another process would
    assert core.list("root").text == expected
    if "bogus" not in change:
        assert recorded_modes(core)["c1"] is None  # cleared by a trigger
