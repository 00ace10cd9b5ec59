"""deliveries.scan and removed_from: a filtered consumer's batch read against the position
(pure), and whether the stream still holds what the consumer passed over."""

from __future__ import annotations

from streamproc.bus import jsapi
from streamproc.bus.ack import delivery
from streamproc.runtime.deliveries import removed_from, scan

EPOCH = "2026-01-01T00:00:00Z"


def msg(
    seq: int, dseq: int, pending: int = 0, delivered: int = 1
) -> tuple[int, bytes, bytes, bytes]:
    reply = f"$JS.ACK.S.C.{delivered}.{seq}.{dseq}.1700000000000000000.{pending}".encode()
    return (seq, b"p.events.t.image.x", b"{}", reply)


def info(first: int, last: int, deleted: list[int] | None = None, epoch: str = EPOCH):
    state = jsapi.StreamState(
        first_seq=first, last_seq=last, num_deleted=len(deleted or ()), deleted=deleted
    )
    return jsapi.StreamInfo(config={}, state=state, created=epoch)


def test_delivery_reads_both_ack_layouts() -> None:
    assert delivery(b"$JS.ACK.S.C.1.40.7.1700000000000000000.12") == (7, 12)
    assert delivery(b"$JS.ACK._.ACCHASH.S.C.2.40.7.1700000000000000000.3.rnd") == (7, 3)


def test_contiguous_deliveries_with_skipped_sequences() -> None:
    got = scan(
        [msg(3, 1, 2), msg(4, 2, 1), msg(9, 3, 0)], position=0, dseq=0, pending=5, consumer="C"
    )
    assert [m[0] for m in got.items] == [3, 4, 9]
    assert got.skips == [(0, 1, 2), (2, 5, 8)]
    assert (got.lost, got.dseq, got.pending) == ("", 3, 0)


def test_redeliveries_of_committed_messages_are_dropped() -> None:
    got = scan([msg(3, 1, delivered=2), msg(9, 4)], position=5, dseq=3, pending=1, consumer="C")
    assert [m[0] for m in got.items] == [9]
    assert got.skips == [(0, 6, 8)]


def test_a_delivery_that_never_arrived_stops_the_batch() -> None:
    got = scan([msg(3, 1), msg(9, 3), msg(10, 4)], position=0, dseq=0, pending=0, consumer="C")
    assert [m[0] for m in got.items] == [3]
    assert got.lost == "deliveries 2..2 of consumer C did not arrive"
    assert got.dseq == 1


def test_an_uncommitted_message_under_an_old_number_is_out_of_order() -> None:
    got = scan([msg(12, 2)], position=10, dseq=5, pending=0, consumer="C")
    assert got.items == [] and "out of order" in got.lost


def test_removed_from_head_and_middle() -> None:
    assert removed_from(info(1, 50), EPOCH, [(3, 8), (20, 30)]) is None
    assert removed_from(info(6, 50), EPOCH, [(3, 8), (20, 30)]) == (0, "events 3..5 were removed")
    assert removed_from(info(1, 50, [25]), EPOCH, [(3, 8), (20, 30)]) == (1, "event 25 was removed")
    assert removed_from(info(1, 50, [9, 12]), EPOCH, [(3, 8), (20, 30)]) is None
    assert removed_from(info(1, 50), "another", [(3, 8)]) == (
        0,
        "the stream was deleted or recreated",
    )
    assert removed_from(None, EPOCH, [(3, 8)]) == (0, "the stream was deleted or recreated")
