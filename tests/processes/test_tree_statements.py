"""Which statements touch two trees' rows (docs/architecture.md, "Sharding by root id").

A representative workload on PostgreSQL (spawn, send, interrupt, list, report, settle, a kill -9
and the next process's crash recovery, prune) runs on two trees at once through real processes.
The server logs every statement the processes send (`log_statement = all` on their database):
each that reads or writes a table a tree's rows live in must name its tree (`root_id = $n`, or
an insert's root_id value), or be one of the every-tree statements the documentation lists; row
triggers on those tables record each written row's session and root id with the round trip that
wrote it (`pg_backend_pid()`, `statement_timestamp()`, `current_query()`): every row's root id is
its session's tree, and a round trip that wrote rows of two trees must be a listed one too.
"""

from __future__ import annotations

import re
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
    "tasks": "owner_id",
}

AUDIT = """
CREATE TABLE tree_audit (pid INT, at TIMESTAMPTZ, query TEXT, tbl TEXT, op TEXT, sid TEXT,
    root TEXT);
CREATE FUNCTION tree_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r JSONB := CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END;
BEGIN
    INSERT INTO tree_audit VALUES (pg_backend_pid(), statement_timestamp(), current_query(),
        TG_TABLE_NAME, TG_OP, r ->> TG_ARGV[0], r ->> 'root_id');
    RETURN NULL;
END $$;
"""

ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"
TABLE = re.compile(
    r"\b(?:FROM|INTO|UPDATE|JOIN)\s+(" + "|".join([*TREE_TABLES, "trace_context"]) + r")\b"
)
ENTRY = re.compile(
    r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[(\d+)\] (\w+):  (.*)$"
)  # log_line_prefix '%m [%p] ', PostgreSQL's default


def every_tree_statements() -> dict[str, re.Pattern[str]]:
    """The statements docs/architecture.md lists as naming no tree (each sent to every node by
    a distribution), in its words (`…` standing for the rest): the backticked texts before the
    colon of each item of the list under "Every-tree statements"."""
    text = ARCHITECTURE.read_text()
    listed = text[text.index("Every-tree statements") :].split("\n\n")[1]
    return {
        statement: re.compile(".*".join(map(re.escape, statement.split("…"))))
        for item in re.findall(r"^- (.*?`): ", listed, re.M)
        for statement in re.findall(r"`([^`]+)`", item)
    }


def logged_statements(log: Path, start: int) -> list[str]:
    """Every statement the server logged after `start` (bytes into its log), one line each,
    `$n` parameters as `?` (the tables' own SQL)."""
    entries: list[list[str]] = []
    current: list[str] | None = None
    for line in log.read_bytes()[start:].decode(errors="replace").split("\n"):
        if line.startswith("\t") and current is not None:  # a statement's next line
            current.append(line)
            continue
        found = ENTRY.match(line)
        head = re.match(r"(statement|execute [^:]+): ", found.group(3)) if found else None
        current = None
        if found is not None and found.group(2) == "LOG" and head is not None:
            current = [found.group(3)[head.end() :]]
            entries.append(current)
    return [re.sub(r"\$\d+", "?", " ".join(" ".join(entry).split())) for entry in entries]


def names_its_tree(statement: str) -> bool:
    """A statement that reads or updates rows by `root_id = ?` (first among its conditions),
    or inserts with a root id given as a value (not read from the session's row)."""
    if re.search(r"\broot_id = \?", statement):
        return True
    return statement.startswith(("INSERT", "WITH s AS (INSERT")) and (
        "(root_id," in statement and "SELECT root_id FROM sessions" not in statement
    )


def tree_of(session_id: str | None) -> str:
    """This workload's session ids are `<root>` or `<root>-<child>`."""
    return (session_id or "?").split("-")[0]


def test_every_statement_names_its_tree_unless_it_is_a_documented_every_tree_statement(
    pg_stores, spawn_process
):
    db = pg_stores.url()
    log = pg_stores.server.root / "log"
    every_tree = every_tree_statements()

    def listed(statement: str) -> bool:
        return any(pattern.fullmatch(statement) for pattern in every_tree.values())

    with psycopg.connect(db, autocommit=True) as pg:
        pg.execute(AUDIT)
        name = pg.execute("SELECT current_database()").fetchone()[0]
        for table, column in TREE_TABLES.items():
            pg.execute(
                f"CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {table}"
                f" FOR EACH ROW EXECUTE FUNCTION tree_audit('{column}')"
            )
        pg.execute(f"ALTER DATABASE {name} SET log_statement = 'all'")  # sessions from now on
    start_of_log = log.stat().st_size
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
        pg.execute("SET log_statement = 'none'")
        pg.execute("SET session_replication_role = replica")
        pg.execute("UPDATE events SET at = '2020-01-01T00:00:00.000000Z'")
        pg.execute("UPDATE sessions SET created_at = '2020-01-01T00:00:00.000000Z'")
        pg.execute("UPDATE inbox SET state = 'cancelled' WHERE state IN ('queued', 'parked')")
        pg.execute("UPDATE inbox SET created_at = '2020-01-01T00:00:00.000000Z'")
        assert pg.execute("SELECT count(*) FROM leases").fetchone() == (0,)
    pruned = operator("prune", "--older-than", "1d", "--db", db)
    assert pruned.startswith("pruned 2 settled tree(s)"), pruned
    with psycopg.connect(db, autocommit=True) as pg:
        pg.execute("SET log_statement = 'none'")
        pg.execute(f"ALTER DATABASE {name} RESET log_statement")
        rows = pg.execute("SELECT pid, at, query, tbl, op, sid, root FROM tree_audit").fetchall()
    statements = logged_statements(log, start_of_log)
    tree_statements = {statement for statement in statements if TABLE.search(statement)}
    # the workload's statements were all seen: spawns, sends, a listing's, recovery's, prune's
    for seen in (
        "INSERT INTO sessions",
        "INSERT INTO inbox",
        "DELETE FROM events",
        "DELETE FROM leases WHERE owner = ?",
        "WITH RECURSIVE tree(id, root) AS",
    ):
        assert any(statement.startswith(seen) for statement in tree_statements), seen
    unnamed = sorted(
        statement
        for statement in tree_statements
        if not names_its_tree(statement) and not listed(statement)
    )
    assert unnamed == [], "\n".join(unnamed)
    # every written row's root id is its session's tree (the host's keys: the tree "")
    wrong = {(table, sid, root) for _, _, _, table, op, sid, root in rows if op != "DELETE"}
    assert {
        entry for entry in wrong if entry[2] != ("" if entry[1] == "" else tree_of(entry[1]))
    } == set()
    trees: dict[tuple, set[str]] = defaultdict(set)
    for pid, at, query, _table, _op, sid, _root in rows:
        trees[(pid, at, query)].add(tree_of(sid))
    assert {tree for touched in trees.values() for tree in touched} == {"t0", "t1"}
    across = sorted(
        query
        for (_pid, _at, query), touched in trees.items()
        if len(touched) > 1 and not listed(re.sub(r"\$\d+", "?", " ".join(query.split())))
    )
    assert across == [], across
