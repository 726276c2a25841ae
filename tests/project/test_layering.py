"""The layering table of ARCHITECTURE.md, checked on the import statements of every module."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import subagentd

PACKAGE = Path(subagentd.__file__).parent
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module an import statement names (including imports inside functions and
    TYPE_CHECKING blocks), with relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            found.add(target)
            if node.module is None or node.level:
                # `from . import x` / `from .pkg import x` may name submodules
                found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def modules(layer: str) -> list[Path]:
    if layer.endswith(".py"):
        return [PACKAGE / layer]
    return sorted((PACKAGE / layer).rglob("*.py"))


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def top(name: str) -> str:
    return name.split(".")[0]


def violations(layer: str, allowed, forbidden=()) -> list[str]:
    bad = []
    for path in modules(layer):
        for name in sorted(imports_of(path)):
            if any(within(name, f) for f in forbidden) or (
                allowed is not None and not allowed(name)
            ):
                bad.append(f"{module_name(path)} imports {name}")
    return bad


def schema_may_import(name: str) -> bool:
    return top(name) in STDLIB or top(name) == "msgspec" or within(name, "subagentd.schema")


def errors_may_import(name: str) -> bool:
    return top(name) in STDLIB or within(name, "subagentd.schema")


def fences_may_import(name: str) -> bool:
    """Python hosts import subagentd.message_fences alone: the standard library only."""
    return top(name) in STDLIB


def terminal_may_import(name: str) -> bool:
    """Escaping for any command that prints model-written text: the standard library only."""
    return top(name) in STDLIB


def inspect_may_import(name: str) -> bool:
    """`subagentd inspect` reads through storage's queries (storage/reader.py) and classifies
    descriptors as core does; it runs no rule and speaks no JSON-RPC."""
    return (
        top(name) in STDLIB
        or within(name, "subagentd.storage.reader")
        or within(name, "subagentd.core.descriptors")
        or within(name, "subagentd.terminal")
    )


def extras_may_import(name: str) -> bool:
    """The optional dependencies and their install hints: the standard library only."""
    return top(name) in STDLIB


def view_may_import(name: str) -> bool:
    """The views (watch, the HTML timeline) read as inspect does, and draw with rich (saying
    how to add the `watch` extra when it is missing)."""
    return (
        inspect_may_import(name)
        or top(name) == "rich"
        or within(name, "subagentd.extras")
        or within(name, "subagentd.inspect")
        or within(name, "subagentd.view")
        or name == "subagentd.private_files"  # the --html page holds the conversation
    )


def client_may_import(name: str) -> bool:
    """The public Python client speaks the wire: its types (schema), never the server's insides."""
    return (
        top(name) in STDLIB
        or top(name) in ("msgspec", "anyio")
        or name == "subagentd"  # its __version__
        or within(name, "subagentd.schema")
        or within(name, "subagentd.client")
    )


def demo_may_import(name: str) -> bool:
    """The demo is a host like any other: the client and the wire types, nothing inside."""
    return (
        top(name) in STDLIB
        or top(name) == "msgspec"
        or within(name, "subagentd.client")
        or within(name, "subagentd.schema")
        or name == "subagentd.private_files"  # its --record directory
    )


def private_files_may_import(name: str) -> bool:
    """How files holding conversation are created: the standard library only."""
    return top(name) in STDLIB


def otel_may_import(name: str) -> bool:
    """The OpenTelemetry tracer: the SDK and exporter, core's hook and Store, the wire types."""
    return (
        top(name) in STDLIB
        or top(name) == "opentelemetry"
        or name == "subagentd"  # its __version__
        or within(name, "subagentd.core.tracing")
        or within(name, "subagentd.core.store")
        or within(name, "subagentd.schema")
        or name == "subagentd.otel_export"
    )


def otel_export_may_import(name: str) -> bool:
    """Sending spans: the SDK's processor interface and the OTLP exporter (over requests, whose
    session bounds a collector's answer), nothing of ours."""
    return top(name) in STDLIB or top(name) in ("opentelemetry", "requests", "urllib3")


def scripts_may_import(name: str) -> bool:
    """Transcripts are replayed over the wire, as a host would: the client, the wire types."""
    return (
        top(name) in STDLIB
        or top(name) == "msgspec"
        or within(name, "subagentd.client")
        or within(name, "subagentd.schema")
        or within(name, "subagentd.scripts")
    )


def kit_may_import(name: str) -> bool:
    """The pytest plugin for host authors: pytest, the client, transcripts; nothing inside."""
    return scripts_may_import(name) or top(name) == "pytest" or within(name, "subagentd.testing")


def a2a_may_import(name: str) -> bool:
    """The A2A face drives a `subagentd serve` over the wire, as any host: the client and the wire
    types, never the server's insides; a2a-sdk and the HTTP stack it runs on speak A2A."""
    return (
        top(name) in STDLIB
        or top(name) in ("a2a", "anyio", "starlette", "uvicorn", "google")
        or name == "subagentd"  # its __version__, on the agent card
        or within(name, "subagentd.client")
        or within(name, "subagentd.a2a")
        or name == "subagentd.private_files"  # the generated token file
    )


