"""Which statements touch two trees' rows (docs/architecture.md, "Sharding by root id").

A representative workload on PostgreSQL (spawn, send, interrupt, list, report, settle, a kill -9
and the next process's crash recovery, prune) runs on two trees at once through real processes,
while row triggers on every table a tree's rows live in record each written row's session with
the round trip that wrote it (`pg_backend_pid()`, `statement_timestamp()`, `current_query()`).
A round trip that wrote rows of two trees must be one of the documented every-tree writes; any
other is a statement a distribution by root id would have to send to two shards.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

import psycopg

from tests.processes.test_lock_wait import send
from tests.processes.test_multiprocess import PATIENCE, start, wait_for
from tests.processes.test_tree_locks import operator

# table -> the column naming the session a row belongs to (its tree is that session's)
TREE_TABLES = {
    "sessions": "id",
    "descriptors": "session_id",
    "events": "session_id",
    "inbox": "session_id",
    "leases": "session_id",
    "signals": "session_id",
    "spending": "session_id",
    "idempotency": "caller",
    "tasks": "agent_id",
}

AUDIT = """
CREATE TABLE tree_audit (pid INT, at TIMESTAMPTZ, query TEXT, tbl TEXT, op TEXT, sid TEXT);
CREATE FUNCTION tree_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r JSONB := CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END;
BEGIN
    INSERT INTO tree_audit VALUES (pg_backend_pid(), statement_timestamp(), current_query(),
        TG_TABLE_NAME, TG_OP, r ->> TG_ARGV[0]);
    RETURN NULL;
END $$;
"""

# The writes keyed by owner, not tree (docs/architecture.md, "Sharding by root id", lists them
# in these words): a round trip writing two trees' rows must start with one of these
CROSS_TREE = (
    "DELETE FROM leases WHERE owner",  # a fenced owner's, or this process's at close
    "DELETE FROM signals WHERE owner",  # taken by their owner, or a fenced owner's
)


def tree_of(session_id: str | None) -> str:
    """This workload's session ids are `<root>` or `<root>-<child>`."""
    return (session_id or "?").split("-")[0]


def test_no_round_trip_writes_two_trees_unless_it_is_a_documented_every_tree_write(
    pg_stores, spawn_process
):
    db = pg_stores.url()
    with psycopg.connect(db, autocommit=True) as pg:
        pg.execute(AUDIT)
        for table, column in TREE_TABLES.items():
            pg.execute(
                f"CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {table}"
                f" FOR EACH ROW EXECUTE FUNCTION tree_audit('{column}')"
            )
    first = start(spawn_process, db)
    host = first.host
    for root in ("t0", "t1"):
        host.open(root)
        turn = host.spawn(root, f"{root}-a")["turn_id"]
        host.end_turn(f"{root}-a", turn, "completed", "settled")  # settle
        host.call("send_message", send(root, f"{root}-a", "more"))  # send
        started = host.notification("turn/start", PATIENCE, agent_id=f"{root}-a")
        host.call("report", {"caller": f"{root}-a", "output": "halfway"})  # report
        host.call("interrupt_agent", {"caller": root, "agent_id": f"{root}-a"})  # interrupt
        host.notification("turn/interrupt", PATIENCE, agent_id=f"{root}-a")
        host.end_turn(f"{root}-a", started["turn_id"], "aborted")
        host.call("list_agents", {"caller": root})  # list
        host.spawn(root, f"{root}-b")  # left running: the crash ends it
    first.proc.send_signal(signal.SIGKILL)
    first.wait(PATIENCE)
    second = start(spawn_process, db)  # crash recovery of both trees
    wait_for(
        lambda: second.host.call("agents/get", {"agent_id": "t1-b"})["status"] != "running",
        "the crashed turns end",
    )
    assert second.stop() == 0
    with psycopg.connect(db, autocommit=True) as pg:  # both trees long settled (not recorded)
        pg.execute("SET session_replication_role = replica")
        pg.execute("UPDATE events SET at = '2020-01-01T00:00:00.000000Z'")
        pg.execute("UPDATE sessions SET created_at = '2020-01-01T00:00:00.000000Z'")
        pg.execute("UPDATE inbox SET state = 'cancelled' WHERE state IN ('queued', 'parked')")
        pg.execute("UPDATE inbox SET created_at = '2020-01-01T00:00:00.000000Z'")
        assert pg.execute("SELECT count(*) FROM leases").fetchone() == (0,)
    pruned = operator("prune", "--older-than", "1d", "--db", db)
    assert pruned.startswith("pruned 2 settled tree(s)"), pruned
    with psycopg.connect(db, autocommit=True) as pg:
        rows = pg.execute("SELECT pid, at, query, tbl, op, sid FROM tree_audit").fetchall()
    trees: dict[tuple, set[str]] = defaultdict(set)
    for pid, at, query, _table, _op, sid in rows:
        trees[(pid, at, query)].add(tree_of(sid))
    assert {tree for touched in trees.values() for tree in touched} == {"t0", "t1"}
    across = sorted(
        query
        for (_pid, _at, query), touched in trees.items()
        if len(touched) > 1 and not query.lstrip().startswith(CROSS_TREE)
    )
    assert across == [], across
    documented = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert all(f"`{statement} = ?`" in documented for statement in CROSS_TREE)
