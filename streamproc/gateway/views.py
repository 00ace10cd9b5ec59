"""Rendering read-model records as API views (next fire times are computed here, at read
time, in each schedule's own time zone)."""

from __future__ import annotations

from datetime import datetime

from streamproc.gateway.models import (
    DeltaView,
    ImageView,
    RunLinks,
    RunView,
    ScheduleView,
    SegmentCounts,
)
from streamproc.gateway.operations import BASE
from streamproc.readmodel.images import ImageSummary
from streamproc.readmodel.nextfire import iso, ms_to_iso, next_fire_times
from streamproc.readmodel.records import DeltaRecord, RunRecord, ScheduleRecord


def schedule_view(r: ScheduleRecord, now: datetime, next_n: int) -> ScheduleView:
    """The API's schedule, rendered from the read model's record.

    ``ScheduleView`` stays a type of its own, not the stored
    :class:`~streamproc.projections.schedule.ScheduleBase`: it is the published contract
    (``schemas/openapi.json``, whose field order it fixes), its times are RFC 3339 strings where
    records keep HLC milliseconds, it adds what is computed when read (``enabled``,
    ``nextFireTimes``), and so storage can change without changing what clients see.
    """
    active = not (r.paused or r.deleted)
    fires = next_fire_times(r.cron, r.timezone, now, next_n) if active else []
    return ScheduleView(
        id=r.id,
        tenant=r.tenant,
        name=r.name,
        enabled=not r.paused,
        paused=r.paused,
        cron=r.cron,
        timezone=r.timezone,
        mode=r.mode,
        selection=r.selection,
        only_if=r.only_if,
        notify=r.notify,
        limits=r.limits,
        subscriptions=r.subscriptions,
        created_by=r.created_by,
        updated_by=r.updated_by,
        created_at=ms_to_iso(r.created_ms) or "",
        updated_at=ms_to_iso(r.updated_ms) or "",
        version=r.version,
        deleted=r.deleted,
        deleted_at=ms_to_iso(r.deleted_ms),
        next_fire_times=[iso(t) for t in fires],
    )


def run_view(r: RunRecord) -> RunView:
    counts = SegmentCounts(total=len(r.segments))
    for seg in r.segments.values():
        setattr(counts, seg.state, getattr(counts, seg.state) + 1)
    url = f"{BASE}/runs/{r.id}"
    return RunView(
        id=r.id,
        tenant=r.tenant,
        trigger=r.trigger,
        state=r.state,
        schedule_id=r.schedule_id,
        schedule_ids=r.schedule_ids,
        mode=r.mode,
        selection=r.selection,
        reason=r.reason,
        requested_by=r.requested_by,
        cancel_requested=r.cancel_requested,
        cancel_reason=r.cancel_reason,
        stats=r.stats,
        segments=counts,
        degraded=r.degraded,
        degraded_reason=r.degraded_reason,
        coverage=r.coverage,
        error=r.error,
        requested_at=ms_to_iso(r.requested_ms) or "",
        started_at=ms_to_iso(r.started_ms),
        finished_at=ms_to_iso(r.finished_ms),
        updated_at=ms_to_iso(r.updated_ms) or "",
        version=r.version,
        links=RunLinks(self_=url, deltas=f"{url}/deltas"),
    )


def delta_view(d: DeltaRecord) -> DeltaView:
    return DeltaView(
        digest=d.digest,
        segment_id=d.segment_id,
        status=d.status,
        new_criticals=d.new_criticals,
        new_high=d.new_high,
        kev_hits=d.kev_hits,
        top_findings=d.top_findings,
        report_url=d.report_url,
    )


def image_view(tenant: str, r: ImageSummary) -> ImageView:
    return ImageView(
        digest=r.digest,
        tenant=tenant,
        registry=r.registry,
        repository=r.repository,
        namespace=r.namespace,
        tags=r.tags,
        labels=r.labels,
        purl_count=r.purls,
        product_key_count=r.product_keys,
        used_purl_count=r.used_purls,
        usage_known=r.usage_known,
        content_digest=f"sha256:{r.content_sha256}",
        indexed_at=ms_to_iso(int(r.indexed_hlc.split(":", 1)[0])) or "",
        indexed_hlc=r.indexed_hlc,
        event_id=r.event_id,
        version=r.seq,
        sbom=r.sbom,
    )
