"""The GCRA arithmetic: a burst, then the rate; and the bound that holds for any sequence of
takes — in any window of w seconds, tokens used within their hold are at most w·rate plus
the configured burst."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamproc.runner import gcra

NS = gcra.NS


def test_the_burst_is_split_between_the_shared_bucket_and_the_hold() -> None:
    g = gcra.params(20, 1.0)  # 20/s with a burst of 1 s: 20 calls
    assert g.interval_ns == 50_000_000 and g.burst == 20
    assert g.tolerance_ns == 14 * g.interval_ns  # the shared bucket: 15 tokens at once
    assert g.hold_ns == 5 * g.interval_ns  # a quarter of the burst: 250 ms
    tiny = gcra.params(1, 0.5)  # less than one call of burst: one call, a short hold
    assert tiny.tolerance_ns == 0 and tiny.hold_ns == gcra.MIN_HOLD_NS
    assert tiny.burst == pytest.approx(1.02)  # the 20 ms a token takes to reach its call
    with pytest.raises(ValueError):
        gcra.params(0, 1)


def test_an_idle_bucket_grants_its_burst_then_paces() -> None:
    g = gcra.params(20, 1.0)
    now = 1_000 * NS
    first = gcra.take(g, 0, now, 100)
    assert first.granted == 15 and first.tat_ns == now + 15 * g.interval_ns
    none = gcra.take(g, first.tat_ns, now, 1)
    assert none.granted == 0 and none.tat_ns == first.tat_ns
    assert none.retry_ns == now + g.interval_ns  # one interval later, one more conforms
    later = gcra.take(g, first.tat_ns, none.retry_ns, 5)
    assert later.granted == 1
    rested = gcra.take(g, later.tat_ns, now + 10 * NS, 100)  # idle for long: a burst again
    assert rested.granted == 15


takes = st.lists(
    st.tuples(st.integers(0, 400_000_000), st.integers(1, 40)), min_size=1, max_size=200
)


@given(
    rate=st.sampled_from([1, 3, 20, 250, 5000]),
    burst_s=st.sampled_from([0.01, 0.3, 1.0, 2.5]),
    steps=takes,
    window_ms=st.sampled_from([100, 1000, 5000]),
)
def test_no_window_ever_holds_more_than_its_rate_and_one_burst(
    rate: int, burst_s: float, steps: list[tuple[int, int]], window_ms: int
) -> None:
    g = gcra.params(rate, burst_s)
    now, tat = 10 * NS, 0
    grants: list[int] = []
    for gap, want in steps:
        now += gap
        t = gcra.take(g, tat, now, want)
        assert t.granted <= want
        if t.granted:
            tat = t.tat_ns
            grants += [now] * t.granted
        else:
            assert t.retry_ns > now and gcra.take(g, tat, t.retry_ns, 1).granted == 1
    w = window_ms * 1_000_000
    # Each token used at the latest ``hold`` after its grant: a window [x, x + w] sees at
    # most the grants of [x - hold, x + w].
    for i, start in enumerate(grants):
        inside = sum(1 for t in grants[i:] if t <= start + g.hold_ns + w)
        assert inside <= (w / NS) * rate + g.burst + 1e-9, (start, inside)
