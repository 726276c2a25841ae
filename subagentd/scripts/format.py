"""The transcript format (docs/scripts.md): one JSON object per line, each with exactly one key.

`send` writes a JSON value as one frame, `send_raw` writes text verbatim, `expect` requires the
next frame subagentd writes to equal a value, `close` ends subagentd's input (only expects may
follow: what it writes while it shuts down), `comment` is ignored and `version` (first step only)
names the format version. In an `expect`, a whole string `"${name}"` is a placeholder: it records
the value it meets the first time and must meet the same value afterwards (`"${_}"` matches any
value); in a `send` it is replaced by the recorded value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
KINDS = ("send", "send_raw", "expect", "close", "comment", "version")
PLACEHOLDER = re.compile(r"^\$\{([A-Za-z0-9_]+)\}$")
TOO_DEEP = "a JSON value nested too deeply to replay"
END_ID = "script-end"
"""The id of the ping a replay sends after the last step (a script must not use it)."""

STEP_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/subagentd/subagentd/blob/main/docs/scripts.md#one-line",
    "title": "One line of a subagentd transcript (format version 1)",
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "properties": {
        "version": {"const": FORMAT_VERSION, "description": "first line only; optional"},
        "send": {"description": "a JSON value written as one frame (placeholders substituted)"},
        "send_raw": {"type": "string", "description": "text written verbatim, then a newline"},
        "expect": {"description": "the next frame read must equal this (placeholders match)"},
        "close": {"const": True, "description": "close subagentd's stdin; only expects follow"},
        "comment": {"type": "string", "description": "ignored"},
    },
    "additionalProperties": False,
}
"""The JSON Schema every line of a transcript satisfies (docs/scripts.md prints it)."""


class ScriptError(ValueError):
    """A transcript that is not well formed (the message names the file and line)."""


class Mismatch(AssertionError):
    """A frame that does not match its expectation; `path` is where, in JSONPath-like form."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


@dataclass
class Step:
    """One line of a transcript: its 1-based line number, kind, value and text as written."""

    line: int
    kind: str
    value: Any
    text: str


def parse(text: str, name: str = "<script>") -> list[Step]:
    """The steps of a transcript's text; `ScriptError` names the first line that is not one."""
    steps: list[Step] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise ScriptError(f"{where}: not JSON ({exc})") from None
        except RecursionError:
            raise ScriptError(f"{where}: {TOO_DEEP}") from None
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ScriptError(
                f"{where}: a step is an object with exactly one of {', '.join(KINDS)}"
            )
        [(kind, value)] = entry.items()
        if kind not in KINDS:
            raise ScriptError(f"{where}: unknown step {kind!r} (one of {', '.join(KINDS)})")
        if kind in ("send_raw", "comment") and not isinstance(value, str):
            raise ScriptError(f"{where}: {kind} takes a string")
        if kind == "close" and value is not True:
            raise ScriptError(f"{where}: close takes true")
        if kind in ("send", "send_raw", "close") and any(s.kind == "close" for s in steps):
            raise ScriptError(f"{where}: nothing is sent after close")
        if kind == "version":
            if steps:
                raise ScriptError(f"{where}: version is the first step only")
            if value != FORMAT_VERSION or isinstance(value, bool):
                raise ScriptError(
                    f"{where}: format version {json.dumps(value)} is not supported"
                    f" (this subagentd reads version {FORMAT_VERSION})"
                )
        steps.append(Step(number, kind, value, line))
    return steps


def load(path: str | Path) -> list[Step]:
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), path.name)


def dumps(kind: str, value: Any) -> str:
    """One step as a line, in the style the repository's transcripts use."""
    return json.dumps({kind: value}, ensure_ascii=False)


def substitute(value: Any, captures: dict[str, Any]) -> Any:
    """Whole-string placeholders replaced by their recorded values (keys never are)."""
    if isinstance(value, str):
        found = PLACEHOLDER.match(value)
        if found:
            name = found.group(1)
            if name == "_" or name not in captures:
                raise ScriptError(f"${{{name}}} is used in a send before an expect recorded it")
            return captures[name]
        return value
    if isinstance(value, list):
        return [substitute(v, captures) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, captures) for k, v in value.items()}
    return value


