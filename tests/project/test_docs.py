"""The user-facing documents speak of the product, not of its history: no issue numbers, no
work-session names, no commits named as columns or baselines. (Dated measurements that compare
revisions live in benchmarks/results/measurements.md, a log.) Also: the README's table of
contents lists its sections, and the project documents a newcomer looks for exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "PROTOCOL.md",
        ROOT / "SECURITY.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "CHANGELOG.md",
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "clients").glob("*/README.md"),
    }
)
HISTORY = {
    "an issue number": re.compile(r"\bissues? ?#?\d+|\(#\d+\)|\bPR ?#\d+", re.I),
    "a work session": re.compile(
        r"\b(first|second|third|fourth|fifth|sixth|earlier|previous) session\b"
        r"|\bsession of \d{4}-\d\d-\d\d|\bround (one|two|three|four)\b",
        re.I,
    ),
    "a commit": re.compile(r"(?<![\w-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w-])"),
    "a helper or branch of the work": re.compile(
        r"\bhelpers?'|\bother helpers?\b|\bbranch `", re.I
    ),
}


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_docs_carry_no_history(doc):
    found = [
        f"{doc.name}:{number}: {what}: {match.group(0)!r}"
        for number, line in enumerate(doc.read_text().splitlines(), 1)
        for what, pattern in HISTORY.items()
        for match in pattern.finditer(line)
    ]
    assert found == []


def test_the_patterns_catch_what_they_are_for():
    samples = {
        "an issue number": ["(issue #15)", "issue 16's targets", "issues #11 point 2", "(#33)"],
        "a work session": ["2026-12-01, third session", "session of 2026-12-01", "round three"],
        "a commit": ["baseline (90ea263)", "at bdea7e3", "| 98cb36b | ping |"],
        "a helper or branch of the work": ["loaded by other helpers", "on branch `mutants`"],
    }
    for what, lines in samples.items():
        for line in lines:
            assert HISTORY[what].search(line), (what, line)
    for harmless in ["activation_id d50a7f00-…", "<message-b8d3746a from=", "Bug #1, from 2019."]:
        assert not any(p.search(harmless) for p in HISTORY.values()), harmless


def test_the_readme_has_a_table_of_contents_of_its_sections():
    readme = (ROOT / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", readme, re.M)
    assert sections[0] == "Contents"
    contents = readme.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+?)\]\(#([\w-]+)\)$", contents, re.M)
    assert [title for title, _ in listed] == sections[1:]
    for title, anchor in listed:
        expected = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        assert anchor == expected, (title, anchor)


def test_the_readme_is_shorter_than_it_was():
    assert len((ROOT / "README.md").read_text().splitlines()) < 399


@pytest.mark.parametrize(
    "path",
    [
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "docs/versioning.md",
        ".github/ISSUE_TEMPLATE/bug_report.md",
        ".github/ISSUE_TEMPLATE/feature_request.md",
        ".github/pull_request_template.md",
    ],
)
def test_the_project_documents_exist(path):
    assert (ROOT / path).is_file(), path


def test_the_changelog_starts_at_todays_version():
    import subagentd

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in changelog
    versions = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert versions[:2] == ["Unreleased", subagentd.__version__]
