"""server/stats in core (core/commits.py, Service.stats): group commits are counted only when
they wrote something, their latency percentiles are nearest-rank over the recent window, and the
figures combine the database's with this process's. Fast; in the mutation selection."""

from __future__ import annotations

from collections import deque

import pytest

from subagentd.core import commits
from subagentd.core.commits import WINDOW, CommitRecorder
from subagentd.schema.stats import CommitLatency, SessionCounts
from tests.core_host import CoreHost


class FakeStore:
    def __init__(self, dirty: bool) -> None:
        self.dirty, self.commits = dirty, 0

    def commit(self) -> None:
        self.commits += 1


def test_a_commit_with_nothing_written_is_committed_but_not_counted():
    recorder = CommitRecorder()
    store = FakeStore(dirty=False)
    recorder.commit(store)
    assert store.commits == 1
    assert (recorder.count, list(recorder.recent)) == (0, [])
    assert recorder.percentile(0.5) is None and recorder.percentile(0.99) is None


def test_a_commit_that_wrote_is_counted_with_its_latency():
    recorder = CommitRecorder()
    store = FakeStore(dirty=True)
    recorder.commit(store)
    recorder.commit(store)
    assert store.commits == 2 and recorder.count == 2
    assert len(recorder.recent) == 2 and all(0 <= t < 1 for t in recorder.recent)


@pytest.mark.parametrize(
    ("fraction", "expected"), [(0.0, 1.0), (0.01, 1.0), (0.5, 50.0), (0.99, 99.0), (1.0, 100.0)]
)
def test_percentiles_are_nearest_rank_over_the_recent_commits(fraction, expected):
    recorder = CommitRecorder()
    recorder.recent.extend(float(n) for n in (100 - i for i in range(100)))  # any order
    assert recorder.percentile(fraction) == expected


def test_a_fraction_past_one_is_the_slowest_commit():
    recorder = CommitRecorder()
    recorder.recent.extend([0.3, 0.1, 0.2])
    assert recorder.percentile(2.0) == 0.3


def test_one_commit_is_every_percentile():
    recorder = CommitRecorder()
    recorder.recent.append(0.25)
    assert recorder.percentile(0.5) == recorder.percentile(0.99) == 0.25


def test_only_the_most_recent_window_of_commits_is_kept():
    recorder = CommitRecorder()
    store = FakeStore(dirty=True)
    for _ in range(WINDOW + 10):
        recorder.commit(store)
    assert WINDOW == 4096
    assert recorder.count == WINDOW + 10 and len(recorder.recent) == WINDOW


def test_stats_combine_the_database_with_this_process(monkeypatch):
    core = CoreHost.with_tree()  # root, stranger, c1 -> g1, c2: all live; c1, c2, g1 running
    core.svc.commit()  # before the recorder is swapped in: it holds exactly the figures below
    recorder = CommitRecorder()
    recorder.count = 7
    recorder.recent = deque([0.1234567, 0.0012345, 0.0012346, 0.004])
    monkeypatch.setattr(commits, "COMMITS", recorder)
    monkeypatch.setattr("subagentd.core.service.COMMITS", recorder)
    figures = core.svc.stats()
    assert figures.live_here == 5
    assert figures.commits == 7
    assert figures.commit_latency == CommitLatency(p50_ms=1.235, p99_ms=123.457)  # ms, 3 decimals
    assert figures.sessions == SessionCounts(running=3, idle=2, ready=0)


def test_stats_before_any_commit_have_no_latency(monkeypatch):
    core = CoreHost()
    monkeypatch.setattr("subagentd.core.service.COMMITS", CommitRecorder())
    figures = core.svc.stats()
    assert (figures.live_here, figures.commits, figures.commit_latency) == (0, 0, None)


def test_p99_is_not_the_slowest_commit_when_there_are_many(monkeypatch):
    core = CoreHost()
    recorder = CommitRecorder()
    recorder.recent.extend(n / 1000 for n in range(1, 201))  # 1 ms … 200 ms
    monkeypatch.setattr("subagentd.core.service.COMMITS", recorder)
    assert core.svc.stats().commit_latency == CommitLatency(p50_ms=100.0, p99_ms=198.0)
