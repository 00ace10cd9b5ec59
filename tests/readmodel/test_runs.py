"""Runs fold: the state machine, stats from plan/segments/verdicts, deltas, rejections."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.readmodel.runs import Runs
from tests.readmodel.util import Log

NAME = Runs.name
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def requested(run_id: str = "r1") -> p.RunRequested:
    return p.RunRequested(run_id=run_id, trigger="manual", reason=p.RunReason(text="why"))


def planned() -> p.RunPlanned:
    return p.RunPlanned(
        run_id="r1",
        trigger="manual",
        stats=p.RunStats(candidates=7, deduped=6, queued=6),
        segments=[
            p.SegmentRef(segment_id="g1", shard=0, images=4),
            p.SegmentRef(segment_id="g2", shard=1, images=2),
        ],
    )


def enqueued(segment_id: str) -> p.SegmentEnqueued:
    return p.SegmentEnqueued(segment_id=segment_id, run_id="r1", shard=0, digests=[D1])


def test_full_lifecycle_folds_state_and_stats() -> None:
    log = Log()
    log.emit("run.requested", requested())
    run = log.rm.run("t1", "r1")
    assert run is not None and run.state == "planning" and run.reason.text == "why"
    log.emit("run.planned", planned())
    assert log.rm.run("t1", "r1").state == "queued"  # type: ignore[union-attr]
    log.emit(
        "segment.enqueued",
        p.SegmentEnqueued(segment_id="g1", run_id="r1", shard=0, digests=[D1, D2, D1, D2]),
    )
    assert log.rm.run("t1", "r1").state == "queued"  # type: ignore[union-attr]
    log.emit("segment.started", p.SegmentStarted(segment_id="g1", run_id="r1", runner="w1"))
    log.emit(
        "verdict.recorded",
        p.VerdictRecorded(run_id="r1", segment_id="g1", digest=D1, new_criticals=2, new_high=1),
    )
    log.emit("verdict.recorded", p.VerdictRecorded(run_id="r1", segment_id="g1", digest=D2))
    log.emit("segment.completed", p.SegmentCompleted(segment_id="g1", run_id="r1", completed=4))
    log.emit(
        "segment.failed", p.SegmentFailed(segment_id="g2", run_id="r1", reason="boom", deliveries=1)
    )
    log.emit(
        "segment.failed",
        p.SegmentFailed(
            segment_id="g2", run_id="r1", reason="boom", deliveries=5, dead_lettered=True
        ),
    )
    run = log.rm.run("t1", "r1")
    assert run is not None and run.state == "running" and run.started_ms
    s = run.stats
    assert (s.candidates, s.queued, s.completed, s.failed, s.deltas, s.new_criticals) == (
        7,
        6,
        4,
        2,
        1,
        2,
    )
    assert run.segments["g1"].state == "completed" and run.segments["g2"].state == "failed"
    assert run.segments["g2"].attempts == 5
    assert [d.digest for d in log.rm.deltas("t1", "r1", limit=10).items] == [D1]
    log.emit("run.completed", p.RunCompleted(run_id="r1"))
    run = log.rm.run("t1", "r1")
    assert run is not None and run.state == "completed" and run.finished_ms
    assert run.stats.completed == 4, "an empty final stats block keeps the folded counts"


def test_terminal_runs_refuse_cancel_and_late_segments() -> None:
    log = Log()
    log.emit("run.requested", requested())
    log.emit(
        "run.completed",
        p.RunCompleted(
            run_id="r1", state="error", error="scanner down", stats=p.RunStats(completed=3)
        ),
    )
    run = log.rm.run("t1", "r1")
    assert run is not None and run.state == "error" and run.stats.completed == 3
    for kind, payload in [
        ("run.cancel_requested", p.RunCancelRequested(run_id="r1")),
        ("run.cancelled", p.RunCancelled(run_id="r1")),
        ("segment.started", p.SegmentStarted(segment_id="g", run_id="r1", runner="w")),
        ("verdict.recorded", p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1)),
    ]:
        assert log.rejection(log.emit(kind, payload), NAME) == "run_finished", kind
    assert log.rm.run("t1", "r1").version == 2  # type: ignore[union-attr]


def test_cancel_flow_and_unknown_runs() -> None:
    log = Log()
    assert (
        log.rejection(log.emit("run.cancel_requested", p.RunCancelRequested(run_id="nope")), NAME)
        == "unknown_run"
    )
    log.emit("run.requested", requested())
    log.emit("run.cancel_requested", p.RunCancelRequested(run_id="r1", reason="oops"))
    run = log.rm.run("t1", "r1")
    assert run is not None and run.cancel_requested and run.state == "planning"
    log.emit("run.cancelled", p.RunCancelled(run_id="r1"))
    run = log.rm.run("t1", "r1")
    assert run is not None and run.state == "cancelled" and run.cancel_reason == "oops"
    assert log.rejection(log.emit("run.requested", requested()), NAME) == "run_exists"


def test_plan_after_running_is_an_invalid_transition_and_duplicate_segments_count_once() -> None:
    log = Log()
    log.emit("run.requested", requested())
    log.emit("segment.enqueued", enqueued("g1"))
    log.emit("segment.started", p.SegmentStarted(segment_id="g1", run_id="r1", runner="w"))
    assert log.rejection(log.emit("run.planned", planned()), NAME) == "invalid_transition"
    log.emit("segment.completed", p.SegmentCompleted(segment_id="g1", run_id="r1", completed=3))
    seq = log.emit(
        "segment.completed", p.SegmentCompleted(segment_id="g1", run_id="r1", completed=3)
    )
    assert log.rejection(seq, NAME) == "segment_finished"
    assert log.rm.run("t1", "r1").stats.completed == 3  # type: ignore[union-attr]


def test_a_re_evaluated_image_replaces_its_delta() -> None:
    log = Log()
    log.emit("run.requested", requested())
    log.emit("segment.enqueued", enqueued("g"))
    log.fold(
        log.event(
            "verdict.recorded",
            p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1, new_criticals=3),
        ),
        log.event(
            "verdict.recorded",
            p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1, new_criticals=1),
        ),
    )
    s = log.rm.run("t1", "r1").stats  # type: ignore[union-attr]
    assert (s.deltas, s.new_criticals) == (1, 1)
    log.emit("verdict.recorded", p.VerdictRecorded(run_id="r1", segment_id="g", digest=D1))
    s = log.rm.run("t1", "r1").stats  # type: ignore[union-attr]
    assert (s.deltas, s.new_criticals) == (0, 0)
    assert log.rm.deltas("t1", "r1", limit=5).items == []


def test_rejection_inside_a_batch_leaves_the_cached_run_untouched() -> None:
    log = Log()
    log.fold(
        log.event("run.requested", requested()),
        log.event("segment.enqueued", enqueued("g")),
        log.event(
            "segment.completed", p.SegmentCompleted(segment_id="g", run_id="r1", completed=2)
        ),
        log.event(
            "segment.completed", p.SegmentCompleted(segment_id="g", run_id="r1", completed=2)
        ),
        log.event("run.cancelled", p.RunCancelled(run_id="r1")),
        log.event("run.cancel_requested", p.RunCancelRequested(run_id="r1")),
    )
    run = log.rm.run("t1", "r1")
    assert run is not None
    assert (run.state, run.stats.completed, run.cancel_requested, run.version) == (
        "cancelled",
        2,
        False,
        5,
    )


def test_listing_is_newest_first_with_filters_and_cursors() -> None:
    log = Log()
    for i in range(7):
        log.emit(
            "run.requested", p.RunRequested(run_id=f"r{i}", trigger="cron" if i % 2 else "manual")
        )
    log.emit("run.requested", requested("other"), tenant="t2")
    log.emit("run.completed", p.RunCompleted(run_id="r3"))
    page = log.rm.runs("t1", limit=3)
    assert [r.id for r in page.items] == ["r6", "r5", "r4"]
    page2 = log.rm.runs("t1", limit=3, cursor=page.next_cursor)
    assert [r.id for r in page2.items] == ["r3", "r2", "r1"]
    page3 = log.rm.runs("t1", limit=3, cursor=page2.next_cursor)
    assert [r.id for r in page3.items] == ["r0"] and page3.next_cursor is None
    crons = log.rm.runs("t1", limit=10, triggers=frozenset({"cron"}))
    assert [r.id for r in crons.items] == ["r5", "r3", "r1"]
    done = log.rm.runs("t1", limit=10, states=frozenset({"completed"}))
    assert [r.id for r in done.items] == ["r3"]
    assert [r.id for r in log.rm.runs("t2", limit=10).items] == ["other"]
