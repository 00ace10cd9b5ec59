"""Hybrid logical clock: monotonicity under hostile wall clocks, merge, key order, skew,
crash-safe persistence and parse errors."""

from __future__ import annotations

import tempfile
from itertools import pairwise
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamproc import metrics
from streamproc.hlc import (
    KEY_WIDTH,
    MAX_LOGICAL,
    MAX_RESERVE_MS,
    ClockSkewError,
    HlcError,
    HybridLogicalClock,
    Timestamp,
    sort_key,
    validate_node,
)

SKEW = 5_000
BASE = 1_700_000_000_000
HOUR_MS = 3_600_000


class FakeWall:
    """An injectable wall clock (ms) the test moves by hand, in any direction."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def skew_rejections() -> float:
    return metrics.HLC_SKEW_REJECTIONS._value.get()


# ---------------------------------------------------------------- strategies

NODE_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
nodes = st.text(alphabet=NODE_CHARS, min_size=1, max_size=32)
# Short nodes from a tiny alphabet, so equal nodes and nodes that are prefixes of each other
# ("a", "a-", "a-b") come up constantly.
short_nodes = st.text(alphabet="a-.0", min_size=1, max_size=4)
any_node = st.one_of(short_nodes, nodes)

wall_step = st.one_of(
    st.sampled_from([0, 0, 1, -1]),  # repeat, tick, tiny step back
    st.integers(-5, 5),
    st.integers(-2 * HOUR_MS, 2 * HOUR_MS),  # jumps both ways
    st.integers(-(10**12), 10**12),  # wild jumps
)
logicals = st.one_of(
    st.integers(0, 5), st.integers(0, MAX_LOGICAL), st.just(MAX_LOGICAL), st.just(MAX_LOGICAL - 1)
)
# A remote's physical time relative to the wall at the moment of receive: mostly within the
# skew bound (including exactly on it), sometimes beyond it.
remote_offset = st.one_of(
    st.integers(-3, 3),
    st.just(SKEW),
    st.integers(-HOUR_MS, SKEW),
    st.integers(SKEW + 1, SKEW + HOUR_MS),
)
op = st.one_of(
    st.tuples(st.just("now"), wall_step),
    st.tuples(st.just("recv"), wall_step, remote_offset, logicals, any_node),
)
ops = st.lists(op, min_size=1, max_size=60)


def run_ops(clock: HybridLogicalClock, wall: FakeWall, sequence: list) -> list[Timestamp]:
    """Apply ops; check the receive contract on the way; return every issued timestamp."""
    issued: list[Timestamp] = []
    for step in sequence:
        wall.value = max(0, wall.value + step[1])
        if step[0] == "now":
            issued.append(clock.now())
            continue
        _, _, offset, logical, node = step
        remote = Timestamp(max(0, wall.value + offset), logical, node)
        if remote.physical - wall.value > clock.max_clock_skew_ms:
            with pytest.raises(ClockSkewError):
                clock.receive(remote)
            continue
        got = clock.receive(remote)
        assert got > remote, (got, remote)
        assert all(got > prev for prev in issued), (got, issued[-1:])
        assert got.node == clock.node
        issued.append(got)
    return issued


# ---------------------------------------------------------------- (1) + (2) monotonicity


@settings(max_examples=200)
@given(sequence=ops, start=st.integers(0, 2 * BASE))
def test_issued_timestamps_strictly_increase_under_any_wall_clock(sequence, start):
    wall = FakeWall(start)
    clock = HybridLogicalClock("local", max_clock_skew_ms=SKEW, wall=wall)
    issued = run_ops(clock, wall, sequence)
    for a, b in pairwise(issued):
        assert a < b, (a, b)
        assert (a.physical, a.logical) < (b.physical, b.logical)


@settings(max_examples=200)
@given(
    history=ops,
    offset=st.integers(-HOUR_MS, SKEW),
    logical=logicals,
    node=any_node,
    step=wall_step,
)
def test_receive_is_after_remote_and_everything_issued(history, offset, logical, node, step):
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("local", max_clock_skew_ms=SKEW, wall=wall)
    issued = run_ops(clock, wall, history)
    wall.value = max(0, wall.value + step)
    remote = Timestamp(max(0, wall.value + offset), logical, node)
    got = clock.receive(str(remote))  # the string form is parsed
    assert got > remote
    assert (got.physical, got.logical) > (remote.physical, remote.logical)
    for prev in issued:
        assert got > prev
    assert clock.now() > got


def test_receive_with_equal_physical_takes_max_logical_plus_one():
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("b", wall=wall)
    clock.now()  # (BASE, 0)
    clock.now()  # (BASE, 1)
    got = clock.receive(Timestamp(BASE, 7, "a"))
    assert got == Timestamp(BASE, 8, "b")
    got = clock.receive(Timestamp(BASE, 3, "z"))
    assert got == Timestamp(BASE, 9, "b")


def test_logical_overflow_borrows_the_next_millisecond():
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", wall=wall)
    got = clock.receive(Timestamp(BASE, MAX_LOGICAL, "r"))
    assert got == Timestamp(BASE + 1, 0, "n")
    assert got.key() == Timestamp.from_key(got.key()).key()


# ---------------------------------------------------------------- (3) key order


timestamps = st.builds(
    Timestamp,
    st.one_of(st.integers(0, 10), st.integers(0, 10**19 - 1)),
    st.one_of(st.integers(0, 3), st.integers(0, MAX_LOGICAL)),
    any_node,
)


@settings(max_examples=500)
@given(a=timestamps, b=timestamps)
def test_key_byte_order_equals_tuple_order(a, b):
    ka, kb = a.key(), b.key()
    assert len(ka) == len(kb) == KEY_WIDTH
    assert (ka < kb) == (a < b)
    assert (ka == kb) == (a == b)
    assert (ka > kb) == (a > b)
    assert Timestamp.from_key(ka) == a
    assert Timestamp.from_key(kb) == b


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Timestamp(1, 0, "a"), Timestamp(1, 0, "a-")),
        (Timestamp(1, 0, "a"), Timestamp(1, 0, "aa")),
        (Timestamp(1, 0, "a-"), Timestamp(1, 0, "a0")),
        (Timestamp(1, 0, "z" * 32), Timestamp(1, 1, "0")),
        (Timestamp(1, MAX_LOGICAL, "n"), Timestamp(2, 0, "n")),
        (Timestamp(255, 0, "n"), Timestamp(256, 0, "n")),
    ],
)
def test_key_order_edge_cases(a, b):
    assert a < b
    assert a.key() < b.key()
    assert sorted([b.key(), a.key()]) == [a.key(), b.key()]


@given(ts=timestamps)
def test_string_roundtrip_and_sort_key(ts):
    assert Timestamp.parse(str(ts)) == ts
    assert sort_key(str(ts)) == tuple(ts)


@pytest.mark.parametrize("length", [0, KEY_WIDTH - 1, KEY_WIDTH + 1])
def test_from_key_refuses_wrong_width(length):
    with pytest.raises(HlcError, match="bytes"):
        Timestamp.from_key(b"\x01" * length)


# ---------------------------------------------------------------- (4) skew


def test_remote_too_far_ahead_is_refused_counted_and_not_merged():
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", max_clock_skew_ms=SKEW, wall=wall)
    before_ts = clock.now()
    before = skew_rejections()
    remote = Timestamp(BASE + SKEW + 1, 0, "far")
    with pytest.raises(ClockSkewError) as info:
        clock.receive(remote)
    assert info.value.remote == remote
    assert info.value.ahead_ms == SKEW + 1
    assert skew_rejections() == before + 1
    nxt = clock.now()
    assert nxt.physical == BASE
    assert nxt.physical != remote.physical
    assert nxt == Timestamp(BASE, before_ts.logical + 1, "n")

    # the string form goes through the same check
    with pytest.raises(ClockSkewError):
        clock.receive(str(Timestamp(BASE + 10 * SKEW, 3, "far")))
    assert skew_rejections() == before + 2
    assert clock.now().physical == BASE


def test_the_offset_gauge_follows_a_remote_clock_ahead():
    """``hlc_physical_offset_seconds`` is the HLC's lead over the wall clock: a remote clock
    ahead (within the bound) pulls it forward, and it falls back once the wall catches up;
    ``hlc_ticks_total`` counts every timestamp issued."""
    from prometheus_client import REGISTRY

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", max_clock_skew_ms=SKEW, wall=wall)
    ticks = sample("hlc_ticks_total")
    clock.now()
    assert sample("hlc_physical_offset_seconds") == 0.0
    clock.receive(Timestamp(BASE + 2_000, 7, "ahead"))
    assert sample("hlc_physical_offset_seconds") == 2.0
    wall.value = BASE + 500
    assert clock.now() == Timestamp(BASE + 2_000, 9, "n")
    assert sample("hlc_physical_offset_seconds") == 1.5
    wall.value = BASE + 2_500
    clock.now()
    assert sample("hlc_physical_offset_seconds") == 0.0
    assert sample("hlc_ticks_total") == ticks + 4


def test_check_skew_refuses_and_counts_without_merging():
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", max_clock_skew_ms=SKEW, wall=wall)
    before = skew_rejections()
    with pytest.raises(ClockSkewError):
        clock.check_skew(Timestamp(BASE + SKEW + 1, 0, "far"))
    assert skew_rejections() == before + 1
    clock.check_skew(Timestamp(BASE + SKEW, 0, "near"))  # on the bound: fine
    assert skew_rejections() == before + 1
    assert clock.now().physical == BASE


def test_remote_within_bound_is_merged():
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", max_clock_skew_ms=SKEW, wall=wall)
    before = skew_rejections()
    remote = Timestamp(BASE + SKEW, 4, "near")  # exactly on the bound
    got = clock.receive(remote)
    assert got == Timestamp(BASE + SKEW, 5, "n")
    assert skew_rejections() == before
    assert clock.now() == Timestamp(BASE + SKEW, 6, "n")


@settings(max_examples=200)
@given(
    ahead=st.integers(SKEW + 1, 10**12),
    within=st.integers(-HOUR_MS, SKEW),
    logical=st.integers(0, 1000),
    wall_value=st.integers(0, 2 * BASE),
)
def test_skew_bound_property(ahead, within, logical, wall_value):
    wall = FakeWall(wall_value)
    clock = HybridLogicalClock("n", max_clock_skew_ms=SKEW, wall=wall)
    before = skew_rejections()
    far = Timestamp(wall_value + ahead, logical, "far")
    with pytest.raises(ClockSkewError):
        clock.receive(far)
    assert skew_rejections() == before + 1
    assert clock.now().physical == wall_value  # not merged

    near = Timestamp(max(0, wall_value + within), logical, "near")
    got = clock.receive(near)
    assert skew_rejections() == before + 1
    assert got.physical == max(wall_value, near.physical)
    assert got > near


# ---------------------------------------------------------------- (5) persistence


def _issue_some(clock: HybridLogicalClock, wall: FakeWall) -> list[Timestamp]:
    issued = []
    steps = [0, 0, 1, 5, -3, 70_000, 0, -200, 61_000, 59_999, 1, 0, -HOUR_MS, 2]
    for i, step in enumerate(steps):
        wall.value += step
        issued.append(clock.now())
        if i % 3 == 0:
            issued.append(clock.receive(Timestamp(wall.value + 100, 9, "peer")))
    return issued


def test_crash_then_wall_clock_back_an_hour_resumes_above_everything(tmp_path):
    state = tmp_path / "hlc" / "state.json"
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", state_file=state, wall=wall)
    issued = _issue_some(clock, wall)
    assert state.exists()
    # crash: no close(); a new process starts on the same file with the clock an hour back
    wall2 = FakeWall(wall.value - HOUR_MS)
    restarted = HybridLogicalClock("n", state_file=state, wall=wall2)
    first = restarted.now()
    assert first > max(issued)
    assert restarted.now() > first


def test_crash_then_receive_first_resumes_above_everything(tmp_path):
    state = tmp_path / "state.json"
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", state_file=state, wall=wall)
    issued = _issue_some(clock, wall)
    wall2 = FakeWall(wall.value - HOUR_MS)
    restarted = HybridLogicalClock("n", state_file=state, wall=wall2)
    first = restarted.receive(Timestamp(wall2.value, 0, "peer"))
    assert first > max(issued)


def test_crash_restart_stamps_within_the_reserve_of_wall_and_last_issued(tmp_path):
    """A process killed mid-flight resumes at most ``reserve_ms`` (1 s) ahead: other
    processes (max_clock_skew 5 s) never refuse or hold what it stamps after the restart."""
    state = tmp_path / "state.json"
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", state_file=state, wall=wall)
    issued = []
    for _ in range(5_000):  # 5 s of stamping, one ms at a time
        wall.value += 1
        issued.append(clock.now())
    saved = msgspec.json.decode(state.read_bytes())
    assert 0 < saved["physical"] - issued[-1].physical <= MAX_RESERVE_MS
    restarted = HybridLogicalClock("n", state_file=state, wall=FakeWall(wall.value))
    first = restarted.now()
    assert first > max(issued)
    assert first.physical - wall.value <= MAX_RESERVE_MS
    # wall clock well past the ceiling: stamps follow the wall clock exactly
    later = HybridLogicalClock("n", state_file=state, wall=FakeWall(wall.value + 5_000))
    assert later.now().physical == wall.value + 5_000


def test_the_reserve_is_at_most_one_second():
    for bad in (0, 1_001, 60_000):
        with pytest.raises(ValueError, match="reserve"):
            HybridLogicalClock("n", reserve_ms=bad)


def test_clean_close_then_wall_clock_back_resumes_just_above(tmp_path):
    state = tmp_path / "state.json"
    wall = FakeWall(BASE)
    clock = HybridLogicalClock("n", state_file=state, wall=wall)
    issued = _issue_some(clock, wall)
    clock.close()
    wall2 = FakeWall(wall.value - HOUR_MS)
    restarted = HybridLogicalClock("n", state_file=state, wall=wall2)
    first = restarted.now()
    last = max(issued)
    assert first > last
    # exact state was saved: resumes right after the last issue, not a ceiling ahead
    assert first == Timestamp(last.physical, last.logical + 1, "n")
    # and a crash after that restart is still safe
    more = [restarted.now() for _ in range(3)]
    again = HybridLogicalClock("n", state_file=state, wall=FakeWall(wall2.value - HOUR_MS))
    assert again.now() > max(more)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=ops,
    clean=st.booleans(),
    back=st.integers(0, 2 * HOUR_MS),
    reserve=st.sampled_from([1, 250, 1000]),
)
def test_restart_never_goes_back_property(history, clean, back, reserve):
    with tempfile.TemporaryDirectory() as d:
        state = Path(d) / "state.json"
        wall = FakeWall(BASE)
        clock = HybridLogicalClock("n", state_file=state, wall=wall, reserve_ms=reserve)
        issued = run_ops(clock, wall, history)
        if clean:
            clock.close()
        restarted = HybridLogicalClock(
            "n",
            state_file=state,
            wall=FakeWall(max(0, wall.value - back)),
            reserve_ms=reserve,
        )
        first = restarted.now()
        if issued:
            assert first > max(issued)
            # ... and never more than the reserve above max(wall, last issued)
            assert first.physical <= max(max(issued).physical, restarted._wall()) + reserve


# ---------------------------------------------------------------- (6) parse errors


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1:2",
        "1:2:",
        ":2:n",
        "1::n",
        "a:2:n",
        "1:b:n",
        "-1:0:n",
        "1:-1:n",
        "+1:0:n",
        " 1:0:n",
        "1 :0:n",
        "1.5:0:n",
        "0x10:0:n",
        "1:0:n n",
        "1:0:n/x",
        "1:0:a:b",
        "1:0:" + "x" * 33,
        "1:0:nödé",
        f"{1 << 64}:0:n",
        f"1:{MAX_LOGICAL + 1}:n",
    ],
)
def test_parse_refuses_malformed(text):
    with pytest.raises(HlcError):
        Timestamp.parse(text)


def test_parse_accepts_bounds():
    assert Timestamp.parse(f"{10**19 - 1}:{MAX_LOGICAL}:{'z' * 32}") == Timestamp(
        10**19 - 1, MAX_LOGICAL, "z" * 32
    )
    assert Timestamp.parse("0:0:a") == Timestamp(0, 0, "a")


@pytest.mark.parametrize("text", ["\u00b2:0:n", "1:\u00b2:n", "1" * 5000 + ":0:n"])
def test_parse_raises_hlc_error_for_non_ascii_or_huge_digits(text):
    with pytest.raises(HlcError):
        Timestamp.parse(text)


def test_parse_refuses_non_ascii_digits():
    with pytest.raises(HlcError):
        Timestamp.parse("\u0661\u0662:0:n")


@pytest.mark.parametrize("check", ["node", "parse"])
def test_trailing_newline_in_node_is_refused(check):
    with pytest.raises(HlcError):
        if check == "node":
            validate_node("node\n")
        else:
            Timestamp.parse("1:2:node\n")


@pytest.mark.parametrize("node", ["", "a" * 33, "a b", "a:b", "ä", "a/b", "a*"])
def test_invalid_node_ids(node):
    with pytest.raises(HlcError):
        validate_node(node)
    with pytest.raises(HlcError):
        HybridLogicalClock(node)
