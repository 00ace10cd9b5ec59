"""Acknowledging a run's delta (triage): someone takes charge of an image whose verdict got
worse, with a note and the ticket that tracks the work; and reading who did.

A PUT checks the run and the delta against the read model and publishes
``delta.acknowledged``; the ``DeltaAcks`` projection folds it, and the delta's listing
(``GET /runs/{id}/deltas``) shows it beside the delta."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from aiohttp import web

from streamproc.events import payloads as p
from streamproc.gateway.api.models import Accepted, AcknowledgementView, DeltaAcknowledge
from streamproc.gateway.api.operations import BASE, DIGEST, WAIT, Operation, path_id
from streamproc.gateway.api.query import digest_param
from streamproc.gateway.api.routes_runs import found_run, recorded_by
from streamproc.gateway.api.views import ack_view
from streamproc.gateway.api.writes import answer, caught_up, json_response, publish, stamp
from streamproc.gateway.auth.callers import ADMIN, READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.ids import derive_id
from streamproc.problems import ProblemError
from streamproc.readmodel.acks import DeltaAcks

_body = msgspec.json.Decoder(DeltaAcknowledge)
PROJECTION = DeltaAcks.name
PATH = "/runs/{id}/deltas/{digest}/acknowledgement"


def _loader(
    gw: GatewayContext, tenant: str, run_id: str, digest: str
) -> Callable[[], AcknowledgementView | None]:
    def load() -> AcknowledgementView | None:
        rec = gw.rm.acknowledgement(tenant, run_id, digest)
        return None if rec is None else ack_view(rec)

    return load


async def acknowledge_delta(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    digest = digest_param(request)
    body: DeltaAcknowledge = await gw.json_body(request, _body)
    run = await found_run(gw, who.tenant, request.match_info["id"])
    if gw.rm.delta(who.tenant, run.id, digest) is None and not (
        await caught_up(gw) and gw.rm.delta(who.tenant, run.id, digest) is not None
    ):
        raise ProblemError(404, "not-found", f"image {digest} is not a delta of run {run.id}")
    by = recorded_by(who)
    payload = p.DeltaAcknowledged(
        run_id=run.id, digest=digest, by=by, note=body.note, ticket=body.ticket
    )
    location = {"Location": f"{BASE}/runs/{run.id}/deltas/{digest}/acknowledgement"}
    prev = gw.rm.acknowledgement(who.tenant, run.id, digest)
    if prev is not None and (prev.by, prev.note, prev.ticket) == (by, body.note, body.ticket):
        return json_response(ack_view(prev), headers=location)  # in force already
    # Derived from the one it replaces: a retry before the read model applied it is absorbed
    # within the duplicate window, and the same one again over another applies again.
    event_id = derive_id(
        who.tenant,
        run.id,
        digest,
        "acknowledged",
        prev.seq if prev is not None else 0,
        by or "",
        body.note or "",
        body.ticket or "",
    )
    event = stamp(gw, request, "delta.acknowledged", who.tenant, payload, event_id=event_id)
    ack = await publish(gw, event)
    return await answer(
        gw,
        request,
        event,
        ack,
        resource_id=digest,
        projection=PROJECTION,
        load=_loader(gw, who.tenant, run.id, digest),
        headers=location,
    )


async def get_acknowledgement(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    digest = digest_param(request)
    run = await found_run(gw, who.tenant, request.match_info["id"])
    view = _loader(gw, who.tenant, run.id, digest)()
    if view is None:
        raise ProblemError(404, "not-found", f"nobody acknowledged image {digest} in run {run.id}")
    return json_response(view)


_LOCATION = {"Location": "the acknowledgement's URL"}
OPERATIONS = [
    Operation(
        "PUT",
        PATH,
        acknowledge_delta,
        "acknowledgeRunDelta",
        "Take charge of an image's delta in a run, with a note and a ticket",
        "runs",
        ADMIN,
        body=DeltaAcknowledge,
        params=(path_id(), DIGEST, WAIT),
        responses={
            200: (AcknowledgementView, "recorded (with ?wait=true), or in force already"),
            202: (Accepted, "recorded; the read model applies it shortly"),
        },
        headers={200: _LOCATION, 202: _LOCATION},
        errors=(404, 409, 413, 415, 503),
        description="A later acknowledgement of the same delta replaces the earlier one; "
        "the one in force again answers 200 and records nothing; an image that is not a "
        "delta of the run is 404.",
    ),
    Operation(
        "GET",
        PATH,
        get_acknowledgement,
        "getRunDeltaAcknowledgement",
        "Who took charge of an image's delta in a run",
        "runs",
        READ,
        params=(path_id(), DIGEST),
        responses={200: (AcknowledgementView, "the acknowledgement")},
        errors=(404,),
    ),
]
