"""The schema, created and upgraded only through sqlite-utils Migrations (append-only).

Longer than ~300 lines on purpose: the migrations are append-only, each in the order it is
applied; split, a database's history would no longer read in one file.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from subagentd.storage.paths import backfill

if TYPE_CHECKING:
    from sqlite_utils import Database

Step = Callable[["Database"], None]

# sqlite-utils imports these when installed, for column types no migration uses; numpy alone holds
# ~14 MiB of RSS for the life of the server (the `bench` extra installs it, through matplotlib)
UNUSED_BY_SQLITE_UTILS = ("numpy", "pandas")


def sqlite_utils_database(conn: sqlite3.Connection) -> Database:
    """`conn` as a sqlite-utils Database, with sqlite-utils imported as if numpy and pandas were
    not installed (an import of a module whose sys.modules entry is None raises ImportError,
    which sqlite-utils takes as "not installed"); they stay importable afterwards."""
    hidden = [name for name in UNUSED_BY_SQLITE_UTILS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        from sqlite_utils import Database
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return Database(conn, execute_plugins=False)


class MigrationSet:
    """The migrations in order, registered like sqlite-utils `Migrations` and applied through one;
    their names are known without importing sqlite-utils (start-up checks them before the
    handshake is answered, and sqlite-utils takes ~150 ms to import)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._steps: list[tuple[str, Step]] = []

    def __call__(self, *, name: str | None = None) -> Callable[[Step], Step]:
        def register(step: Step) -> Step:
            self._steps.append((name or step.__name__, step))
            return step

        return register

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._steps]

    def apply(self, db: Database, *, stop_before: str | None = None) -> None:
        """Apply the pending ones, each recorded in `_sqlite_migrations` as sqlite-utils does.

        The caller holds the write lock (storage/database.py), so every step runs inside that one
        transaction: a step that cannot (VACUUM) does not belong here.
        """
        from sqlite_utils.migrations import Migrations

        applier = Migrations(self.name)
        for name, step in self._steps:
            applier(name=name)(step)
        applier.apply(db, stop_before=stop_before)


migrations = MigrationSet("subagentd")


@migrations()
def m001_core_tables(db: Database) -> None:
    """Sessions, descriptors, the event log, inbox rows and idempotency keys."""
    for statement in (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            kind TEXT NOT NULL,
            label TEXT,
            created_at TEXT NOT NULL,
            depth INTEGER NOT NULL,
            parked INTEGER NOT NULL DEFAULT 0,
            open_turn_id TEXT,
            last_reason TEXT,
            last_output TEXT
        )""",
        "CREATE INDEX sessions_by_parent ON sessions (parent_id, created_at, id)",
        "CREATE INDEX sessions_open_turn ON sessions (open_turn_id) WHERE open_turn_id IS NOT NULL",
        "CREATE TABLE descriptors (session_id TEXT PRIMARY KEY, body)",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            turn_id TEXT,
            type TEXT NOT NULL,
            data TEXT,
            at TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_session ON events (session_id, seq)",
        """CREATE TABLE inbox (
            position INTEGER PRIMARY KEY AUTOINCREMENT,
            message_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            content TEXT NOT NULL,
            source TEXT NOT NULL,
            state TEXT NOT NULL,
            turn_id TEXT,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX inbox_by_session ON inbox (session_id, state, position)",
        """CREATE TABLE idempotency (
            caller TEXT NOT NULL,
            key TEXT NOT NULL,
            method TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (caller, key)
        )""",
    ):
        db.execute(statement)


