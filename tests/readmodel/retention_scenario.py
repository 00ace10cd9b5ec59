"""A year of synthetic run history for the retention tests (pure data, no I/O).

Times are HLC physical milliseconds, ``DAY`` apart from ``T0``; with the default 180-day
retention the clock passes several runs' expiry, a late event arrives for a pruned run, an
expired run's id is requested again and a rejected far-future event must not move the clock.
"""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event

T0 = 1_700_000_000_000
DAY = 86_400_000
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def at(day: float, kind: str, payload: p.Payload, tenant: str = "t1", n: int = 0) -> Envelope:
    return new_event(kind, tenant, payload, f"{T0 + int(day * DAY)}:{n}:n1")


def requested(run_id: str) -> p.RunRequested:
    return p.RunRequested(run_id=run_id, trigger="manual", reason=p.RunReason(text="why"))


def planned(run_id: str, *segs: str) -> p.RunPlanned:
    refs = [p.SegmentRef(segment_id=s, shard=0, images=1) for s in segs]
    return p.RunPlanned(run_id=run_id, trigger="manual", segments=refs)


def started(run_id: str, seg: str = "g1") -> p.SegmentStarted:
    return p.SegmentStarted(segment_id=seg, run_id=run_id, runner="w1")


def verdict(run_id: str, digest: str, criticals: int = 1) -> p.VerdictRecorded:
    return p.VerdictRecorded(run_id=run_id, segment_id="g1", digest=digest, new_criticals=criticals)


def scenario() -> list[Envelope]:
    """The log; see :data:`EXPECTED_AFTER` for what the read model holds at its end."""
    return [
        at(0, "run.requested", requested("old")),
        at(0, "run.planned", planned("old", "g1")),
        at(0, "segment.started", started("old")),
        at(0, "verdict.recorded", verdict("old", D1, 2)),
        at(0, "verdict.recorded", verdict("old", D2, 1)),
        at(1, "run.completed", p.RunCompleted(run_id="old")),
        at(0, "run.requested", requested("cancelled"), n=1),
        at(2, "run.cancelled", p.RunCancelled(run_id="cancelled", reason="operator")),
        at(0, "run.requested", requested("running"), n=2),
        at(0, "run.planned", planned("running", "g1", "g2"), n=2),
        at(0, "segment.started", started("running"), n=2),
        at(0, "run.requested", requested("other"), tenant="t2", n=3),
        at(0.5, "run.completed", p.RunCompleted(run_id="other"), tenant="t2"),
        at(10, "run.requested", requested("recent")),
        at(150, "run.completed", p.RunCompleted(run_id="recent", state="error", error="x")),
        at(
            100,
            "schedule.created",
            p.ScheduleCreated(schedule_id="s1", name="nightly", cron="0 2 * * *", timezone="UTC"),
        ),
        # rejected (no such run), far in the future: must not move the retention clock
        at(1000, "run.cancel_requested", p.RunCancelRequested(run_id="ghost")),
        # day 182: cutoff day 2 — "old" (day 1) and t2's "other" leave; "cancelled"
        # (finished exactly at day 2) stays
        at(182, "export.feedser", p.FeedserExport(export_id="e1")),
        at(183, "verdict.recorded", verdict("old", D1)),  # late, for a pruned run
        at(183, "run.requested", requested("old")),  # the expired id is free again
        # day 200: cutoff day 20 — "cancelled" leaves; "running" never does
        at(200, "segment.started", started("running", "g2")),
    ]


SEQ_LATE_VERDICT = 19
"""1-based position of the late verdict for the pruned run (rejected ``unknown_run``)."""
SEQ_GHOST = 17
EXPECTED_AFTER = {"t1": ["old", "recent", "running"], "t2": []}
"""Run ids left per tenant, newest request first."""
