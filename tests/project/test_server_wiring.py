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


def test_the_method_table_is_built_by_one_function_and_declaring_registers_nothing():
    """No module fills or patches a table as it is imported: server/handlers.py build_methods
    builds it from the declarations, and the table is passed in (Connection, Dispatcher)."""
    from subagentd.server.handlers import METHODS, build_methods
    from subagentd.wire.methods import method

    filled = [
        f"{name}:{node.lineno}"
        for name, tree in sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and target.value.id == "METHODS"
    ]
    assert filled == []
    assert not [name for name in sources() if "noqa: E402" in (PACKAGE / name).read_text()]
    before = build_methods()

    @method("declared/nowhere", None, None)
    def declared_here(call, params):  # declared in a module no table is built from
        return None

    assert list(build_methods()) == list(before) == list(METHODS)  # the same methods, in order
    assert list(METHODS)[:4] == [
        "initialize",
        "notifications/initialized",
        "server/discover",
        "ping",
    ]


def test_one_wait_then_retry_for_another_process_lock():
    """Work another process's write lock refuses waits in the lock queue and retries through
    wire/lockwait.py run_when_locked only: nobody else sleeps BUSY_RETRY or loops on run_work."""
    retrying = [
        f"{name}:{node.lineno}"
        for name, tree in sources().items()
        if name != "wire/lockwait.py"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "BUSY_RETRY")
        or (isinstance(node, ast.While) and calls_to(ast.Module([node.test], []), "run_work"))
    ]
    assert retrying == []


# Refusal texts still said in two places, in areas other work owns now (storage's open errors,
# MCP tasks); no other text may join them.
SAID_TWICE = {
    "invalid _meta: {}",
    "Method not found",
    "database {} was written by a newer subagentd: unknown migration {}",
    "database {} cannot be opened: {}",
    "no database file at {}",
    "{} is not a subagentd database ({})",
    "invalid params: {}",
}


def test_each_refusal_text_is_written_once():
    """The message of every error raised (`...Error(text)`) is written in one place."""
    where: dict[str, list[str]] = {}
    for name, tree in sources().items():
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id.endswith("Error")
                and node.args
            ):
                continue
            text = node.args[0]
            if isinstance(text, ast.Constant) and isinstance(text.value, str):
                said = text.value
            elif isinstance(text, ast.JoinedStr):
                said = "".join(
                    part.value if isinstance(part, ast.Constant) else "{}" for part in text.values
                )
            else:
                continue
            if len(said) > 12:
                where.setdefault(said, []).append(f"{name}:{node.lineno}")
    twice = {said for said, places in where.items() if len(places) > 1}
    assert twice <= SAID_TWICE, {said: where[said] for said in twice - SAID_TWICE}
