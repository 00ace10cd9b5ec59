"""The planner's NATS service: impact previews, answered from the ImpactIndex it folds —
and, for a Feedser or Vexer export, its projected deltas (:mod:`.estimate`).

Every planner instance serves previews — the active one and the standbys, whose index is as
current as the active's (they fold the same log) — once its projections have caught up with
the stream head as it was when the process started; from then on NATS hands each question to
one of them (a queue group). The gateway asks with a deadline (``POST /preview/impact``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Collection
from typing import Protocol

import msgspec
from nats.aio.client import Client

from streamproc.bus import jsapi, services
from streamproc.bus.services import Served, ServiceFailure
from streamproc.events.envelope import EventError, decode
from streamproc.events.payloads import (
    FeedserExport,
    FeedserExportBody,
    VexerExport,
    VexerExportBody,
    export_body,
)
from streamproc.impact.projection import impact_projection
from streamproc.impact.selector import Selector, SelectorError
from streamproc.planner.estimate import feedser_threats, project, vexer_threats
from streamproc.planner.exports import PlannerExports
from streamproc.planner.model import ImpactSource
from streamproc.planner.projection import LastReports
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.queries import (
    PLANNER,
    PREVIEW,
    ExportAt,
    PreviewedExport,
    PreviewQuery,
    PreviewResult,
    read_query,
)
from streamproc.runtime.projection import hosted
from streamproc.runtime.reactor import RoleContext

log = logging.getLogger(__name__)

MAX_UNMATCHED_SHOWN = 100


class ImpactResult(Protocol):
    @property
    def count(self) -> int: ...

    @property
    def unmatched(self) -> list[str]: ...

    @property
    def usage_unknown(self) -> int: ...

    def sample(self, n: int) -> list[str]: ...


class PreviewIndex(Protocol):
    """What a preview needs of the index: :class:`~streamproc.impact.index.ImpactIndex`
    has it (and the gateway's tests a fake of their own)."""

    def resolve_by_purls(
        self, keys: Collection[str], *, usage_only: bool, selector: Selector
    ) -> ImpactResult: ...

    def resolve_all(self, selector: Selector) -> ImpactResult: ...


_query = msgspec.json.Decoder(PreviewQuery)
_encode = msgspec.json.Encoder().encode


def preview(index: PreviewIndex, query: PreviewQuery) -> PreviewResult:
    """The impact of ``query.request``'s keys or selection within ``query.tenant``'s images."""
    body = query.request
    try:
        selector = _selector(query)
        if body.product_keys:
            result = index.resolve_by_purls(
                body.product_keys, usage_only=body.usage_only, selector=selector
            )
        else:
            result = index.resolve_all(selector)
    except (SelectorError, ValueError) as exc:
        raise ServiceFailure(400, "invalid-body", str(exc), field="$.productKeys") from None
    return _result(result, body.sample_size)


def _selector(query: PreviewQuery) -> Selector:
    sel = query.request.selection
    try:
        return Selector(
            tenant=query.tenant,
            namespaces=list(sel.namespaces),
            repos=list(sel.repositories),
            labels=list(sel.labels),
            digests=list(sel.digests),
            include_tags=list(sel.include_tags),
        )
    except (SelectorError, ValueError) as exc:
        raise ServiceFailure(400, "invalid-body", str(exc), field="$.selection") from None


def _result(result: ImpactResult, sample_size: int, **more: object) -> PreviewResult:
    unmatched = list(result.unmatched)
    return PreviewResult(
        count=result.count,
        sample=result.sample(sample_size),
        unmatched=unmatched[:MAX_UNMATCHED_SHOWN],
        unmatched_count=len(unmatched),
        usage_unknown=result.usage_unknown,
        **more,  # type: ignore[arg-type]  # the projection's fields of PreviewResult
    )


class ExportPreviews:
    """An export's preview (:mod:`streamproc.planner.estimate`): its candidates from the
    index, its projected deltas from the planner's last verdicts, the vulnerability flags
    and EPSS Feedser exports gave, and — for a recorded export — its event, read from the
    log. ``epss_high``: ``planner.epss_high_percentile``, what counts as high EPSS."""

    def __init__(
        self,
        source: ImpactSource,
        reports: LastReports,
        exports: PlannerExports,
        nc: Client,
        events_stream: str,
        *,
        epss_high: float,
    ) -> None:
        self.source = source
        self.reports = reports
        self.exports = exports
        self.nc = nc
        self.events_stream = events_stream
        self.epss_high = epss_high

    async def answer(self, query: PreviewQuery) -> PreviewResult:
        body = query.request
        since: int | None = None  # a recorded export's time: later verdicts reflect it
        if query.export_at is not None:
            export, previewed, since = await self._recorded(query.tenant, query.export_at)
        elif body.feedser_export is not None:
            export = body.feedser_export
            previewed = PreviewedExport(kind="feedser", export_id=export.export_id)
        else:
            assert body.vexer_export is not None
            export = body.vexer_export
            previewed = PreviewedExport(kind="vexer", export_id=export.export_id)
        index = self.source.index
        tenant = query.tenant
        if isinstance(export, FeedserExportBody):
            change = feedser_threats(export, index.vuln_keys)
        else:
            change = vexer_threats(export, lambda vuln: self.exports.vuln(tenant, vuln))
        reports = self.reports.get(tenant)

        def judged_since(digest: str) -> bool:
            report = reports.get(digest)
            return since is not None and report is not None and report[0] > since

        try:
            projection = project(
                change,
                index,
                _selector(query),
                body.usage_only,
                lambda digest: self.reports.findings(tenant, digest),
                judged_since,
                epss_high=self.epss_high,
            )
        except (SelectorError, ValueError) as exc:
            raise ServiceFailure(400, "invalid-body", str(exc)) from None
        return _result(
            projection.candidates,
            body.sample_size,
            export=previewed,
            projected_deltas=projection.deltas,
            projected_kev=projection.kev,
            projected_high_epss=projection.high_epss,
            unassessed=projection.unassessed,
            projected_from=projection.judged,
        )

    async def _recorded(
        self, tenant: str, at: ExportAt
    ) -> tuple[FeedserExportBody | VexerExportBody, PreviewedExport, int]:
        """The export's latest revision, as the log holds it (the gateway found where), and
        when it was recorded (HLC ms)."""
        try:
            doc = await jsapi.request(
                self.nc, f"STREAM.MSG.GET.{self.events_stream}", {"seq": at.seq}
            )
            event = decode(base64.b64decode(doc["message"]["data"]))
        except (jsapi.JsApiError, EventError, KeyError) as exc:
            log.warning("impact preview: the export at %d could not be read: %s", at.seq, exc)
            raise ServiceFailure(503, "log-unavailable", "the event log did not answer") from None
        payload = event.payload
        if event.tenant != tenant or not isinstance(payload, FeedserExport | VexerExport):
            raise ServiceFailure(404, "not-found", f"no export {at.export_id!r}")
        previewed = PreviewedExport(
            kind=at.kind, export_id=at.export_id, source=payload.source, revision=payload.revision
        )
        return export_body(payload), previewed, event.timestamp.physical


async def serve_previews(
    nc: Client,
    prefix: str,
    index: Callable[[], PreviewIndex],
    *,
    node: str = "",
    exports: ExportPreviews | None = None,
    endpoint: str = PREVIEW,
) -> Served:
    """Answer previews on ``endpoint`` (a partition's own, ``preview-p<k>``, when the
    planners are partitioned) from ``index()``, asked for each question: the planner passes
    its projection's current index."""

    async def answer(data: bytes) -> bytes:
        query = read_query(_query, data)
        body = query.request
        if query.export_at or body.feedser_export or body.vexer_export:
            if exports is None:
                raise ServiceFailure(503, "planner-unavailable", "no export previews here")
            return _encode(await exports.answer(query))
        return _encode(preview(index(), query))

    return await services.serve(
        nc,
        prefix,
        PLANNER,
        {endpoint: answer},
        description="impact previews from the planner's ImpactIndex",
        metadata={"node": node},
    )


async def start(ctx: RoleContext, endpoint: str = PREVIEW) -> Served:
    """The ``services`` hook of the planner role (and of each partition a partitioned
    planner holds, on the partition's ``endpoint``)."""
    impact = impact_projection(ctx.shared)
    nc = ctx.publisher.nc
    exports = ExportPreviews(
        impact,
        hosted(ctx.shared, LastReports),
        hosted(ctx.shared, PlannerExports),
        nc,
        ctx.settings.events_stream,
        epss_high=ctx.settings.configuration.built(planner_from_sections).epss_high_percentile,
    )
    return await serve_previews(
        nc,
        ctx.settings.prefix,
        lambda: impact.index,
        node=ctx.settings.node_id,
        exports=exports,
        endpoint=endpoint,
    )