RULES = {
    "schema": (schema_may_import, ()),
    "errors.py": (errors_may_import, ()),
    "message_fences.py": (fences_may_import, ()),
    "storage": (None, ("subagentd.core", "subagentd.server", "jsonrpcserver")),
    "core": (None, ("subagentd.server", "jsonrpcserver", "sqlite_utils", "anyio")),
    "server": (None, ("subagentd.storage", "sqlite_utils")),
    "inspect.py": (inspect_may_import, ()),
    "view": (view_may_import, ()),
    "terminal.py": (terminal_may_import, ()),
    "extras.py": (extras_may_import, ()),
    "client": (client_may_import, ()),
    "demo.py": (demo_may_import, ()),
    "otel.py": (otel_may_import, ()),
    "otel_export.py": (otel_export_may_import, ()),
    "private_files.py": (private_files_may_import, ()),
    "scripts": (scripts_may_import, ()),
    "testing": (kit_may_import, ()),
    "a2a": (a2a_may_import, ()),
}


@pytest.mark.parametrize("layer", list(RULES))
def test_layer_imports_only_what_architecture_allows(layer):
    allowed, forbidden = RULES[layer]
    assert modules(layer), f"no modules found for {layer}"
    assert violations(layer, allowed, forbidden) == []


def test_every_subpackage_is_covered_by_a_rule():
    covered = {
        "schema",
        "storage",
        "core",
        "server",
        "client",
        "cli",
        "view",
        "scripts",
        "testing",
        "a2a",
    }  # cli wires everything: no rule
    subpackages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert subpackages <= covered, f"layers without a rule: {subpackages - covered}"


def test_the_checker_sees_a_forbidden_import(tmp_path, monkeypatch):
    fake = tmp_path / "subagentd"
    (fake / "core").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "core" / "bad.py").write_text(
        "def f():\n    from ..server import connection\n    import sqlite_utils\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    allowed, forbidden = RULES["core"]
    assert violations("core", allowed, forbidden) == [
        "subagentd.core.bad imports sqlite_utils",
        "subagentd.core.bad imports subagentd.server",
        "subagentd.core.bad imports subagentd.server.connection",
    ]


@pytest.mark.parametrize("layer", ["inspect.py", "view"])
def test_inspect_and_the_views_hold_no_sql(layer):
    """inspect and the views read through storage's queries (storage/reader.py): no statement of
    their own."""
    tree = ast.Module(
        body=[ast.parse(path.read_text()) for path in modules(layer)], type_ignores=[]
    )
    verbs = ("SELECT", "INSERT", "UPDATE", "DELETE", "PRAGMA", "WITH")
    statements = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lstrip().startswith(tuple(verb + " " for verb in verbs))
    ]
    assert statements == []


def import_cycles(layer: str) -> list[list[str]]:
    """Cycles among the modules of one layer (every import counts, inside functions and
    TYPE_CHECKING blocks too; `from pkg import mod` counts as importing mod), each listed from
    its smallest module name."""
    names = {module_name(p): p for p in modules(layer)}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found = imports_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = {m for m in found if m in names and m != name}
    cycles: set[tuple[str, ...]] = set()

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                cycle = path[path.index(nxt) :]
                start = cycle.index(min(cycle))
                cycles.add(tuple(cycle[start:] + cycle[:start]))
            else:
                walk(nxt, [*path, nxt])

    for name in sorted(graph):
        walk(name, [name])
    return sorted(list(c) for c in cycles)


@pytest.mark.parametrize("layer", ["server", "core", "storage", "schema"])
def test_no_import_cycle_within_a_layer(layer):
    assert import_cycles(layer) == []


def test_the_cycle_checker_sees_a_cycle(tmp_path, monkeypatch):
    fake = tmp_path / "subagentd"
    (fake / "server").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "server" / "__init__.py").write_text("")
    (fake / "server" / "a.py").write_text("from subagentd.server import b\n")
    (fake / "server" / "b.py").write_text("def f():\n    from subagentd.server.c import x\n")
    (fake / "server" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert import_cycles("server") == [
        ["subagentd.server.a", "subagentd.server.b", "subagentd.server.c"]
    ]


LONG = 300  # lines a module may have before its top must say why it is longer
WHY_LONG = "Longer than ~300 lines on purpose:"


def long_modules_without_a_reason(package: Path) -> list[str]:
    """Modules over LONG lines whose docstring does not say why they are that long."""
    unexplained = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        if len(source.splitlines()) <= LONG:
            continue
        docstring = ast.get_docstring(ast.parse(source)) or ""
        if WHY_LONG not in " ".join(docstring.split()):
            unexplained.append(f"{path.relative_to(package)} ({len(source.splitlines())} lines)")
    return unexplained


def test_every_module_over_300_lines_says_why_at_its_top():
    assert long_modules_without_a_reason(PACKAGE) == []


def test_the_length_check_sees_a_long_module_without_a_reason(tmp_path):
    body = "x = 1\n" * (LONG + 1)
    (tmp_path / "long.py").write_text(f'"""Something."""\n{body}')
    (tmp_path / "said.py").write_text(
        f'"""Something.\n\nLonger than ~300 lines\non purpose: why."""\n{body}'
    )
    (tmp_path / "short.py").write_text('"""Short."""\nx = 1\n')
    assert long_modules_without_a_reason(tmp_path) == [f"long.py ({LONG + 2} lines)"]