def _same_scalar(expected: Any, actual: Any) -> bool:
    """Equal and of the same JSON type (1 is not true, "1" is not 1; 1 and 1.0 are numbers)."""
    numbers = (int, float)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, numbers) and isinstance(actual, numbers):
        return expected == actual
    return type(expected) is type(actual) and expected == actual


def match(expected: Any, actual: Any, captures: dict[str, Any], path: str = "$") -> None:
    """Exact structural equality; raises `Mismatch` at the first difference. Placeholders record
    into `captures` on first sight ("${_}" matches anything)."""
    if isinstance(expected, str):
        found = PLACEHOLDER.match(expected)
        if found:
            name = found.group(1)
            if name == "_":
                return
            if name not in captures:
                captures[name] = actual
                return
            if not _equal(captures[name], actual):
                raise Mismatch(
                    path, f"${{{name}}} was {_show(captures[name])}, here it is {_show(actual)}"
                )
            return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch(path, f"expected an object, got {_show(actual)}")
        missing = [k for k in expected if k not in actual]
        extra = [k for k in actual if k not in expected]
        if missing or extra:
            said = [f"missing {', '.join(map(json.dumps, missing))}"] if missing else []
            said += [f"unexpected {', '.join(map(json.dumps, extra))}"] if extra else []
            raise Mismatch(path, "keys differ: " + "; ".join(said))
        for key, value in expected.items():
            match(value, actual[key], captures, f"{path}.{key}")
        return
    if isinstance(expected, list):
        if not isinstance(actual, list):
            raise Mismatch(path, f"expected an array, got {_show(actual)}")
        if len(actual) != len(expected):
            raise Mismatch(path, f"expected {len(expected)} items, got {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            match(e, a, captures, f"{path}[{i}]")
        return
    if not _same_scalar(expected, actual):
        raise Mismatch(path, f"expected {_show(expected)}, got {_show(actual)}")


def _equal(a: Any, b: Any) -> bool:
    try:
        match(a, b, {})
    except Mismatch:
        return False
    return True


def _show(value: Any, width: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def masked(expected: Any, actual: Any) -> Any:
    """`actual` with the placeholders of `expected` written where they stand, so that a diff of
    the two shows only the real differences."""
    if isinstance(expected, str) and PLACEHOLDER.match(expected):
        return expected
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {k: masked(expected[k], v) if k in expected else v for k, v in actual.items()}
    if isinstance(expected, list) and isinstance(actual, list):
        return [masked(e, a) for e, a in zip(expected, actual, strict=False)] + actual[
            len(expected) :
        ]
    return actual


def adopt(value: Any, captures: dict[str, Any]) -> Any:
    """A received value as an expectation: strings that equal a recorded value become its
    placeholder (so an id seen before is matched as that id)."""
    if isinstance(value, str):
        for name, captured in captures.items():
            if isinstance(captured, str) and captured == value:
                return f"${{{name}}}"
        return value
    if isinstance(value, list):
        return [adopt(v, captures) for v in value]
    if isinstance(value, dict):
        return {k: adopt(v, captures) for k, v in value.items()}
    return value


def merge(expected: Any, actual: Any, captures: dict[str, Any]) -> Any:
    """The expectation `--update` writes for `actual`: `expected`'s placeholders kept wherever
    they still stand (and record there), everything else taken from `actual`."""
    if isinstance(expected, str):
        found = PLACEHOLDER.match(expected)
        if found:
            name = found.group(1)
            if name == "_":
                return expected
            if name not in captures:
                captures[name] = actual
                return expected
            if _equal(captures[name], actual):
                return expected
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {
            k: merge(expected[k], v, captures) if k in expected else adopt(v, captures)
            for k, v in actual.items()
        }
    if isinstance(expected, list) and isinstance(actual, list):
        head = [merge(e, a, captures) for e, a in zip(expected, actual, strict=False)]
        return head + [adopt(a, captures) for a in actual[len(expected) :]]
    return adopt(actual, captures)
