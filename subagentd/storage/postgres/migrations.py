"""The PostgreSQL schema: its own append-only migrations, the SQLite schema's tables as they stand.

Applied at start, in one transaction under an advisory lock (processes starting together take
turns; the later ones find nothing to do), recorded in `subagentd_migrations`. Column types keep
the SQLite ones' meaning: flags stay integers, times are text stamps or double-precision seconds,
tree paths are bytea and sibling order's columns collate "C" (bytewise, as SQLite compares), and
so does every column holding a session id (p003): a join `x.session_id = sessions.id` across two
collations cannot use x's index, so each row of a listing cost a scan of `descriptors`.
"""

from __future__ import annotations

from psycopg import Connection

from subagentd.storage.migrations import ROOTED_TABLES, ROOTS_CTE, TRACE_ROOTS

MIGRATIONS_TABLE = "subagentd_migrations"
MIGRATION_LOCK = 0x5342_4144_4D49  # advisory lock key for migrations ("SBADMI")

_MODE_TRIGGERS = """
CREATE FUNCTION subagentd_descriptor_clears_mode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sessions SET mode = NULL
    WHERE id = CASE WHEN TG_OP = 'INSERT' THEN NEW.session_id ELSE OLD.session_id END;
    RETURN NULL;
END $$;
CREATE TRIGGER descriptors_clear_mode AFTER INSERT OR UPDATE OR DELETE ON descriptors
    FOR EACH ROW EXECUTE FUNCTION subagentd_descriptor_clears_mode();
CREATE FUNCTION subagentd_session_clears_mode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.mode := NULL;
    RETURN NEW;
END $$;
CREATE TRIGGER sessions_update_clears_mode BEFORE UPDATE OF id, label, kind ON sessions
    FOR EACH ROW WHEN (NEW.mode IS NOT NULL) EXECUTE FUNCTION subagentd_session_clears_mode();
"""

# (name, statements): names are the SQLite migrations' whose tables they create, as of m009
MIGRATIONS: list[tuple[str, str]] = [
    (
        "p001_tables",
        """
CREATE TABLE sessions (
    id TEXT COLLATE "C" PRIMARY KEY,
    parent_id TEXT COLLATE "C",
    kind TEXT NOT NULL,
    label TEXT,
    created_at TEXT COLLATE "C" NOT NULL,
    depth INTEGER NOT NULL,
    parked INTEGER NOT NULL DEFAULT 0,
    open_turn_id TEXT,
    last_reason TEXT,
    last_output TEXT,
    path BYTEA,
    mode TEXT
);
CREATE INDEX sessions_by_parent ON sessions (parent_id, created_at, id);
CREATE INDEX sessions_open_turn ON sessions (open_turn_id) WHERE open_turn_id IS NOT NULL;
CREATE INDEX sessions_by_path ON sessions (path) WHERE path IS NOT NULL;
CREATE INDEX sessions_without_path ON sessions (id) WHERE path IS NULL;
CREATE TABLE descriptors (session_id TEXT PRIMARY KEY, body TEXT);
CREATE TABLE events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL,
    turn_id TEXT,
    type TEXT NOT NULL,
    data TEXT,
    at TEXT NOT NULL
);
CREATE INDEX events_by_session ON events (session_id, seq);
CREATE TABLE inbox (
    position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    content TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    turn_id TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX inbox_by_session ON inbox (session_id, state, position);
CREATE TABLE idempotency (
    caller TEXT NOT NULL,
    key TEXT NOT NULL,
    method TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (caller, key)
);
CREATE TABLE owners (
    owner TEXT PRIMARY KEY,
    expires_at DOUBLE PRECISION NOT NULL,
    fenced INTEGER NOT NULL DEFAULT 0,
    wake TEXT
);
CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    activation_id TEXT,
    ancestry TEXT,
    kind TEXT,
    interrupted INTEGER NOT NULL DEFAULT 0,
    disposing INTEGER NOT NULL DEFAULT 0,
    resume INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX leases_by_owner ON leases (owner);
CREATE TABLE signals (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    by TEXT
);
CREATE INDEX signals_by_owner ON signals (owner, seq);
"""
        + _MODE_TRIGGERS,
    ),
    (  # m010: parked messages by session (listings show them)
        "p002_parked_index",
        "CREATE INDEX inbox_parked ON inbox (session_id) WHERE state = 'parked';",
    ),
    (  # no SQLite counterpart: every column holding a session id compares as sessions.id does
        "p003_session_ids_collate_c",
        """
ALTER TABLE descriptors ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE events ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE inbox ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE leases ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE signals ALTER COLUMN session_id TYPE TEXT COLLATE "C";
""",
    ),
    (  # m011: the trace context of messages, sessions and turns (storage/traces.py)
        "p004_trace_context",
        'CREATE TABLE trace_context (key TEXT COLLATE "C" PRIMARY KEY,'
        " traceparent TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);",
    ),
    (  # m012_spending_and_budgets' table
        "p005_spending_and_budgets",
        """
CREATE TABLE spending (
    session_id TEXT COLLATE "C" PRIMARY KEY,
    limits_set INTEGER NOT NULL DEFAULT 0,
    max_turns BIGINT,
    max_spawns BIGINT,
    max_tokens BIGINT,
    max_cost BIGINT,
    deadline DOUBLE PRECISION,
    stopped INTEGER NOT NULL DEFAULT 0,
    own_turns BIGINT NOT NULL DEFAULT 0,
    own_spawns BIGINT NOT NULL DEFAULT 0,
    own_input BIGINT NOT NULL DEFAULT 0,
    own_output BIGINT NOT NULL DEFAULT 0,
    own_cost BIGINT NOT NULL DEFAULT 0,
    tree_turns BIGINT NOT NULL DEFAULT 0,
    tree_spawns BIGINT NOT NULL DEFAULT 0,
    tree_input BIGINT NOT NULL DEFAULT 0,
    tree_output BIGINT NOT NULL DEFAULT 0,
    tree_cost BIGINT NOT NULL DEFAULT 0,
    close_policy TEXT
);
""",
    ),
    (  # m013_mcp_tasks' table
        "p006_mcp_tasks",
        """
CREATE TABLE tasks (
    task_id TEXT COLLATE "C" PRIMARY KEY,
    owner_id TEXT COLLATE "C" NOT NULL,
    agent_id TEXT COLLATE "C" NOT NULL,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT,
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT NOT NULL,
    ttl_ms BIGINT,
    poll_ms BIGINT,
    expires_at DOUBLE PRECISION,
    output TEXT NOT NULL,
    result TEXT,
    progress_token TEXT
);
CREATE INDEX tasks_by_owner ON tasks (owner_id, created_at, task_id);
CREATE INDEX tasks_working ON tasks (agent_id) WHERE status = 'working';
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
""",
    ),
]


