"""The coalescing rule, pure: a quiet system plans an export at once (the leading edge), the
exports arriving within the window after a run coalesce into the next one, when the window
closes — decided by HLC times alone, whatever order the exports are looked at in."""

from __future__ import annotations

import random
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from streamproc.planner.changes import ExportGroup, coalesce
from streamproc.planner.records import ExportRecord

D = 30_000


def rec(export_id: str, ms: int) -> ExportRecord:
    return ExportRecord(
        export_id=export_id, source="feedser", tenant="t1", ms=ms, hlc=f"{ms}:0:n",
        event_id=export_id,
    )  # fmt: skip


exports = st.lists(
    st.tuples(st.integers(0, 200_000), st.integers(0, 50)), max_size=40, unique_by=lambda t: t[1]
).map(lambda xs: [rec(f"e{i}", ms) for ms, i in xs])
windows = st.one_of(st.none(), st.integers(0, 200_000))
debounces = st.sampled_from([0, 1, 1_000, D])


def shape(groups: list[ExportGroup]) -> list[tuple[list[str], int]]:
    return [(g.export_ids, g.due_ms) for g in groups]


@settings(max_examples=300)
@given(pending=exports, debounce=debounces, window=windows, seed=st.integers(0, 1_000))
def test_coalescing_properties(
    pending: list[ExportRecord], debounce: int, window: int | None, seed: int
) -> None:
    groups = coalesce(pending, debounce, window)
    # every export in exactly one group, groups in HLC order
    flat = [e for g in groups for e in g.exports]
    assert sorted(x.export_id for x in flat) == sorted(e.export_id for e in pending)
    assert flat == sorted(pending, key=lambda e: (e.ms, e.export_id))
    # the same exports in any order: the same groups (and so the same run ids)
    shuffled = pending[:]
    random.Random(seed).shuffle(shuffled)
    assert shape(coalesce(shuffled, debounce, window)) == shape(groups)
    end = None if window is None else window + debounce
    for g in groups:
        first = g.exports[0]
        assert g.due_ms >= max(e.ms for e in g.exports), "never due before a member's stamp"
        if end is None or first.ms > end or not debounce:  # the leading edge: at once, alone
            assert g.due_ms == first.ms and {e.ms for e in g.exports} == {first.ms}
        else:  # within an open window: due when it closes, nothing stamped after it
            assert g.due_ms == end and all(e.ms <= end for e in g.exports)
        end = g.due_ms + debounce  # at most one run per window: throttled
    for a, b in pairwise(groups):
        assert b.due_ms >= a.due_ms + debounce
        assert b.exports[0].ms > max(e.ms for e in a.exports)


@given(
    n=st.integers(2, 50),
    t0=st.integers(1_000, 10**12),
    offsets=st.lists(st.integers(1, D), min_size=49, max_size=49),
    window=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_a_burst_after_a_quiet_spell_is_two_runs(
    n: int, t0: int, offsets: list[int], window: int | None
) -> None:
    """N exports within the window of the first: the first at once, the rest together."""
    burst = [rec("first", t0)] + [rec(f"x{i}", t0 + offsets[i]) for i in range(n - 1)]
    groups = coalesce(burst, D, None if window is None else min(window, t0 - D - 1))
    assert [g.export_ids for g in groups] == [["first"], sorted(e.export_id for e in burst[1:])]
    assert [g.due_ms for g in groups] == [t0, t0 + D]


def test_a_window_left_open_by_an_earlier_run() -> None:
    # the run requested at 10,000 keeps its window open until 40,000
    got = coalesce([rec("a", 39_999), rec("b", 40_000), rec("c", 40_001)], D, 10_000)
    assert shape(got) == [(["a", "b"], 40_000), (["c"], 70_000)]
    # closed by then: the next export is planned at once
    assert shape(coalesce([rec("a", 40_001)], D, 10_000)) == [(["a"], 40_001)]
    # with no debounce every export is a run of its own (same millisecond: together), also
    # one stamped before the last run was requested
    got = coalesce([rec("a", 5), rec("b", 5), rec("c", 6)], 0, None)
    assert shape(got) == [(["a", "b"], 5), (["c"], 6)]
    assert shape(coalesce([rec("a", 5), rec("c", 6)], 0, 10)) == [(["a"], 5), (["c"], 6)]
