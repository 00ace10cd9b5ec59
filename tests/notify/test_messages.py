"""The Notify messages' timestamps: ``iso`` caches the formatted second (a run stamps
thousands of messages within one), so each millisecond must still read exactly as the
calendar says, across second, day and year boundaries and in any order."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from streamproc.notify.messages import iso


def _calendar(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@given(st.lists(st.integers(min_value=0, max_value=4_102_444_799_999), min_size=1, max_size=20))
def test_each_millisecond_reads_as_the_calendar_says(stamps: list[int]) -> None:
    for ms in stamps:
        assert iso(ms) == _calendar(ms)


def test_boundaries() -> None:
    for ms in (0, 999, 1000, 86_399_999, 86_400_000, 1_704_067_199_999, 1_704_067_200_000):
        assert iso(ms) == _calendar(ms)
    assert iso(1_796_599_834_945) == "2026-12-06T23:30:34.945Z"
