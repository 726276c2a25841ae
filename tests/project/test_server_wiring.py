"""How the server wing is put together, checked on the source: one method runner, one tools/call,
one place each request's write transaction opens, and outlets passed to core, not patched in."""

from __future__ import annotations

import ast
from pathlib import Path

import subagentd

PACKAGE = Path(subagentd.__file__).parent


def sources(folder: str = "") -> dict[str, ast.Module]:
    root = PACKAGE / folder
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text())
        for path in sorted(root.rglob("*.py"))
    }


WINGS = ("wire", "mcp", "server", "runners")


def wings() -> dict[str, ast.Module]:
    """The modules of the wire, the MCP surface, the server and the turn runners."""
    return {name: tree for wing in WINGS for name, tree in sources(wing).items()}


def calls_to(tree: ast.Module, attribute: str) -> int:
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attribute
    )


def test_a_write_transaction_is_opened_by_the_method_runner_and_the_scheduled_work_only():
    """A request's writes: wire/call.py run_method; a timer's, the doorbell's, shutdown's
    and a relayed call's: Connection.run_work. No handler opens its own."""
    opened = {name: n for name, tree in wings().items() if (n := calls_to(tree, "transaction"))}
    assert opened == {"wire/call.py": 1, "server/connection.py": 1}


def test_unknown_tool_is_said_in_one_place():
    found = [
        name
        for name, tree in sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("Unknown tool")
    ]
    assert found == ["mcp/tools.py"]


def test_the_relay_runs_tools_through_the_dispatcher_not_the_tool_rules():
    tree = sources("runners")["runners/tool_socket.py"]
    called = {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert "dispatch_one" in called
    assert not {"run_tool", "call_tool_result", "transaction"} & called


def test_no_object_assigns_another_ones_outlets():
    """emit, timers and signal_elsewhere are given at construction or through Service.attach:
    only an object's own methods set its own."""
    patched = [
        f"{name}:{node.lineno}"
        for name, tree in sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and target.attr in {"emit", "timers", "signal_elsewhere"}
        and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    ]
    assert patched == []