def _root_ids() -> str:
    """m014_root_ids: every table a tree's rows live in carries its tree's root id, backfilled
    from the session lineage as on SQLite."""
    statements = [
        'ALTER TABLE sessions ADD COLUMN root_id TEXT COLLATE "C";',
        ROOTS_CTE
        + " UPDATE sessions SET root_id = tree.root FROM tree WHERE tree.id = sessions.id;",
        "UPDATE sessions SET root_id = id WHERE root_id IS NULL;",
        "CREATE INDEX sessions_by_root ON sessions (root_id, path);",
    ]
    for table, column in ROOTED_TABLES:
        statements += [
            f'ALTER TABLE {table} ADD COLUMN root_id TEXT COLLATE "C";',
            f"UPDATE {table} SET root_id = s.root_id FROM sessions s WHERE s.id = {table}.{column};",
        ]
    statements += [
        "UPDATE idempotency SET root_id = '' WHERE caller = '';",
        'ALTER TABLE trace_context ADD COLUMN root_id TEXT COLLATE "C";',
        "CREATE TEMP TABLE turns ON COMMIT DROP AS SELECT DISTINCT turn_id, session_id"
        " FROM events WHERE turn_id IS NOT NULL;",
        "CREATE INDEX ON turns (turn_id);",
        TRACE_ROOTS + ";",
    ]
    return "\n".join(statements)


MIGRATIONS.append(("p007_root_ids", _root_ids()))
NAMES = [name for name, _ in MIGRATIONS]


def applied(conn: Connection[tuple[object, ...]]) -> set[str]:
    """The migrations recorded in this database (none when it is new)."""
    if conn.execute("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,)).fetchone() == (None,):
        return set()
    return {str(name) for (name,) in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}


def migrate(conn: Connection[tuple[object, ...]]) -> set[str]:
    """Apply the pending migrations as one transaction under the migration lock; the names
    recorded before (a name this build does not know: the caller refuses the database)."""
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = 0")  # a migration of a big table is long
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = applied(conn)
        if done - set(NAMES):
            return done
        for name, statements in MIGRATIONS:
            if name not in done:
                conn.execute(statements.encode())  # several statements: no parameters
                conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name) VALUES (%s)", (name,))
    return done
