"""Impact preview: how many images a set of change keys, a Feedser or Vexer export, or a
selection would touch — and, for an export, how many it would likely make worse — publishing
nothing. The planner answers from its ImpactIndex and last verdicts
(:mod:`streamproc.planner.service`), asked over NATS for the caller's tenant; a recorded
export is found here, in the read model, and named to it by where the log holds it."""

from __future__ import annotations

import msgspec
from aiohttp import web

from streamproc.events.payloads import export_ref
from streamproc.gateway.api.operations import Operation
from streamproc.gateway.api.writes import json_response
from streamproc.gateway.auth.callers import READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.problems import ProblemError
from streamproc.queries import ExportAt, PreviewRequest, PreviewResult

_dec = msgspec.json.Decoder(PreviewRequest)


def _one_subject(body: PreviewRequest) -> None:
    """At most one of change keys, an export id, or an export's body."""
    given = [
        name
        for name, value in (
            ("productKeys", body.product_keys),
            ("exportId", body.export_id),
            ("feedserExport", body.feedser_export),
            ("vexerExport", body.vexer_export),
        )
        if value
    ]
    if len(given) > 1:
        raise ProblemError(
            400,
            "invalid-body",
            f"preview one thing: {' and '.join(given)} were both given",
            field=f"$.{given[1]}",
        )
    if body.source is not None and body.export_id is None:
        raise ProblemError(400, "invalid-body", "source names the sender of an exportId",
                           field="$.source")  # fmt: skip


def find_export(gw: GatewayContext, tenant: str, export_id: str, source: str | None) -> ExportAt:
    """The tenant's recorded export of that id (by the configured sources that may have
    sent it, and as recorded before exports were scoped by source): 404 if none, 400 when
    several sources sent one and ``source`` does not say which."""
    found = []
    for s in gw.webhooks.sources:
        if source is not None and s.name != source:
            continue
        rec = gw.rm.export(tenant, s.kind, export_ref(s.name, export_id))
        if rec is not None:
            found.append(ExportAt(kind=s.kind, seq=rec.seq, export_id=export_id,
                                  source=s.name, revision=rec.revision))  # fmt: skip
    if not found and source is None:
        for kind in ("feedser", "vexer"):
            rec = gw.rm.export(tenant, kind, export_id)  # recorded before refs
            if rec is not None:
                found.append(ExportAt(kind=rec.kind, seq=rec.seq, export_id=export_id))
    if not found:
        raise ProblemError(404, "not-found", f"no export {export_id!r} was recorded for you")
    if len(found) > 1:
        names = ", ".join(sorted(f.source or "(unscoped)" for f in found))
        raise ProblemError(
            400,
            "invalid-body",
            f"export {export_id!r} was sent by several sources ({names}): name one in source",
            field="$.source",
        )
    return found[0]


async def preview_impact(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    body: PreviewRequest = await gw.json_body(request, _dec)
    _one_subject(body)
    # Always the caller's tenant: a preview never sees another tenant's images or exports.
    at = None
    if body.export_id is not None:
        at = find_export(gw, who.tenant, body.export_id, body.source)
    return json_response(await gw.remote.preview(who.tenant, body, at))


OPERATIONS = [
    Operation(
        "POST",
        "/preview/impact",
        preview_impact,
        "previewImpact",
        "Candidate count and sample of impacted digests, and an export's projected deltas "
        "(dry run)",
        "preview",
        READ,
        body=PreviewRequest,
        responses={200: (PreviewResult, "the impact")},
        errors=(404, 413, 415, 502, 503),
        description="One of `productKeys`, `exportId` (a recorded Feedser or Vexer export of "
        "the caller's tenant; `source` when several sources sent that id), `feedserExport` or "
        "`vexerExport` (an export's body, as its webhook takes it), or none (the whole "
        "`selection`). An export's answer adds `projectedDeltas`, `projectedKev`, "
        "`projectedHighEpss` (deltas with a finding at or above "
        "`planner.epss_high_percentile`) and `unassessed`. Publishes nothing. Answered by a "
        "planner over NATS; 503 "
        "(`Retry-After`) when no planner answers within `gateway.preview_timeout_s`.",
    ),
]