@migrations()
def m002_leases(db: Database) -> None:
    """Which process holds each live session, so several processes can share one database."""
    db.execute(
        """CREATE TABLE leases (
            session_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            status TEXT NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX leases_by_owner ON leases (owner)")


@migrations()
def m003_tree_paths(db: Database) -> None:
    """A materialized, sortable path per session (storage/paths.py): a subtree is one range scan.

    Existing rows get their paths here, once; a session without one (NULL) sends listings that
    reach it back to the level-by-level walk, found through its own small partial index.
    """
    db.execute("ALTER TABLE sessions ADD COLUMN path BLOB")
    rows = db.execute("SELECT id, parent_id, created_at FROM sessions").fetchall()
    db.conn.executemany(
        "UPDATE sessions SET path = ? WHERE id = ?",
        [(path, session_id) for session_id, path in backfill(rows).items()],
    )
    db.execute("CREATE INDEX sessions_by_path ON sessions (path) WHERE path IS NOT NULL")
    db.execute("CREATE INDEX sessions_without_path ON sessions (id) WHERE path IS NULL")


@migrations()
def m004_listed_mode(db: Database) -> None:
    """The mode of a child's descriptor, recorded by the writer that built and checked it, so a
    listing need not read and decode every descriptor.

    Any later change to the descriptor row (or to the session's label or kind), by any connection,
    clears it again through these triggers; a session without one (NULL: written by an older
    version or by hand, or changed since) is listed from its descriptor, read and checked.
    """
    db.execute("ALTER TABLE sessions ADD COLUMN mode TEXT")
    for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
        db.execute(
            f"""CREATE TRIGGER descriptors_{event.lower()}_clears_mode AFTER {event} ON descriptors
            BEGIN UPDATE sessions SET mode = NULL WHERE id = {row}.session_id; END"""
        )
    db.execute(
        """CREATE TRIGGER sessions_update_clears_mode AFTER UPDATE OF id, label, kind ON sessions
        WHEN NEW.mode IS NOT NULL BEGIN UPDATE sessions SET mode = NULL WHERE id = NEW.id; END"""
    )


@migrations()
def m005_live_state(db: Database) -> None:
    """What a live agent of the owning process is beyond its session row (activation, ancestry,
    kind, whether its open turn was interrupted, disposing, cold resume), written in the same
    transaction as each change, so the live registry can be rebuilt from storage after a lost
    commit group (a row of an older version has NULLs: it is never rebuilt, only its own process
    reads it)."""
    for column in (
        "activation_id TEXT",
        "ancestry TEXT",
        "kind TEXT",
        "interrupted INTEGER NOT NULL DEFAULT 0",
        "disposing INTEGER NOT NULL DEFAULT 0",
        "resume INTEGER NOT NULL DEFAULT 0",
    ):
        db.execute(f"ALTER TABLE leases ADD COLUMN {column}")


@migrations()
def m006_lease_owners(db: Database) -> None:
    """One row per process sharing the database (storage/leases.py): its leases last as long as
    its row does, unexpired and not fenced.

    The row's expiry is renewed at commit time and by a thread of the owner's own, so a process
    busy in a long group commit keeps its leases; a process that takes over an expired owner's
    sessions marks the row fenced in the same write transaction, and the owner, checking its row
    at the start of its next write transaction, lets them go. `leases.expires_at` is no longer
    read: a lease is valid while its owner's row is.
    """
    db.execute(
        """CREATE TABLE owners (
            owner TEXT PRIMARY KEY,
            expires_at REAL NOT NULL,
            fenced INTEGER NOT NULL DEFAULT 0
        )"""
    )


@migrations()
def m007_host_idempotency(db: Database) -> None:
    """agents/followup keys move from the caller "@host" to "", so an agent named "@host" (ids can
    no longer start with @, but older ones may) shares no idempotency namespace with the host.

    A followup key is only ever written by the host, so rows of that method are the host's."""
    db.execute(
        "UPDATE idempotency SET caller = '' WHERE caller = '@host' AND method = 'agents/followup'"
    )


@migrations()
def m009_cross_process_signals(db: Database) -> None:
    """Inputs for a session another process holds live (storage/signals.py): the sender's write
    transaction queues the input as usual and adds a `signals` row for the owner, then rings the
    owner's doorbell (`owners.wake`, an address on this host) after the commit; the owner takes
    its rows and acts on them. The rows are the truth: a lost ring only delays the pickup to the
    owner's next heartbeat."""
    db.execute("ALTER TABLE owners ADD COLUMN wake TEXT")
    db.execute(
        """CREATE TABLE signals (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            owner TEXT NOT NULL,
            session_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            by TEXT
        )"""
    )
    db.execute("CREATE INDEX signals_by_owner ON signals (owner, seq)")


@migrations()
def m010_parked_index(db: Database) -> None:
    """Parked messages by session, so a listing shows `[idle, 2 parked]` without scanning the
    inbox (only sessions holding parked messages are in this partial index)."""
    db.execute("CREATE INDEX inbox_parked ON inbox (session_id) WHERE state = 'parked'")


@migrations()
def m011_trace_context(db: Database) -> None:
    """The trace context kept with messages, sessions and turns while OpenTelemetry tracing is on
    (storage/traces.py): keys `m:`, `s:`, `t:` and the id."""
    db.execute(
        "CREATE TABLE trace_context (key TEXT PRIMARY KEY, traceparent TEXT NOT NULL,"
        " at REAL NOT NULL)"
    )


SPENDING_TABLE = """CREATE TABLE spending (
    session_id TEXT PRIMARY KEY,
    limits_set INTEGER NOT NULL DEFAULT 0,
    max_turns INTEGER,
    max_spawns INTEGER,
    max_tokens INTEGER,
    max_cost INTEGER,
    deadline REAL,
    stopped INTEGER NOT NULL DEFAULT 0,
    own_turns INTEGER NOT NULL DEFAULT 0,
    own_spawns INTEGER NOT NULL DEFAULT 0,
    own_input INTEGER NOT NULL DEFAULT 0,
    own_output INTEGER NOT NULL DEFAULT 0,
    own_cost INTEGER NOT NULL DEFAULT 0,
    tree_turns INTEGER NOT NULL DEFAULT 0,
    tree_spawns INTEGER NOT NULL DEFAULT 0,
    tree_input INTEGER NOT NULL DEFAULT 0,
    tree_output INTEGER NOT NULL DEFAULT 0,
    tree_cost INTEGER NOT NULL DEFAULT 0,
    close_policy TEXT
)"""


@migrations()
def m012_spending_and_budgets(db: Database) -> None:
    """Usage and budgets (storage/spending.py): per session its own turns, spawns, tokens and
    cost (millionths of the currency), the same summed over its subtree (charged to every
    ancestor in the spending request's transaction), its budget's limits and deadline, whether
    agents/stop holds its subtree, and what a close of its root does to it (`close_policy`)."""
    db.execute(SPENDING_TABLE)


TASKS_TABLE = """CREATE TABLE tasks (
    task_id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    ttl_ms INTEGER,
    poll_ms INTEGER,
    expires_at REAL,
    output TEXT NOT NULL,
    result TEXT,
    progress_token TEXT
)"""
TASKS_INDEXES = (
    "CREATE INDEX tasks_by_owner ON tasks (owner_id, created_at, task_id)",
    "CREATE INDEX tasks_working ON tasks (agent_id) WHERE status = 'working'",
    "CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL",
)


@migrations()
def m013_mcp_tasks(db: Database) -> None:
    """MCP tasks (storage/tasks.py): one row per task-augmented delegation, created in the
    spawn's (or send_message's) transaction: who asked (`owner_id`, the calling agent), the
    child it follows, its status and the result once terminal (the CallToolResult as JSON), its
    lifetime (`expires_at`, epoch seconds; null: unlimited) and the client's progress token."""
    db.execute(TASKS_TABLE)
    for index in TASKS_INDEXES:
        db.execute(index)


# The tables a tree's rows live in and how each row names its session (its tree is that
# session's): m014 gives each a root_id, the id of the top session of its tree (storage/roots.py)
ROOTED_TABLES = (
    ("descriptors", "session_id"),
    ("events", "session_id"),
    ("inbox", "session_id"),
    ("leases", "session_id"),
    ("signals", "session_id"),
    ("spending", "session_id"),
    ("idempotency", "caller"),
    ("tasks", "owner_id"),
)
# every session with the top of its tree: a session whose parent is missing tops a tree of its own
ROOTS_CTE = """WITH RECURSIVE tree(id, root) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
        OR parent_id NOT IN (SELECT id FROM sessions)
    UNION SELECT s.id, t.root FROM sessions s JOIN tree t ON s.parent_id = t.id
)"""
# a trace context's tree: its session's ("s:"), its message's ("m:") or its turn's ("t:")
TRACE_ROOTS = """UPDATE trace_context SET root_id = coalesce(
    (SELECT root_id FROM sessions WHERE id = substr(trace_context.key, 3)
        AND trace_context.key LIKE 's:%'),
    (SELECT s.root_id FROM inbox i JOIN sessions s ON s.id = i.session_id
        WHERE i.message_id = substr(trace_context.key, 3) AND trace_context.key LIKE 'm:%'),
    (SELECT s.root_id FROM sessions s WHERE s.open_turn_id = substr(trace_context.key, 3)
        AND trace_context.key LIKE 't:%'),
    (SELECT s.root_id FROM turns t JOIN sessions s ON s.id = t.session_id
        WHERE t.turn_id = substr(trace_context.key, 3) AND trace_context.key LIKE 't:%'))"""


@migrations()
def m014_root_ids(db: Database) -> None:
    """Every table a tree's rows live in carries its tree's root id (`root_id`), so each
    statement of a rule names its tree and a distributed database could place a tree's rows
    together (docs/architecture.md, "Sharding by root id").

    Existing rows get it from the session lineage (a session on a parent cycle, reachable from no
    top, is its own root); the host's idempotency keys (caller "") are the tree "" of their
    own; a trace context whose session, message or turn is gone keeps none (NULL: never read by
    a root). Inserts write it from the lineage this process knows."""
    db.execute("ALTER TABLE sessions ADD COLUMN root_id TEXT")
    db.execute(
        ROOTS_CTE
        + " UPDATE sessions SET root_id = (SELECT root FROM tree WHERE tree.id = sessions.id)"
    )
    db.execute("UPDATE sessions SET root_id = id WHERE root_id IS NULL")
    db.execute("CREATE INDEX sessions_by_root ON sessions (root_id, path)")
    for table, column in ROOTED_TABLES:
        db.execute(f"ALTER TABLE {table} ADD COLUMN root_id TEXT")
        db.execute(
            f"UPDATE {table} SET root_id = (SELECT root_id FROM sessions"
            f" WHERE sessions.id = {table}.{column})"
        )
    db.execute("UPDATE idempotency SET root_id = '' WHERE caller = ''")
    db.execute("ALTER TABLE trace_context ADD COLUMN root_id TEXT")
    db.execute(
        "CREATE TEMP TABLE turns AS SELECT DISTINCT turn_id, session_id FROM events"
        " WHERE turn_id IS NOT NULL"
    )
    db.execute("CREATE INDEX temp.turns_by_id ON turns (turn_id)")
    db.execute(TRACE_ROOTS)
    db.execute("DROP TABLE temp.turns")
