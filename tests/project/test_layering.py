"""The layering table of docs/architecture.md ("may import"), read from the document and checked
on the import statements of every module: the table is the rule, this file only applies it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import subagentd

PACKAGE = Path(subagentd.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
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
            if node.module is None or node.level:
                # `from . import x` / `from .pkg import x` may name submodules
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
            else:
                # `from subagentd.pkg import mod` imports mod; `from subagentd.pkg import name`,
                # the package
                folder = PACKAGE.parent.joinpath(*target.split("."))
                for alias in node.names:
                    if (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir():
                        found.add(f"{target}.{alias.name}")
                    else:
                        found.add(target)
    return found


class Row(NamedTuple):
    """A row of the layering table: the modules it is for (paths relative to subagentd/: `x/` a
    package, `x.py` a module) and what they may import beyond the standard library and
    themselves."""

    paths: tuple[str, ...]
    may_import: tuple[str, ...]


def layering_table(text: str) -> list[Row]:
    table = text.split("| package | holds | may import |\n|---|---|---|\n", 1)[1]
    rows = []
    for line in table.split("\n\n", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        paths = tuple(re.findall(r"`([^`]+)`", cells[0]))
        may = tuple(item.strip().strip("`") for item in cells[2].split(","))
        rows.append(Row(paths, () if may == ("—",) else may))
    return rows


TABLE = layering_table(ARCHITECTURE.read_text())


def covers(path: str, rel: str) -> bool:
    """Whether the table's `path` (`x/` or `x.py`) is, or holds, the module or package `rel`."""
    return rel == path or (path.endswith("/") and rel.startswith(path))


def row_of(rel: str, table: list[Row] | None = None) -> tuple[int, str] | None:
    """The most specific row for a module or package path: its index and the path that matched."""
    found = [
        (len(path), index, path)
        for index, row in enumerate(table or TABLE)
        for path in row.paths
        if covers(path, rel)
    ]
    return max(found)[1:] if found else None


def internal(item: str) -> bool:
    return item.endswith(("/", ".py"))


def name_of(item: str) -> str:
    """`core/tracing.py` -> subagentd.core.tracing; `wire/` -> subagentd.wire."""
    if item == "__init__.py":
        return "subagentd"
    return ".".join(["subagentd", *item.removesuffix("/").removesuffix(".py").split("/")])


def may_import(path: str, row: Row):
    own = name_of(path)
    allowed = [name_of(item) for item in row.may_import if internal(item)]
    libraries = {item for item in row.may_import if not internal(item)}

    def allowed_name(name: str) -> bool:
        if "everything" in libraries or top(name) in STDLIB or within(name, own):
            return True
        if top(name) != "subagentd":
            return top(name) in libraries
        return any(name == a if a == "subagentd" else within(name, a) for a in allowed)

    return allowed_name


def modules(layer: str) -> list[Path]:
    if layer.endswith(".py"):
        return [PACKAGE / layer]
    return sorted((PACKAGE / layer).rglob("*.py"))


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def top(name: str) -> str:
    return name.split(".")[0]


def violations(layer: str, table: list[Row] | None = None) -> list[str]:
    """The imports of the modules `layer`'s row is for (not those with a row of their own) that
    the row does not allow."""
    table = table or TABLE
    bad = []
    for path in modules(layer):
        rel = path.relative_to(PACKAGE).as_posix()
        found = row_of(rel, table)
        assert found is not None, f"{rel} has no row in the layering table"
        index, matched = found
        if matched != layer:
            continue  # a row of its own
        allowed = may_import(matched, table[index])
        for name in sorted(imports_of(path)):
            if not allowed(name):
                bad.append(f"{module_name(path)} imports {name}")
    return bad


LAYERS = [path for row in TABLE for path in row.paths]


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_imports_only_what_architecture_allows(layer):
    assert modules(layer), f"no modules found for {layer}"
    assert violations(layer) == []


def test_every_module_has_a_row():
    rows = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}
    assert sorted(rel for rel in rows if row_of(rel) is None) == []


def test_every_row_and_what_it_names_exists():
    named = [path for row in TABLE for path in row.paths] + [
        item for row in TABLE for item in row.may_import if internal(item)
    ]
    assert [p for p in named if not (PACKAGE / p).exists()] == []


def test_a_row_names_only_rows_above_it():
    """Read down the table, each row imports only rows above it: no import up a layer, and no
    cycle between packages."""
    upward = [
        f"{path} may import {item}"
        for index, row in enumerate(TABLE)
        for path in row.paths
        for item in row.may_import
        if internal(item) and (row_of(item) or (index, ""))[0] >= index
    ]
    assert upward == []


def test_the_table_is_read_from_the_document():
    rows = {path: row for row in TABLE for path in row.paths}
    assert rows["errors.py"].may_import == ("schema/",)
    assert rows["extras.py"].may_import == ()
    assert rows["cli/"].may_import == ("everything",)
    assert row_of("wire/call.py") == (LAYERS.index("wire/"), "wire/")
    assert row_of("view/inspect.py") == (LAYERS.index("view/inspect.py"), "view/inspect.py")


def test_the_checker_sees_a_forbidden_import(tmp_path, monkeypatch):
    fake = tmp_path / "subagentd"
    (fake / "core").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "core" / "bad.py").write_text(
        "def f():\n    from ..server import connection\n    import sqlite_utils\n"
        "    from subagentd.schema import codes\n    import msgspec\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert violations("core/") == [
        "subagentd.core.bad imports sqlite_utils",
        "subagentd.core.bad imports subagentd.server",
        "subagentd.core.bad imports subagentd.server.connection",
    ]


def test_the_checker_applies_the_most_specific_row(tmp_path, monkeypatch):
    table = layering_table(
        "| package | holds | may import |\n|---|---|---|\n"
        "| `view/` | views | `extras.py`, rich |\n"
        "| `view/terminal.py` | escaping | — |\n\n"
    )
    fake = tmp_path / "subagentd"
    (fake / "view").mkdir(parents=True)
    (fake / "view" / "screen.py").write_text(
        "import rich\nfrom subagentd.extras import missing\nfrom subagentd.view import terminal\n"
    )
    (fake / "view" / "terminal.py").write_text("import rich\nimport re\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert violations("view/", table) == []
    assert violations("view/terminal.py", table) == ["subagentd.view.terminal imports rich"]


@pytest.mark.parametrize("layer", ["view"])
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


@pytest.mark.parametrize("layer", [p.removesuffix("/") for p in LAYERS if p.endswith("/")])
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
