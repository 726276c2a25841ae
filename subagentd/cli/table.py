"""The serve options as data (no click): click builds them (options.py), and the start-up fast
path (fastpath.py) reads the common invocations with them without importing click.
The budgets' options are in budget_options.py, each option's shape in spec.py.
"""

from __future__ import annotations

import os

import subagentd
from subagentd.cli.budget_options import BUDGETS
from subagentd.cli.question_options import QUESTIONS
from subagentd.cli.spec import Spec

VERSION = (
    f"subagentd {subagentd.__version__} (protocol {subagentd.PROTOCOL})"  # what --version says
)

MAX_DEPTH_CAP = 64  # a deeper chain costs quadratic storage (each path holds its ancestors')


# (option, default, help) of each quota: SECURITY.md explains them; 0 means no bound.
QUOTAS = (
    ("--max-children", 64, "live children per parent"),
    ("--max-live-per-root", 256, "live agents in one tree"),
    ("--max-live", 10_000, "live agents in this process"),
    ("--max-queued", 1_000, "waiting messages per inbox"),
    ("--max-text-bytes", 256 * 1024, "bytes per message, prompt, report, output or descriptor"),
    ("--max-label-bytes", 1024, "bytes per label"),
    ("--report-budget", 1024 * 1024, "report bytes per child per --report-window"),
    ("--max-db-bytes", 0, "database size past which model-driven writes are refused"),
    ("--max-tasks", 1_000, "working MCP tasks per agent"),
)

