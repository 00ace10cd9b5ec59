"""Deterministic sample events of every kind, for tests, benchmarks and demos.

``sample_event(i)`` is a pure function of ``i``: the same index always gives the same event
(and id), so a test can publish, fold and compare against an in-memory fold of the same list.
"""

from __future__ import annotations

import hashlib

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def digest(n: int) -> str:
    return "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()


def sample_payload(kind: str, i: int) -> p.Payload:
    """The payload of ``kind`` that sample ``i`` carries."""
    run, seg, sched = f"run-{i // 50}", f"seg-{i // 10}", f"sched-{i % 13}"
    if kind == "schedule.created":
        return p.ScheduleCreated(
            schedule_id=sched, name=f"nightly {i}", cron="0 2 * * *", timezone="Europe/Sofia"
        )
    if kind == "schedule.updated":
        return p.ScheduleUpdated(schedule_id=sched, cron=f"{i % 60} 3 * * *")
    if kind in ("schedule.paused", "schedule.resumed", "schedule.deleted"):
        return p.ScheduleStateChange(schedule_id=sched, by="ops")
    if kind == "export.feedser":
        return p.FeedserExport(
            export_id=f"fx-{i}", changed_product_keys=[f"pkg:deb/debian/lib{i % 97}"], kev=[]
        )
    if kind == "export.vexer":
        return p.VexerExport(
            export_id=f"vx-{i}",
            changed_claims=[
                p.ChangedClaim(
                    product_key="pkg:deb/debian/openssl",
                    vuln_id=f"CVE-2026-{i % 9999:04d}",
                    status="not_affected→affected",
                )
            ],
        )
    if kind == "image.indexed":
        return p.ImageIndexed(
            digest=digest(i % 500),
            registry="registry.local",
            repository=f"team/app{i % 17}",
            tags=["prod-1"],
            components=[
                p.Component(
                    purl=f"pkg:deb/debian/lib{k}@1.{k}", product_key=f"pkg:deb/debian/lib{k}"
                )
                for k in range(i % 5)
            ],
        )
    if kind == "image.removed":
        return p.ImageRemoved(digest=digest(i % 500))
    if kind == "sbom.deleted":
        return p.SbomDeleted(sbom=digest(i), released_by=f"e{i}")
    if kind == "run.requested":
        return p.RunRequested(run_id=run, trigger="manual")
    if kind == "run.planned":
        return p.RunPlanned(run_id=run, trigger="manual")
    if kind == "run.cancel_requested":
        return p.RunCancelRequested(run_id=run)
    if kind == "run.cancelled":
        return p.RunCancelled(run_id=run)
    if kind == "run.completed":
        return p.RunCompleted(run_id=run)
    if kind == "segment.enqueued":
        return p.SegmentEnqueued(segment_id=seg, run_id=run, shard=i % 4, digests=[digest(i)])
    if kind == "segment.started":
        return p.SegmentStarted(segment_id=seg, run_id=run, runner="runner-1")
    if kind == "segment.completed":
        return p.SegmentCompleted(segment_id=seg, run_id=run, completed=1)
    if kind == "segment.failed":
        return p.SegmentFailed(segment_id=seg, run_id=run, reason="scanner unavailable")
    if kind == "verdict.recorded":
        return p.VerdictRecorded(run_id=run, segment_id=seg, digest=digest(i), new_high=i % 3)
    if kind == "delta.acknowledged":
        return p.DeltaAcknowledged(run_id=run, digest=digest(i), by="ops", ticket=f"SEC-{i}")
    if kind == "audit.snapshot":
        link = hashlib.sha256(str(i).encode()).hexdigest()
        return p.AuditSnapshot(
            from_chain_link=link,
            to_chain_link=link,
            from_position=0,
            to_position=0,
            entry_count=1,
            merkle_root=link,
            snapshot_hlc=f"{BASE_MS}:0:n1",
            envelope=p.DsseEnvelope(
                payloadType="application/json",
                payload="e30=",
                signatures=[p.DsseSignature(sig="AA==")],
            ),
        )
    raise ValueError(kind)


KIND_CYCLE = (
    "segment.started",
    "verdict.recorded",
    "segment.completed",
    "image.indexed",
    "verdict.recorded",
    "schedule.created",
    "segment.enqueued",
    "run.requested",
    "verdict.recorded",
    "export.feedser",
    "schedule.updated",
    "run.planned",
    "image.removed",
    "segment.failed",
    "export.vexer",
    "run.completed",
    "schedule.paused",
    "schedule.resumed",
    "run.cancel_requested",
    "run.cancelled",
    "schedule.deleted",
    "audit.snapshot",
)


def sample_event(i: int, tenants: int = 7, node: str = "sample") -> Envelope:
    kind = KIND_CYCLE[i % len(KIND_CYCLE)]
    return new_event(
        kind,
        f"tenant-{i % tenants}",
        sample_payload(kind, i),
        f"{BASE_MS + i}:{i % 3}:{node}",
        event_id=f"sample-{i}",
    )
