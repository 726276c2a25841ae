"""`subagentd replay` as a user runs it (exit status, report, --update, --junit, serve options,
--db shared) and `subagentd serve --record` (a recording replays; the demo's recording does)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from subagentd.scripts import replay

SCRIPTS = Path(__file__).parents[1] / "scripts"
FLOWS = SCRIPTS / "flows.jsonl"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def subagentd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagentd", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=None if env is None else {**os.environ, **env},
    )


def broken_flows(tmp_path: Path) -> Path:
    """flows.jsonl with one reply's text changed and one expect left out."""
    lines = FLOWS.read_text().splitlines()
    lines = [line.replace("message queued as the next turn", "OLD TEXT") for line in lines]
    expects = [i for i, line in enumerate(lines) if line.startswith('{"expect"')]
    del lines[expects[10]]
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_passes_and_fails_with_the_status_a_ci_job_needs(tmp_path):
    good = subagentd("replay", str(SCRIPTS / "lifecycle.jsonl"), str(FLOWS))
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines()[-1] == "2 passed, 0 failed"
    bad = subagentd("replay", str(broken_flows(tmp_path)), str(SCRIPTS / "lifecycle.jsonl"))
    assert bad.returncode == 1
    out = bad.stdout.splitlines()
    assert out[0] == "FAIL flows.jsonl: line 16: the frame received does not match the expect"
    assert out[1] == (
        '  $.result.text: expected "OLD TEXT for subagent c1",'
        ' got "message queued as the next turn for subagent c1"'
    )
    assert out[2].startswith("  after the send at line 15: ")
    assert '    -    "text": "OLD TEXT for subagent c1"' in out
    assert '    +    "text": "message queued as the next turn for subagent c1"' in out
    assert out[-1] == "1 passed, 1 failed"  # the next script still ran


def test_update_rewrites_the_expectations_keeping_placeholders(tmp_path):
    """The broken copy, updated, is the original again: texts from the frames received, the
    missing expect written back, every ${name} where it stood."""
    path = broken_flows(tmp_path)
    done = subagentd("replay", "--update", str(path))
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith(f"updated {path} ")
    assert path.read_text() == FLOWS.read_text()
    again = subagentd("replay", "--update", str(path))
    assert again.stdout.startswith(f"unchanged {path} ")


def test_junit_xml_names_each_script_and_carries_the_report(tmp_path):
    report = tmp_path / "out" / "junit.xml"
    report.parent.mkdir()
    bad = broken_flows(tmp_path)
    done = subagentd("replay", "--junit", str(report), str(SCRIPTS / "lifecycle.jsonl"), str(bad))
    assert done.returncode == 1
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {"lifecycle.jsonl", "flows.jsonl"}
    assert cases["lifecycle.jsonl"].find("failure") is None
    failure = cases["flows.jsonl"].find("failure")
    assert failure is not None
    assert (
        failure.get("message")
        == "flows.jsonl: line 16: the frame received does not match the expect"
    )
    assert '+    "text": "message queued as the next turn for subagent c1"' in (failure.text or "")


def test_serve_options_reach_the_server_replayed(tmp_path):
    """--max-depth 1 refuses the grandchild flows.jsonl spawns: the replay fails right there."""
    done = subagentd("replay", "--max-depth", "1", str(FLOWS))
    assert done.returncode == 1
    first = done.stdout.splitlines()[0]
    assert first.startswith("FAIL flows.jsonl: line ") and "does not match" in first
    assert '"code": 1007' in done.stdout


def test_the_replayed_server_reads_no_subagentd_variable():
    """The same transcript means the same everywhere: SUBAGENTD_MAX_DEPTH does not reach it."""
    done = subagentd("replay", str(FLOWS), env={"SUBAGENTD_MAX_DEPTH": "1"})
    assert done.returncode == 0, done.stdout


def test_a_malformed_script_is_an_error_naming_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"comment": "ok"}\n{"expect": 1, "send": 2}\n')
    done = subagentd("replay", "--junit", str(tmp_path / "j.xml"), str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "FAIL bad.jsonl:2: a step is an object with exactly one of"
        " send, send_raw, expect, close, comment, version"
    )
    assert 'errors="1"' in (tmp_path / "j.xml").read_text()


# --- serve --record ---------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_recorded_session_replays(tmp_path, store, request):
    """The served session of flows.jsonl, recorded, is a transcript that passes: ids minted by
    the server and timestamps are placeholders (no UUID is left), the shutdown is after close."""
    db = ":memory:" if store == "sqlite" else request.getfixturevalue("pg_stores").url()
    recording = tmp_path / "session.jsonl"
    assert replay(FLOWS, ["--record", str(recording)], db=db).failure is None
    text = recording.read_text()
    lines = text.splitlines()
    assert lines[0] == '{"version": 1}'
    assert '{"close": true}' in lines
    assert not UUID.search(text)
    sent = [json.loads(line)["send"] for line in lines if line.startswith('{"send"')]
    assert sent[-1] == {"jsonrpc": "2.0", "id": "script-end", "method": "ping"}
    db2 = ":memory:" if store == "sqlite" else request.getfixturevalue("pg_stores").url()
    outcome = replay(recording, db=db2)
    assert outcome.failure is None, outcome.failure


