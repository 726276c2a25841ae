"""Ids and timestamps on every record (core/stamps.py): a minted id is exactly str(uuid.uuid4())
for the same random bytes, a timestamp is `YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC (it sorts as
text). Fast; written for the mutants of core/stamps.py (docs/mutation.md)."""

from __future__ import annotations

import uuid

import pytest

from subagentd.core import stamps


@pytest.mark.parametrize(
    "raw",
    [bytes(16), b"\xff" * 16, bytes(range(16)), bytes(range(240, 256)), b"\x5a\xa5" * 8],
)
def test_a_minted_id_is_the_version_4_uuid_of_its_random_bytes(monkeypatch, raw):
    monkeypatch.setattr(stamps.os, "urandom", lambda n: raw[:n] if n == 16 else b"")
    assert stamps.mint() == str(uuid.UUID(bytes=raw, version=4))


def test_minted_ids_are_random_version_4_uuids():
    ids = {stamps.mint() for _ in range(100)}
    assert len(ids) == 100
    for minted in ids:
        parsed = uuid.UUID(minted)
        assert (str(parsed), parsed.version, parsed.variant) == (minted, 4, uuid.RFC_4122)


def test_timestamps_are_utc_with_six_fraction_digits_across_seconds():
    # the formatted second is cached: each call below lands in another second than the last,
    # or in the same one, and must be right either way
    assert [
        stamps.stamp(t)
        for t in (0.5, 0.25, 86399.0625, 86399.125, 0.125, 1.999999, 5.99999975, 951782400.0)
    ] == [
        "1970-01-01T00:00:00.500000Z",
        "1970-01-01T00:00:00.250000Z",
        "1970-01-01T23:59:59.062500Z",
        "1970-01-01T23:59:59.125000Z",
        "1970-01-01T00:00:00.125000Z",
        "1970-01-01T00:00:01.999999Z",
        "1970-01-01T00:00:05.999999Z",  # microseconds are cut, never rounded up
        "2000-02-29T00:00:00.000000Z",
    ]


def test_now_is_the_stamp_of_the_current_time(monkeypatch):
    monkeypatch.setattr(stamps.time, "time", lambda: 1764547205.5)
    assert stamps.now() == "2025-12-01T00:00:05.500000Z"