SHUTDOWN_GRACE = "seconds to finish in-flight replies at shutdown"
IDLE = "seconds a --detach background process stays with no client and nothing running"
SERVE = (
    Spec(
        "--framing",
        "choice",
        "auto",
        "wire framing; auto detects LSP from a leading Content-Length header",
        choices=("auto", "ndjson", "lsp"),
    ),
    Spec(
        "--max-frame-bytes",
        "int",
        16 * 1024 * 1024,
        "largest accepted frame; longer ones are answered -32600",
        low=1,
    ),
    Spec(
        "--event-loop",
        "choice",
        "asyncio",
        "anyio backend the server runs on; uvloop needs the `fast` extra",
        choices=("asyncio", "uvloop", "trio"),  # wire/loops.py
    ),
    Spec(
        "--durability",
        "choice",
        "normal",
        "normal survives a process crash, full also survives power loss",
        choices=("normal", "full"),
    ),
    Spec(
        "--report-delivery",
        "choice",
        "wakeup",
        "how reports reach a parent: its next turn, or injected quietly",
        choices=("wakeup", "quiet"),
    ),
    Spec(
        "--max-depth",
        "int",
        8,
        f"deepest spawn allowed, 1 to {MAX_DEPTH_CAP}",
        low=1,
        high=MAX_DEPTH_CAP,
    ),
    Spec(
        "--interrupt-grace",
        "duration",
        10.0,
        "seconds before an interrupted turn the host did not end is force-ended",
        low=0,
    ),
    Spec("--shutdown-grace", "duration", 5.0, SHUTDOWN_GRACE, low=0),
    Spec(
        "--report-rate",
        "int",
        0,
        "report wakeups per child per minute; further reports reach"
        " the parent quietly (agent/inject) instead of starting turns; 0 means no bound",
        low=0,
        metavar="N",
    ),
    Spec(
        "--idempotency-retention",
        "duration",
        7.0,
        "days an idempotency key and its result are kept",
        low=0,
        metavar="DAYS",
        bare="d",
    ),
    Spec(
        "--lease-ttl",
        "duration",
        15.0,
        "seconds this process's leases last unless renewed (a"
        " thread renews them every third of it); a process stalled longer loses its live"
        " sessions to another process sharing --db",
        low=0,
        low_open=True,
    ),
    Spec(
        "--lock-wait-ms",
        "int",
        5000,
        "milliseconds a write waits for the write lock of another process sharing --db"
        " (the event loop serving on) before it is refused 1011 busy",
        low=0,
        metavar="MS",
    ),
    Spec(
        "--db-connect-timeout",
        "duration",
        5.0,
        "PostgreSQL: seconds a connection attempt may take (libpq connect_timeout, at least 2)",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--db-statement-timeout",
        "duration",
        10.0,
        "PostgreSQL: seconds a statement may take (statement_timeout, unless the server's is"
        " shorter); one the server does not answer at all is dropped a second later",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--db-keepalive",
        "duration",
        10.0,
        "PostgreSQL over TCP: seconds of silence before keepalive probes (3, a third of it"
        " apart); unacknowledged data fails the connection after twice as long",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--tools",
        "tools",
        None,
        "the tools served to models (tools/list, tools/call),"
        " comma-separated, e.g. send_message,interrupt_agent,report to leave out list_agents",
        metavar="NAMES",
        default_shown="all but spawn_agent",
    ),
    Spec(
        "--spawn-tool",
        "choice",
        "auto",
        "serve the spawn_agent tool too; auto: only when a turn runner is configured",
        choices=("auto", "on", "off"),
    ),
    Spec(
        "--caller",
        "str",
        None,
        "caller of MCP tools/call requests that carry no _meta caller;"
        " opened at start-up with its input held (queued, no turn starts) for the MCP client",
        metavar="AGENT_ID",
    ),
    Spec(
        "--runner",
        "str",
        None,
        "run the turns of the agents below --caller as this command (split as a shell would,"
        " run without a shell): the turn as JSON on its stdin, its stdout the turn's output,"
        " exit 0 completed, else error (PROTOCOL.md section 11)",
        metavar="COMMAND",
    ),
    Spec(
        "--runner-protocol",
        "choice",
        "process",
        "how --runner runs a turn: process, one run of the command per turn; acp, the command"
        " is an ACP agent and each subagent one of its sessions (docs/acp.md)",
        choices=("process", "acp"),
    ),
    Spec(
        "--acp-permission",
        "choice",
        "deny",
        "the answer to an ACP agent's session/request_permission: its allow or its reject"
        " option, or ask-parent: held, the turn running, as a question for the subagent's parent"
        " (docs/acp.md)",
        choices=("deny", "allow", "ask-parent"),
    ),
    Spec(
        "--a2a-agent",
        "agents",
        (),
        "an A2A agent a spawn may name (agent: {a2a: NAME}), run remote children (docs/a2a.md)",
        metavar="NAME=URL",
    ),
    *QUESTIONS,
    Spec(
        "--max-running",
        "int",
        4,
        "--runner processes running at once; further turns wait, first started first run",
        low=1,
        metavar="N",
    ),
    *(Spec(name, "int", default, what, low=0, metavar="N") for name, default, what in QUOTAS),
    Spec(
        "--detach",
        "choice",
        "off",
        "on: --runner's turns run in one background subagentd per database and root, started on"
        " demand, shared by every client process, kept when one closes (PROTOCOL.md section 11)",
        choices=("off", "on"),
    ),
    Spec("--idle-timeout", "duration", 300.0, IDLE, low=0, metavar="SECONDS"),
    Spec(
        "--report-window",
        "duration",
        600.0,
        "length of one --report-budget window",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--clock",
        "choice",
        "system",
        "for tests only: manual stops time-based rules (interrupt grace, lease expiry and"
        " heartbeat, report windows, wait deadlines) until the host calls clock/advance",
        choices=("system", "manual"),
    ),
    Spec(
        "--record",
        "str",
        None,
        "write the session served as a replayable transcript to FILE (every frame in and out,"
        " minted ids and timestamps as placeholders; `subagentd replay FILE` runs it again)",
        metavar="FILE",
    ),
    *BUDGETS,
    Spec(
        "--retention",
        "duration",
        None,
        "at start-up, prune the trees settled and untouched"
        " this long (e.g. 30d), as `subagentd prune --older-than` does",
        default_shown="keep everything",
        low=0,
        bare="",  # a unit is required
    ),
)

GLOBAL = (  # accepted before or after any command
    Spec(
        "--db",
        "str",
        None,
        "SQLite database path, or :memory:, or a PostgreSQL URL (postgresql://USER@HOST:PORT/DBNAME)",
        metavar="PATH",
        default_shown="$XDG_STATE_HOME/subagentd/subagentd.db, else"
        " ~/.local/state/subagentd/subagentd.db",
    ),
    Spec(
        "--log-level",
        "choice",
        "info",
        "stderr log level; debug logs one line per request",
        choices=("debug", "info", "warning", "error"),
    ),
    Spec("--log-format", "choice", "text", "stderr log format", choices=("text", "json")),
)


def env_name(option: str) -> str:
    """The variable that sets an option's default: --max-depth -> SUBAGENTD_MAX_DEPTH."""
    return "SUBAGENTD_" + option[2:].upper().replace("-", "_")


def default_database() -> str:
    """$XDG_STATE_HOME/subagentd/subagentd.db, else ~/.local/state/subagentd/subagentd.db."""
    state = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "subagentd", "subagentd.db")
