"""The next batch's size (``projector.batch_max_s``), pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamproc.runtime.batching import FIRST_BATCH, HEADROOM, BatchSizer


def test_without_a_time_bound_every_batch_is_the_limit() -> None:
    s = BatchSizer(1000, None)
    s.observe(1000, 30.0)
    assert s.size == 1000


def test_a_start_is_small_then_doubles_while_batches_fit() -> None:
    s = BatchSizer(1000, 1.0)
    sizes = [s.size]
    while s.size < 1000:
        s.observe(s.size, s.size * 0.0001)  # 0.1 ms an event: 1,000 fit in 0.1 s
        sizes.append(s.size)
    assert sizes == [FIRST_BATCH, 32, 64, 128, 256, 512, 1000]


def test_a_batch_over_the_time_shrinks_the_next_to_what_fits() -> None:
    s = BatchSizer(1000, 1.0)
    s.size = 1000
    s.observe(1000, 5.0)  # 5 ms an event
    assert s.size == int(HEADROOM * 1.0 / 0.005)
    s.observe(s.size, s.size * 0.005)
    assert s.size == 160  # it fits now: it stays


def test_a_partial_batch_within_the_time_changes_nothing() -> None:
    s = BatchSizer(1000, 1.0)
    s.size = 400
    s.observe(3, 0.001)  # what had arrived: says nothing about 800 events
    assert s.size == 400
    s.observe(3, 3.0)  # but a slow one shrinks it: 1 s an event, one at a time
    assert s.size == 1


@given(
    limit=st.integers(1, 10_000),
    max_s=st.floats(0.01, 60),
    runs=st.lists(st.tuples(st.integers(0, 10_000), st.floats(0, 100)), max_size=30),
)
def test_the_size_stays_between_one_and_the_limit_and_at_most_doubles(
    limit: int, max_s: float, runs: list[tuple[int, float]]
) -> None:
    s = BatchSizer(limit, max_s)
    for events, seconds in runs:
        before = s.size
        s.observe(events, seconds)
        assert 1 <= s.size <= limit
        assert s.size <= 2 * before
        if events > 0 and seconds > max_s:  # a batch over the time: the next is smaller
            assert s.size < events or s.size == 1
