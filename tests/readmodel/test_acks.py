"""Acknowledgements of deltas, folded purely: recorded, replaced, rejected for what is not a
delta (also within the batch that makes it one), per tenant, replayed to the same state."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.readmodel.acks import DeltaAcks
from streamproc.state.digest import state_digest
from tests.readmodel.util import Log

NAME = DeltaAcks.name
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def run_with_delta(log: Log, tenant: str = "t1") -> None:
    """Run r1 whose image D1 got worse and whose image D2 did not."""
    log.emit("run.requested", p.RunRequested(run_id="r1", trigger="manual"), tenant)
    log.emit(
        "segment.enqueued",
        p.SegmentEnqueued(segment_id="g", run_id="r1", shard=0, digests=[D1, D2]),
        tenant,
    )
    log.emit(
        "verdict.recorded",
        p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1, new_criticals=1),
        tenant,
    )
    log.emit("verdict.recorded", p.VerdictRecorded(run_id="r1", segment_id="g", digest=D2), tenant)


def ack(digest: str = D1, **kw: object) -> p.DeltaAcknowledged:
    return p.DeltaAcknowledged(run_id="r1", digest=digest, **kw)  # type: ignore[arg-type]


def test_acknowledged_then_replaced() -> None:
    log = Log()
    run_with_delta(log)
    assert log.rm.acknowledgement("t1", "r1", D1) is None
    seq = log.emit("delta.acknowledged", ack(by="alice", note="on it", ticket="SEC-1"))
    assert log.rejection(seq, NAME) is None
    rec = log.rm.acknowledgement("t1", "r1", D1)
    assert rec is not None
    assert (rec.by, rec.note, rec.ticket, rec.seq) == ("alice", "on it", "SEC-1", seq)
    assert rec.acknowledged_ms == 1_700_000_000_000 + seq - 1  # the event's HLC time

    later = log.emit("delta.acknowledged", ack(by="bob", ticket="SEC-2"))
    rec = log.rm.acknowledgement("t1", "r1", D1)
    assert rec is not None and (rec.by, rec.note, rec.ticket, rec.seq) == (
        "bob",
        None,
        "SEC-2",
        later,
    )
    assert log.rm.acknowledgement("t2", "r1", D1) is None, "another tenant's is not there"


def test_what_is_not_a_delta_is_rejected_and_recorded_nowhere() -> None:
    log = Log()
    unknown_run = log.emit("delta.acknowledged", ack())
    assert log.rejection(unknown_run, NAME) == "unknown_delta"
    run_with_delta(log)
    no_delta = log.emit("delta.acknowledged", ack(D2))  # evaluated, but nothing got worse
    assert log.rejection(no_delta, NAME) == "unknown_delta"
    other_tenant = log.emit("delta.acknowledged", ack(), tenant="t2")
    assert log.rejection(other_tenant, NAME) == "unknown_delta"
    assert log.rm.acknowledgement("t1", "r1", D2) is None
    assert log.rm.acknowledgement("t2", "r1", D1) is None


def test_a_delta_made_earlier_in_the_same_batch_can_be_acknowledged() -> None:
    """The fold reads the run's deltas with the batch's pending writes: the projector may
    fold the verdict and its acknowledgement together."""
    log = Log()
    log.emit("run.requested", p.RunRequested(run_id="r1", trigger="manual"))
    log.emit(
        "segment.enqueued", p.SegmentEnqueued(segment_id="g", run_id="r1", shard=0, digests=[D1])
    )
    seq = log.fold(
        log.event(
            "verdict.recorded",
            p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1, new_high=2),
        ),
        log.event("delta.acknowledged", ack(by="alice")),
    )
    assert log.rejection(seq, NAME) is None
    assert log.rm.acknowledgement("t1", "r1", D1) is not None


def test_replay_is_byte_identical() -> None:
    one, many = Log(), Log()
    events = [
        ("run.requested", p.RunRequested(run_id="r1", trigger="manual")),
        ("segment.enqueued", p.SegmentEnqueued(segment_id="g", run_id="r1", shard=0, digests=[D1])),
        ("verdict.recorded", p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1, new_high=1)),
        ("delta.acknowledged", ack(by="alice", note="triaged")),
        ("delta.acknowledged", ack(D2)),
        ("delta.acknowledged", ack(by="bob", ticket="SEC-9")),
    ]
    stamped = [one.event(k, e, ms=1_700_000_000_000 + i) for i, (k, e) in enumerate(events)]
    one.fold(*stamped)
    for e in stamped:
        many.fold(e)
    assert state_digest(one.store) == state_digest(many.store)
    assert many.rm.acknowledgement("t1", "r1", D1) is not None
