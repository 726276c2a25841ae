"""One port into core (docs/architecture.md "One port into core"): outside core/, the service is
reached only through what `Service` offers (its API objects and its methods), never through its
internals (the live state `agents`, the registry, the store, the scheduler, the leases), and no
field of a core object is assigned from outside. Checked on the source of every package."""

from __future__ import annotations

import ast
from pathlib import Path

import subagentd

PACKAGE = Path(subagentd.__file__).parent

PORT = {
    # the API objects the server calls
    "settings",
    "host",
    "records",
    "tools",
    "delegation",
    "waits",
    "questions",
    "asking",
    "asking_user",
    "tasks",
    "recovery",
    "settlement",
    "budgets",
    # its methods and bound reads (core/service.py)
    "transaction",
    "commit",
    "idempotent",
    "stats",
    "attach",
    "below",
    "record",
    "check_database_quota",
    "take_signals",
    "owner_elsewhere",
    "begin_snapshot",
    "end_snapshot",
    "stored_session",
    "stored_descriptor",
    "reach_person_with",
    "per_tree",
    "set_scope",
    "timers",
    "tracing",
    "trace_with",
    "close",
    "emit",
    "watch",
    "tree_of",
    "open_turn",
    "activation_of",
    "in_subtree",
    "last_report",
}
INTERNALS = {"registry", "scheduler", "leases", "watched", "in_snapshot"}


def _is_service(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in {"service", "svc"}) or (
        isinstance(node, ast.Attribute) and node.attr == "service"
    )


def reaches() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name.startswith("core/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _is_service(node.value):
                if node.attr not in PORT:
                    found.append(f"{name}:{node.lineno} service.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in INTERNALS:
                found.append(f"{name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and _is_service(target.value):
                        found.append(f"{name}:{node.lineno} assigns service.{target.attr}")
    return found


def test_nothing_outside_core_reaches_past_the_service_port():
    assert reaches() == []


def test_the_port_names_only_what_service_has():
    from subagentd.core.service import Service
    from subagentd.storage.database import SqliteStore

    service = Service(SqliteStore(":memory:"))
    assert {name for name in PORT if not hasattr(service, name)} == set()
