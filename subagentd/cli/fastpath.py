"""Start-up fast path: a plain serve invocation is read from the option table without click.

Importing click costs a measurable part of a cold start (benchmarks/README.md). A command line
that only gives serve options as `--name value` or `--name=value`, each value valid, with valid
SUBAGENTD_* variables, is read here (and --version among them answered); anything else (a command, --help, --version, an unknown or
invalid option or variable, --tools, --retention) returns None and click reads it instead, with
its messages. So both agree on everything this accepts (tests/project/test_cli.py compares them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from subagentd.cli.spec import Spec, read_duration
from subagentd.cli.table import GLOBAL, SERVE, env_name

if TYPE_CHECKING:
    from subagentd.cli.serve_options import ServeOptions

_SPECS = {spec.name: spec for spec in (*SERVE, *GLOBAL)}


def read_serve(argv: list[str], environ: Mapping[str, str]) -> ServeOptions | None:
    """The serve options of `argv` (defaults, then variables, then the line), or None."""
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    given: dict[str, str] = {}
    index = 0
    while index < len(argv):
        if argv[index] == "--version":
            given["--version"] = ""
            index += 1
            continue
        name, sep, value = argv[index].partition("=")
        if name not in _SPECS:
            return None
        if not sep:
            if index + 1 >= len(argv):
                return None
            value = argv[index + 1]
            index += 1
        given[name] = value
        index += 1
    options: dict[str, Any] = {}
    for name, spec in _SPECS.items():
        text = given.get(name, environ.get(env_name(name)) or None)  # as click: "" is unset
        if text is None:
            options[spec.dest] = spec.default
            continue
        value = _convert(spec, text)
        if value is None:
            return None
        options[spec.dest] = value
    options["version"] = "--version" in given
    return cast("ServeOptions", options)


def _convert(spec: Spec, text: str) -> Any:
    """The value, or None when it is not one this path reads (click then says why)."""
    if spec.kind == "str":
        return text
    if spec.kind == "choice":
        return text if text in spec.choices else None
    if spec.kind not in ("int", "float") and not (spec.kind == "duration" and spec.bare):
        return None
    try:
        if spec.kind == "duration":
            value: float = read_duration(text, spec.bare)
        else:
            value = int(text) if spec.kind == "int" else float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):  # click takes these; leave them
        return None
    if spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low):
        return None
    if spec.high is not None and value > spec.high:
        return None
    return value
