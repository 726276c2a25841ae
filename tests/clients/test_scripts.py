"""The transcript format (docs/scripts.md) and its replayer, subagentd.scripts: tests/scripts/*.jsonl
replayed against a real `python -m subagentd serve`, and the matcher's rules one by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from subagentd.scripts import STEP_SCHEMA, Mismatch, ScriptError, match, parse, replay, substitute
from subagentd.scripts.format import masked, merge

SCRIPTS = Path(__file__).parents[1] / "scripts"
DOCS = Path(__file__).parents[2] / "docs" / "scripts.md"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.jsonl")), ids=lambda p: p.stem)
def test_script_replays_against_the_real_server(path, store, request):
    """Each transcript on SQLite (in memory) and on a new PostgreSQL database: the same frames."""
    db = ":memory:" if store == "sqlite" else request.getfixturevalue("pg_stores").url()
    outcome = replay(path, db=db)
    assert outcome.failure is None, outcome.failure


def test_scripts_directory_holds_the_expected_transcripts():
    names = {p.name for p in SCRIPTS.glob("*.jsonl")}
    assert {"conformance.jsonl", "lifecycle.jsonl", "stateless.jsonl", "flows.jsonl"} <= names


def all_lines() -> list[str]:
    paths = [*SCRIPTS.glob("*.jsonl"), *SCRIPTS.glob("demo/*.jsonl")]
    return [line for p in paths for line in p.read_text().splitlines() if line.strip()]


def test_every_line_of_the_repositorys_transcripts_satisfies_the_one_line_schema():
    validator = jsonschema.Draft202012Validator(STEP_SCHEMA)
    lines = all_lines()
    assert len(lines) > 200
    for line in lines:
        validator.validate(json.loads(line))


@pytest.mark.parametrize(
    "line",
    [
        '{"send": 1, "expect": 2}',
        "{}",
        '{"sned": {}}',
        '{"send_raw": 5}',
        '{"version": 2}',
        '{"close": false}',
        '{"comment": 3}',
    ],
)
def test_the_schema_and_the_parser_both_refuse_a_bad_line(line):
    assert not jsonschema.Draft202012Validator(STEP_SCHEMA).is_valid(json.loads(line))
    with pytest.raises(ScriptError, match=r"^x\.jsonl:1: "):
        parse(line, "x.jsonl")


def test_the_documented_schema_is_the_one_the_package_holds():
    """docs/scripts.md prints the schema of one line; it is STEP_SCHEMA, on one line."""
    assert json.dumps(STEP_SCHEMA) in DOCS.read_text().splitlines()


def test_version_is_the_first_step_only_and_nothing_is_sent_after_close():
    assert [s.kind for s in parse('{"version": 1}\n{"comment": "x"}')] == ["version", "comment"]
    with pytest.raises(ScriptError, match="x:2: version is the first step only"):
        parse('{"comment": "x"}\n{"version": 1}', "x")
    with pytest.raises(ScriptError, match=r"x:1: format version 2 is not supported \(this"):
        parse('{"version": 2}', "x")
    with pytest.raises(ScriptError, match="x:3: nothing is sent after close"):
        parse('{"close": true}\n{"expect": 1}\n{"send": {}}', "x")


# --- the matcher itself: each of these must be able to fail ----------------------------------


def test_placeholder_captures_first_and_then_must_repeat():
    captures: dict[str, Any] = {}
    match({"id": "${x}"}, {"id": 5}, captures)
    assert captures == {"x": 5}
    match({"again": "${x}"}, {"again": 5}, captures)
    with pytest.raises(Mismatch, match=r"^\$\.again: \$\{x\} was 5, here it is 6$"):
        match({"again": "${x}"}, {"again": 6}, captures)


def test_wildcard_matches_anything_but_the_key_must_exist():
    match({"a": "${_}"}, {"a": [1, {"b": None}]}, {})
    with pytest.raises(Mismatch, match=r'^\$: keys differ: missing "a"$'):
        match({"a": "${_}"}, {}, {})


@pytest.mark.parametrize(
    ("expected", "actual", "said"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, '$: keys differ: unexpected "b"'),
        ({"a": 1}, {"a": True}, "$.a: expected 1, got true"),
        ({"a": "1"}, {"a": 1}, '$.a: expected "1", got 1'),
        ([1, 2], [2, 1], "$[0]: expected 1, got 2"),
        ([1], [1, 1], "$: expected 1 items, got 2"),
        ({"a": None}, {"a": {}}, "$.a: expected null, got {}"),
        ("${x} suffix", "5 suffix", '$: expected "${x} suffix", got "5 suffix"'),
    ],
)
def test_matcher_rejects_near_misses(expected, actual, said):
    with pytest.raises(Mismatch) as raised:
        match(expected, actual, {})
    assert str(raised.value) == said


def test_numbers_match_across_int_and_float_but_not_bool():
    match({"n": 1}, {"n": 1.0}, {})
    with pytest.raises(Mismatch):
        match({"n": 0}, {"n": False}, {})


def test_substitution_replaces_whole_string_placeholders_only():
    captures = {"id": "abc", "n": 3}
    sent = substitute({"a": "${id}", "b": ["${n}", "x ${id}"], "${id}": 1}, captures)
    assert sent == {"a": "abc", "b": [3, "x ${id}"], "${id}": 1}
    with pytest.raises(ScriptError, match=r"\$\{missing\} is used in a send before"):
        substitute("${missing}", captures)


def test_masked_shows_placeholders_where_they_stand_and_merge_keeps_them():
    expected = {"turn_id": "${t}", "text": "old", "n": [1]}
    actual = {"turn_id": "u-1", "text": "new", "n": [1, 2], "extra": "u-1"}
    assert masked(expected, actual) == {
        "turn_id": "${t}",
        "text": "new",
        "n": [1, 2],
        "extra": "u-1",
    }
    captures: dict[str, Any] = {}
    assert merge(expected, actual, captures) == {
        "turn_id": "${t}",
        "text": "new",
        "n": [1, 2],
        "extra": "${t}",  # a value recorded before is written as its placeholder
    }
    assert captures == {"t": "u-1"}


# --- replays that must fail, and how they say so ---------------------------------------------


def test_a_wrong_expectation_fails_the_replay_naming_the_line_with_a_diff(tmp_path):
    script = tmp_path / "wrong.jsonl"
    script.write_text(
        '{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n'
        '{"expect": {"jsonrpc": "2.0", "result": {"pong": true}, "id": 1}}\n'
    )
    failure = replay(script).failure
    assert failure is not None
    lines = failure.splitlines()
    assert lines[0] == "wrong.jsonl: line 2: the frame received does not match the expect"
    assert lines[1] == '  $.result: keys differ: missing "pong"'
    assert lines[2] == (
        '  after the send at line 1: {"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}'
    )
    assert "    --- expected (line 2)" in lines and "    +++ received" in lines
    assert '    -  "result": {' in lines and '    +  "result": {},' in lines


def test_an_unexpected_trailing_frame_fails_the_replay(tmp_path):
    script = tmp_path / "extra.jsonl"
    script.write_text('{"send": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}\n')
    failure = replay(script).failure
    assert failure is not None
    assert failure.startswith("extra.jsonl: after the last step: 1 unexpected frame(s)")
    assert '      "id": 1' in failure.splitlines()


def test_an_expect_nothing_answers_fails_after_the_timeout(tmp_path):
    script = tmp_path / "silent.jsonl"
    script.write_text('{"send": {"jsonrpc": "2.0", "method": "ping"}}\n{"expect": {}}\n')
    failure = replay(script, timeout=0.5).failure
    assert failure is not None
    assert failure.startswith(
        "silent.jsonl: line 2: expected a frame, but no frame from subagentd within 0.5 s"
    )


def test_a_close_step_checks_what_subagentd_writes_while_it_shuts_down(tmp_path):
    """After close, the frames of the shutdown are expected too, then the end of stdout."""
    head = (
        '{"send": {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":'
        ' {"protocolVersion": "2025-06-18", "clientInfo": {"name": "t", "version": "0"}}}}\n'
        '{"expect": {"jsonrpc": "2.0", "result": "${_}", "id": 0}}\n'
        '{"send": {"jsonrpc": "2.0", "method": "notifications/initialized"}}\n'
        '{"send": {"jsonrpc": "2.0", "id": 1, "method": "agents/open", "params": {"agent_id": "r"}}}\n'
        '{"expect": {"jsonrpc": "2.0", "result": {"agent_id": "r", "activation_id": "${a}"}, "id": 1}}\n'
        '{"send": {"jsonrpc": "2.0", "id": 2, "method": "turns/begin", "params": {"agent_id": "r"}}}\n'
        '{"expect": {"jsonrpc": "2.0", "result": {"turn_id": "${t}"}, "id": 2}}\n'
        '{"expect": {"jsonrpc": "2.0", "method": "turn/start", "params": "${_}"}}\n'
        '{"close": true}\n'
    )
    interrupt = (
        '{"expect": {"jsonrpc": "2.0", "method": "turn/interrupt", "params": {"agent_id": "r",'
        ' "turn_id": "${t}", "cause": {"kind": "shutdown"}}}}\n'
    )
    script = tmp_path / "close.jsonl"
    script.write_text(head + interrupt)
    assert replay(script).failure is None
    script.write_text(head)
    failure = replay(script).failure
    assert failure is not None and "after the last step: 1 unexpected frame(s)" in failure
