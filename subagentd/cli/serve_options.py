"""`ServeOptions`: the serve options as the wiring reads them, one typed key per option of the
table (table.py: `SERVE`, `GLOBAL`; tests/project/test_serve_options.py checks that each key
and its type follow its `Spec`: a choice is its Literal, a duration a float, a default of None
makes it optional), and the keys the --detach background process adds. Imported for typing
only: at run time the options are the plain dict click or the fast path (fastpath.py) built.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from subagentd.runners.detached import Background


class ServeOptions(TypedDict):
    # SERVE (table.py)
    framing: Literal["auto", "ndjson", "lsp"]
    max_frame_bytes: int
    event_loop: Literal["asyncio", "uvloop", "trio"]
    durability: Literal["normal", "full"]
    report_delivery: Literal["wakeup", "quiet"]
    max_depth: int
    interrupt_grace: float
    shutdown_grace: float
    report_rate: int
    idempotency_retention: float
    lease_ttl: float
    lock_wait_ms: int
    db_connect_timeout: float
    db_statement_timeout: float
    db_keepalive: float
    tools: tuple[str, ...] | None
    spawn_tool: Literal["auto", "on", "off"]
    caller: str | None
    runner: str | None
    runner_protocol: Literal["process", "acp"]
    acp_permission: Literal["deny", "allow", "ask-parent"]
    a2a_agent: tuple[tuple[str, str], ...]
    ask_user: Literal["on", "off"]
    question_timeout: float
    acp_permission_timeout: float | None
    max_running: int
    max_children: int
    max_live_per_root: int
    max_live: int
    max_queued: int
    max_text_bytes: int
    max_label_bytes: int
    report_budget: int
    max_db_bytes: int
    max_tasks: int
    detach: Literal["off", "on"]
    idle_timeout: float
    report_window: float
    clock: Literal["system", "manual"]
    record: str | None
    tree_max_turns: int
    tree_max_spawns: int
    tree_max_tokens: int
    tree_max_cost: float
    tree_max_seconds: float
    cost_currency: str | None
    retention: float | None
    # GLOBAL (table.py); `db` is always given by then (the default database, else)
    db: str
    log_level: Literal["debug", "info", "warning", "error"]
    log_format: Literal["text", "json"]
    # the fast path's --version, taken out before serving
    version: NotRequired[bool]
    # added by the --detach background process (cli/detached.py)
    detached: NotRequired[Background]
    detached_lock: NotRequired[IO[bytes]]
    detached_files: NotRequired[dict[str, str]]
