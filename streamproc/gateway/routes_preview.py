"""Impact preview: how many images a set of change keys (or a selection) would touch,
publishing nothing. The planner answers from its ImpactIndex (:mod:`streamproc.planner.service`),
asked over NATS for the caller's tenant."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from streamproc.gateway.auth import READ, Principal
from streamproc.gateway.operations import Operation
from streamproc.gateway.writes import json_response
from streamproc.queries import PreviewRequest, PreviewResult

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

_dec = msgspec.json.Decoder(PreviewRequest)


async def preview_impact(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    body: PreviewRequest = await gw.json_body(request, _dec)
    # Always the caller's tenant: a preview never sees another tenant's images.
    return json_response(await gw.remote.preview(who.tenant, body))


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
        errors=(413, 415, 502, 503),
        description="Publishes nothing. Answered by a planner over NATS; 503 (`Retry-After`) "
        "when no planner answers within `gateway.preview_timeout_s`.",
    ),
]
