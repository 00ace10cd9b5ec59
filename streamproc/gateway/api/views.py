"""Rendering read-model records as API views (next fire times are computed here, at read
time, in each schedule's own time zone)."""

from __future__ import annotations

from datetime import datetime

from streamproc.gateway.api.models import (
    AcknowledgementView,
    DeltaView,
    ImageView,
    ImpactCursorView,
    RunExportView,
    RunLinks,
    RunReasonView,
    RunView,
    ScheduleView,
    SegmentCounts,
)
from streamproc.gateway.api.operations import BASE
from streamproc.readmodel.acks import AckRecord
from streamproc.readmodel.images import ImageSummary
from streamproc.readmodel.nextfire import iso, ms_to_iso, next_fire_times
from streamproc.readmodel.records import (
    CursorRecord,
    DeltaRecord,
    ExportItem,
    RunRecord,
    ScheduleRecord,
)


def schedule_view(r: ScheduleRecord, now: datetime, next_n: int) -> ScheduleView:
    """The API's schedule, rendered from the read model's record.

    ``ScheduleView`` stays a type of its own, not the stored
    :class:`~streamproc.projections.schedule.ScheduleBase`: it is the published contract
    (``schemas/openapi.json``, whose field order it fixes), its times are RFC 3339 strings where
    records keep HLC milliseconds, it adds what is computed when read (``enabled``,
    ``nextFireTimes``), and so storage can change without changing what clients see.

    ``enabled`` is the specification's switch and ``paused`` its inverse: one state, kept
    as ``paused`` by the events (``schedule.paused|resumed``), shown both ways.
    """
    active = not (r.paused or r.deleted)
    fires = next_fire_times(r.cron, r.timezone, now, next_n) if active else []
    return ScheduleView(
        id=r.id,
        tenant_id=r.tenant,
        name=r.name,
        enabled=not r.paused,
        cron=r.cron,
        timezone=r.timezone,
        mode=r.mode,
        selection=r.selection,
        only_if=r.only_if,
        notify=r.notify,
        limits=r.limits,
        created_at=ms_to_iso(r.created_ms) or "",
        updated_at=ms_to_iso(r.updated_ms) or "",
        created_by=r.created_by,
        updated_by=r.updated_by,
        paused=r.paused,
        subscriptions=r.subscriptions,
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
    why = r.reason
    return RunView(
        id=r.id,
        schedule_id=r.schedule_id,
        tenant_id=r.tenant,
        trigger=r.trigger,
        reason=RunReasonView(
            feedser_export_id=why.feedser_export_id,
            vexer_export_id=why.vexer_export_id,
            cursor=why.cursor,
            export_count=why.export_count,
            exports=why.exports,
            revisions=why.revisions,
            scheduled_for=why.scheduled_for,
            text=why.text,
        ),
        state=r.state,
        stats=r.stats,
        started_at=ms_to_iso(r.started_ms),
        finished_at=ms_to_iso(r.finished_ms),
        error=r.error,
        schedule_ids=r.schedule_ids,
        mode=r.mode,
        selection=r.selection,
        requested_by=r.requested_by,
        requested_at=ms_to_iso(r.requested_ms) or "",
        cancel_requested=r.cancel_requested,
        cancel_reason=r.cancel_reason,
        segments=counts,
        degraded=r.degraded,
        degraded_reason=r.degraded_reason,
        coverage=r.coverage,
        updated_at=ms_to_iso(r.updated_ms) or "",
        version=r.version,
        links=RunLinks(self_=url, deltas=f"{url}/deltas", exports=f"{url}/exports"),
    )


def run_export_view(x: ExportItem) -> RunExportView:
    source = x.ref[: -len(x.export_id) - 1] if x.ref != x.export_id else None
    return RunExportView(
        ref=x.ref,
        kind=x.kind,
        source=source,
        export_id=x.export_id,
        recorded_at=ms_to_iso(x.ms),
        revision=x.revision,
    )


def cursor_view(tenant: str, c: CursorRecord) -> ImpactCursorView:
    return ImpactCursorView(
        tenant_id=tenant,
        feedser_last_export_id=c.feedser_export_id,
        vexer_last_export_id=c.vexer_export_id,
        updated_at=ms_to_iso(c.updated_ms),
        feedser_last_export_ref=c.feedser_last_export_id,
        vexer_last_export_ref=c.vexer_last_export_id,
    )


def ack_view(a: AckRecord) -> AcknowledgementView:
    return AcknowledgementView(
        run_id=a.run_id,
        digest=a.digest,
        acknowledged_by=a.by,
        acknowledged_at=ms_to_iso(a.acknowledged_ms) or "",
        note=a.note,
        ticket=a.ticket,
        event_id=a.event_id,
    )


def delta_view(d: DeltaRecord, ack: AckRecord | None = None) -> DeltaView:
    return DeltaView(
        digest=d.digest,
        segment_id=d.segment_id,
        status=d.status,
        new_criticals=d.new_criticals,
        new_high=d.new_high,
        kev_hits=d.kev_hits,
        top_findings=d.top_findings,
        report_url=d.report_url,
        acknowledgement=ack_view(ack) if ack is not None else None,
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