def test_a_record_file_that_cannot_be_written_stops_serve_with_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "serve", "--db", ":memory:"]
        + ["--record", str(tmp_path / "no" / "such" / "dir.jsonl")],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cannot start: --record " in done.stderr and "No such file or directory" in done.stderr


def test_the_demo_recording_in_the_repository_replays(tmp_path):
    """tests/scripts/demo: `subagentd demo --record` (two subagentd processes on one file)."""
    parts = sorted((SCRIPTS / "demo").glob("demo-*.jsonl"))
    assert [p.name for p in parts] == ["demo-1.jsonl", "demo-2.jsonl"]
    done = subagentd("replay", "--db", str(tmp_path / "demo.db"), *map(str, parts))
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "2 passed, 0 failed"


def test_the_demo_records_and_its_recording_replays(tmp_path):
    done = subagentd("demo", "--record", str(tmp_path / "rec"))
    assert done.returncode == 0, done.stderr
    parts = sorted((tmp_path / "rec").glob("*.jsonl"))
    assert [p.name for p in parts] == ["demo-1.jsonl", "demo-2.jsonl"]
    again = subagentd("replay", "--db", str(tmp_path / "again.db"), *map(str, parts))
    assert again.returncode == 0, again.stdout


def test_a_deeply_nested_line_fails_its_transcript_and_the_others_still_run(tmp_path):
    """Too deep for the parser (100,000 levels), or parsed but too deep to send (900 levels):
    each is that transcript's error; the next transcript runs and the JUnit file is written."""
    unparsable = tmp_path / "unparsable.jsonl"
    unparsable.write_text('{"send": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    unsendable = tmp_path / "unsendable.jsonl"
    unsendable.write_text('{"comment": "deep"}\n{"send": ' + "[" * 900 + "]" * 900 + "}\n")
    report = tmp_path / "j.xml"
    done = subagentd("replay", "--junit", str(report), str(unparsable), str(unsendable), str(FLOWS))
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "FAIL unparsable.jsonl:1: a JSON value nested too deeply to replay"
    assert lines[1] == "FAIL unsendable.jsonl: line 2: a JSON value nested too deeply to replay"
    assert lines[2].startswith(f"ok {FLOWS} (")
    assert lines[3] == "1 passed, 2 failed"
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("errors")) == ("3", "2")


def test_a_frame_the_server_discards_is_not_buffered_nor_recorded(tmp_path):
    """Past --max-frame-bytes the recorder, like the server, keeps nothing of the frame: a
    comment says where it was; the next frame is recorded and answered as usual."""
    recording = tmp_path / "session.jsonl"
    big = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "y" * 3_000_000}}
    )
    ping = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "serve", "--db", ":memory:"]
        + ["--max-frame-bytes", "1000", "--record", str(recording)],
        input=big + "\n" + ping + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [None, 2]
    steps = [json.loads(line) for line in recording.read_text().splitlines()]
    assert steps[1] == {
        "comment": "a frame from the host longer than 1000 bytes (--max-frame-bytes) was"
        " discarded here, unrecorded"
    }
    sent = [step for step in steps if "send" in step or "send_raw" in step]
    assert sent == [{"send": {"jsonrpc": "2.0", "id": 2, "method": "ping"}}]
    assert recording.stat().st_size < 2000


def test_recordings_and_reports_are_created_private_whatever_the_umask(tmp_path):
    """0600 files (0700 for the directory the demo makes), with a umask that would give 0644."""
    env = {**os.environ}
    umask = "umask 022; exec " + " ".join([sys.executable, "-m", "subagentd"])
    recording = tmp_path / "session.jsonl"
    subprocess.run(
        ["sh", "-c", f"{umask} serve --db :memory: --record {recording}"],
        input="",
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert oct(recording.stat().st_mode & 0o777) == "0o600"
    report = tmp_path / "j.xml"
    subprocess.run(
        ["sh", "-c", f"{umask} replay --junit {report} {FLOWS}"], capture_output=True, timeout=240
    )
    assert oct(report.stat().st_mode & 0o777) == "0o600"
    rec = tmp_path / "rec"
    done = subprocess.run(
        ["sh", "-c", f"{umask} demo --db {tmp_path / 'd.db'} --record {rec}"],
        capture_output=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert oct(rec.stat().st_mode & 0o777) == "0o700"
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in rec.iterdir()}
    assert modes == {"demo-1.jsonl": "0o600", "demo-2.jsonl": "0o600"}
    page = tmp_path / "t.html"
    done = subprocess.run(
        ["sh", "-c", f"{umask} inspect --db {tmp_path / 'd.db'} --html {page}"],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert oct(page.stat().st_mode & 0o777) == "0o600"
