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


def render_may_import(name: str) -> bool:
    """Python hosts import subagentd.render alone: the standard library only."""
    return top(name) in STDLIB


RULES = {
    "schema": (schema_may_import, ()),
    "errors.py": (errors_may_import, ()),
    "render.py": (render_may_import, ()),
    "storage": (None, ("subagentd.core", "subagentd.server", "jsonrpcserver")),
    "core": (None, ("subagentd.server", "jsonrpcserver", "sqlite_utils", "anyio")),
    "server": (None, ("subagentd.storage", "sqlite_utils")),
}


@pytest.mark.parametrize("layer", list(RULES))
def test_layer_imports_only_what_architecture_allows(layer):
    allowed, forbidden = RULES[layer]
    assert modules(layer), f"no modules found for {layer}"
    assert violations(layer, allowed, forbidden) == []


def test_every_subpackage_is_covered_by_a_rule():
    covered = {"schema", "storage", "core", "server", "cli"}  # cli wires everything: no rule
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
