"""The serve wiring's options are typed from the option table: cli/serve_options.py
`ServeOptions` has one key per option of cli/table.py (`SERVE`, `GLOBAL`), of the type its
`Spec` gives, and the options click and the start-up fast path build have exactly those keys."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from subagentd.cli.commands import serve as serve_command
from subagentd.cli.fastpath import read_serve
from subagentd.cli.serve_options import ServeOptions
from subagentd.cli.spec import Spec
from subagentd.cli.table import GLOBAL, SERVE

ADDED = {"version", "detached", "detached_lock", "detached_files"}  # not options of the table
KINDS: dict[str, Any] = {
    "int": int,
    "float": float,
    "duration": float,
    "str": str,
    "tools": tuple[str, ...],
    "agents": tuple[tuple[str, str], ...],
}


def _hints() -> dict[str, Any]:
    from subagentd.runners.detached import Background

    return typing.get_type_hints(ServeOptions, localns={"Background": Background})


def expected(spec: Spec) -> Any:
    """The type a spec's value has in the options (None: when it may be left unset)."""
    kind = Literal[spec.choices] if spec.kind == "choice" else KINDS[spec.kind]
    if spec.default is None and spec.dest != "db":  # db: the default database by then
        return kind | None
    return kind


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, types.UnionType) or isinstance(b, types.UnionType):
        return set(typing.get_args(a)) == set(typing.get_args(b))
    return bool(a == b)


def test_every_option_of_the_table_is_a_key_of_its_type():
    hints = _hints()
    specs = {spec.dest: spec for spec in (*SERVE, *GLOBAL)}
    assert set(hints) - ADDED == set(specs)
    wrong = {
        dest: (hints[dest], expected(spec))
        for dest, spec in specs.items()
        if not _same(hints[dest], expected(spec))
    }
    assert wrong == {}


def test_the_keys_added_after_the_table_are_not_required():
    # read from the annotations' text (postponed: the run-time key sets cannot see NotRequired)
    written = ServeOptions.__annotations__
    optional = {
        key for key, text in written.items() if text.__forward_arg__.startswith("NotRequired[")
    }
    assert optional == ADDED


def test_click_and_the_fast_path_build_exactly_the_typed_keys():
    clicked = {param.name for param in serve_command.params if param.name != "version"}
    # the command's own options, and what it adds: the global ones, as their effective values
    assert clicked | {"db", "log_level", "log_format"} == set(_hints()) - ADDED
    fast = read_serve(["serve"], {})
    assert fast is not None
    assert set(fast) == set(_hints()) - ADDED | {"version"}
