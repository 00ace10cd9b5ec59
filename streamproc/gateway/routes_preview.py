"""Impact preview: how many images a set of change keys (or a selection) would touch, from
the ImpactIndex, publishing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from streamproc.gateway.auth import READ, Principal
from streamproc.gateway.models import PreviewRequest, PreviewResult
from streamproc.gateway.operations import Operation
from streamproc.gateway.problems import ProblemError
from streamproc.gateway.writes import json_response
from streamproc.impact.selector import Selector, SelectorError

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

_dec = msgspec.json.Decoder(PreviewRequest)
MAX_UNMATCHED_SHOWN = 100


async def preview_impact(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    body: PreviewRequest = await gw.json_body(request, _dec)
    index = gw.impact_index(request)
    if index is None:
        raise ProblemError(
            503,
            "impact-index-unavailable",
            "the impact index is not available in this process",
            headers={"Retry-After": "30"},
        )
    sel = body.selection
    try:
        selector = Selector(
            tenant=who.tenant,  # always the caller's: a preview never sees another tenant
            namespaces=list(sel.namespaces),
            repos=list(sel.repositories),
            labels=list(sel.labels),
            digests=list(sel.digests),
            include_tags=list(sel.include_tags),
        )
        if body.product_keys:
            result = index.resolve_by_purls(
                body.product_keys, usage_only=body.usage_only, selector=selector
            )
        else:
            result = index.resolve_all(selector)
    except (SelectorError, ValueError) as exc:
        raise ProblemError(400, "invalid-body", str(exc), field="$.productKeys") from None
    unmatched = list(result.unmatched)
    return json_response(
        PreviewResult(
            count=result.count,
            sample=result.sample(body.sample_size),
            unmatched=unmatched[:MAX_UNMATCHED_SHOWN],
            unmatched_count=len(unmatched),
            usage_unknown=result.usage_unknown,
        )
    )


OPERATIONS = [
    Operation(
        "POST",
        "/preview/impact",
        preview_impact,
        "previewImpact",
        "Candidate count and sample of impacted digests (dry run)",
        "preview",
        READ,
        body=PreviewRequest,
        responses={200: (PreviewResult, "the impact")},
        errors=(413, 415, 503),
        description="Publishes nothing. 503 when this process has no impact index.",
    ),
]
