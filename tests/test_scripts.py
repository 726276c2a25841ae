"""Replays tests/scripts/*.jsonl against a real `python -m subagentd` (format: scripts/README.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.spawned import ServerProcess

SCRIPTS = Path(__file__).parent / "scripts"
PLACEHOLDER = re.compile(r"^\$\{(\w+)\}$")
QUIET = 0.3  # seconds to wait for frames that must not come
BARRIER_ID = "script-end"


class ScriptMismatch(AssertionError):
    pass


def load(path: Path) -> list[tuple[int, str, Any]]:
    steps = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        entry = json.loads(line)
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ValueError(f"{path.name}:{number}: a step is an object with exactly one key")
        [(kind, value)] = entry.items()
        if kind not in ("send", "send_raw", "expect", "comment"):
            raise ValueError(f"{path.name}:{number}: unknown step {kind!r}")
        if kind == "send_raw" and not isinstance(value, str):
            raise ValueError(f"{path.name}:{number}: send_raw takes a string")
        steps.append((number, kind, value))
    return steps


def substitute(value: Any, captures: dict[str, Any]) -> Any:
    if isinstance(value, str):
        found = PLACEHOLDER.match(value)
        if found:
            name = found.group(1)
            if name not in captures:
                raise KeyError(f"nothing was captured as ${{{name}}}")
            return captures[name]
        return value
    if isinstance(value, list):
        return [substitute(v, captures) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, captures) for k, v in value.items()}
    return value


def match(expected: Any, actual: Any, captures: dict[str, Any], path: str = "$") -> None:
    """Exact structural equality; "${name}" captures on first sight, "${_}" matches anything."""
    if isinstance(expected, str):
        found = PLACEHOLDER.match(expected)
        if found:
            name = found.group(1)
            if name == "_":
                return
            if name not in captures:
                captures[name] = actual
                return
            expected = captures[name]
            if expected != actual or type(expected) is not type(actual):
                raise ScriptMismatch(f"{path}: ${{{name}}} was {expected!r}, now {actual!r}")
            return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise ScriptMismatch(f"{path}: expected an object, got {actual!r}")
        if set(expected) != set(actual):
            missing = sorted(set(expected) - set(actual))
            extra = sorted(set(actual) - set(expected))
            raise ScriptMismatch(f"{path}: keys differ (missing {missing}, unexpected {extra})")
        for key, value in expected.items():
            match(value, actual[key], captures, f"{path}.{key}")
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise ScriptMismatch(f"{path}: expected an array of {len(expected)}, got {actual!r}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            match(e, a, captures, f"{path}[{i}]")
        return
    same_type = type(expected) is type(actual) or (
        isinstance(expected, int | float)
        and isinstance(actual, int | float)
        and not isinstance(expected, bool)
        and not isinstance(actual, bool)
    )
    if not same_type or expected != actual:
        raise ScriptMismatch(f"{path}: expected {expected!r}, got {actual!r}")


def replay(path: Path, db: str = ":memory:") -> None:
    steps = load(path)
    server = ServerProcess(db=db)
    host = server.host
    captures: dict[str, Any] = {}
    try:
        for number, kind, value in steps:
            where = f"{path.name}:{number}"
            if kind == "send":
                host.send(substitute(value, captures))
            elif kind == "send_raw":
                host.send_bytes(value.encode() + b"\n")
            elif kind == "expect":
                try:
                    frame = host.read_any()
                except (TimeoutError, EOFError) as exc:
                    raise ScriptMismatch(
                        f"{where}: expected {json.dumps(value)}, but {exc}"
                    ) from None
                try:
                    match(value, frame, captures)
                except ScriptMismatch as exc:
                    raise ScriptMismatch(
                        f"{where}: {exc}\n  expected: {json.dumps(value)}\n  actual:   {json.dumps(frame)}"
                    ) from None
        # barrier: replies are written in order, so whatever the script caused comes before this
        host.send({"jsonrpc": "2.0", "id": BARRIER_ID, "method": "ping"})
        barrier = {"jsonrpc": "2.0", "result": {}, "id": BARRIER_ID}
        frames: list[Any] = []
        try:
            while barrier not in frames:
                frames.append(host.read_any())
            while True:  # and a short while longer, for late deferred replies
                frames.append(host.read_any(timeout=QUIET))
        except TimeoutError:
            pass
        unexpected = [f for f in frames if f != barrier]
        if unexpected or barrier not in frames:
            raise ScriptMismatch(
                f"{path.name}: unexpected frame after the script: {json.dumps(unexpected)}"
            )
        server.close_stdin()
        assert server.wait() == 0, server.stderr_text()
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_script_replays_against_the_real_server(path, store, request):
    """Each transcript on SQLite (in memory) and on a new PostgreSQL database: the same frames."""
    replay(path, ":memory:" if store == "sqlite" else request.getfixturevalue("pg_stores").url())


def test_scripts_directory_holds_the_expected_transcripts():
    names = {p.name for p in SCRIPTS.glob("*.jsonl")}
    assert {"conformance.jsonl", "lifecycle.jsonl", "stateless.jsonl"} <= names


# --- the matcher itself: each of these must be able to fail ----------------------------------


def test_placeholder_captures_first_and_then_must_repeat():
    captures: dict[str, Any] = {}
    match({"id": "${x}"}, {"id": 5}, captures)
    assert captures == {"x": 5}
    match({"again": "${x}"}, {"again": 5}, captures)
    with pytest.raises(ScriptMismatch):
        match({"again": "${x}"}, {"again": 6}, captures)


def test_wildcard_matches_anything_but_the_key_must_exist():
    match({"a": "${_}"}, {"a": [1, {"b": None}]}, {})
    with pytest.raises(ScriptMismatch):
        match({"a": "${_}"}, {}, {})


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1}, {"a": True}),
        ({"a": "1"}, {"a": 1}),
        ([1, 2], [2, 1]),
        ([1], [1, 1]),
        ({"a": None}, {"a": {}}),
        ("${x} suffix", "5 suffix"),
    ],
)
def test_matcher_rejects_near_misses(expected, actual):
    with pytest.raises(ScriptMismatch):
        match(expected, actual, {})


def test_substitution_replaces_whole_string_placeholders_only():
    captures = {"id": "abc", "n": 3}
    sent = substitute({"a": "${id}", "b": ["${n}", "x ${id}"], "${id}": 1}, captures)
    assert sent == {"a": "abc", "b": [3, "x ${id}"], "${id}": 1}
    with pytest.raises(KeyError):
        substitute("${missing}", captures)


def test_a_wrong_expectation_fails_the_replay(tmp_path):
    script = tmp_path / "wrong.jsonl"
    script.write_text(
        '{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n'
        '{"expect": {"jsonrpc": "2.0", "result": {"pong": true}, "id": 1}}\n'
    )
    with pytest.raises(ScriptMismatch, match="keys differ"):
        replay(script)


def test_an_unexpected_trailing_frame_fails_the_replay(tmp_path):
    script = tmp_path / "extra.jsonl"
    script.write_text('{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n')
    with pytest.raises(ScriptMismatch, match="unexpected frame"):
        replay(script)
