"""check_position: where a projector may resume on a stream, or why it must refuse."""

from __future__ import annotations

import pytest

from streamproc.runtime.position import PositionError, check_position
from streamproc.state.keys import Checkpoint

STREAM = "SCHEDULER"
EPOCH = "2024-01-01T00:00:00.000000000Z"
OTHER_EPOCH = "2024-06-01T12:00:00.000000000Z"


def cp(last_seq: int, epoch: str = EPOCH, stream: str = STREAM) -> Checkpoint:
    return Checkpoint(stream, epoch, last_seq)


@pytest.mark.parametrize("last_seq", [0, 1, 500])
def test_fresh_state_on_a_stream_starting_at_one(last_seq):
    assert check_position(STREAM, None, EPOCH, 1, last_seq) == 1


def test_fresh_state_on_an_empty_stream_with_first_zero():
    assert check_position(STREAM, None, EPOCH, 0, 0) == 1


def test_fresh_state_on_a_stream_that_lost_its_head():
    with pytest.raises(PositionError) as info:
        check_position(STREAM, None, EPOCH, 5, 100)
    msg = str(info.value)
    assert "1..4" in msg
    assert STREAM in msg
    assert "first is 5" in msg


@pytest.mark.parametrize(
    ("last_applied", "first", "last"), [(10, 1, 10), (10, 1, 50), (10, 11, 50)]
)
def test_matching_epoch_resumes_after_checkpoint(last_applied, first, last):
    assert check_position(STREAM, cp(last_applied), EPOCH, first, last) == last_applied + 1


def test_different_epoch_means_recreated():
    with pytest.raises(PositionError) as info:
        check_position(STREAM, cp(10), OTHER_EPOCH, 1, 50)
    msg = str(info.value)
    assert "recreated" in msg
    assert EPOCH in msg
    assert OTHER_EPOCH in msg


def test_different_stream_refused():
    with pytest.raises(PositionError, match="OTHER"):
        check_position(STREAM, cp(10, stream="OTHER"), EPOCH, 1, 50)


@pytest.mark.parametrize("last", [0, 5, 9])
def test_stream_shorter_than_checkpoint(last):
    with pytest.raises(PositionError) as info:
        check_position(STREAM, cp(10), EPOCH, 1, last)
    msg = str(info.value)
    assert f"ends at sequence {last}" in msg
    assert "10" in msg


@pytest.mark.parametrize(("first", "gap"), [(12, "11..11"), (20, "11..19"), (1000, "11..999")])
def test_retention_gap_after_checkpoint(first, gap):
    with pytest.raises(PositionError) as info:
        check_position(STREAM, cp(10), EPOCH, first, 2000)
    msg = str(info.value)
    assert gap in msg
    assert "gap" in msg


def test_first_seq_exactly_next_is_fine():
    assert check_position(STREAM, cp(10), EPOCH, 11, 40) == 11


def test_purged_stream_with_nothing_missed_is_fine():
    # everything up to the checkpoint was applied, then purged: first == last + 1 == cp + 1
    assert check_position(STREAM, cp(10), EPOCH, 11, 10) == 11


def test_position_error_is_a_runtime_error():
    assert issubclass(PositionError, RuntimeError)
