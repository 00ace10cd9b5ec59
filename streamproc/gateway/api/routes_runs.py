"""Runs: ad-hoc requests, listings (newest first, by state and trigger), details with stats
and links, the deltas and the exports of a run, best-effort cancel, and the tenant's impact
cursors."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from aiohttp import web

from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.events import payloads as p
from streamproc.gateway.api.models import (
    OLD_STATES,
    Accepted,
    DeltaList,
    DeltaView,
    ImpactCursorView,
    RunCancel,
    RunCreate,
    RunExportList,
    RunList,
    RunView,
)
from streamproc.gateway.api.operations import BASE, CURSOR, LIMIT, WAIT, Operation, Param, path_id
from streamproc.gateway.api.query import page_response, paged, set_param
from streamproc.gateway.api.views import cursor_view, delta_view, run_export_view, run_view
from streamproc.gateway.api.writes import answer, caught_up, json_response, publish, stamp
from streamproc.gateway.auth.callers import ADMIN, READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.gateway.hardening import decode_json, read_body, require_json
from streamproc.ids import derive_id, uuid7
from streamproc.problems import ProblemError
from streamproc.readmodel.records import RUN_STATES, TERMINAL, DeltaRecord, RunRecord
from streamproc.readmodel.runs import Runs

_create = msgspec.json.Decoder(RunCreate)
_cancel = msgspec.json.Decoder(RunCancel)
STATES = frozenset(RUN_STATES)
TRIGGERS = frozenset({"cron", "feedser", "vexer", "manual"})
PROJECTION = Runs.name


def recorded_by(who: Principal) -> str | None:
    """The caller's name as an event records it (None when it has none that fits)."""
    return who.subject if who.subject and len(who.subject) <= 512 else None


async def found_run(gw: GatewayContext, tenant: str, run_id: str) -> RunRecord:
    """The run as the read model holds it, read again once caught up; else a 404 problem."""
    rec = gw.rm.run(tenant, run_id)
    if rec is None and await caught_up(gw):
        rec = gw.rm.run(tenant, run_id)
    if rec is None:
        raise ProblemError(404, "not-found", f"no run {run_id!r}")
    return rec


def _loader(gw: GatewayContext, tenant: str, run_id: str) -> Callable[[], RunView | None]:
    def load() -> RunView | None:
        rec = gw.rm.run(tenant, run_id)
        return None if rec is None else run_view(rec)

    return load


async def create_run(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    body: RunCreate = await gw.json_body(request, _create)
    run_id = uuid7()
    payload = p.RunRequested(
        run_id=run_id,
        trigger="manual",
        mode=body.mode,
        selection=body.selection,
        reason=p.RunReason(text=body.reason),
        requested_by=recorded_by(who),
    )
    event = stamp(gw, request, "run.requested", who.tenant, payload)
    try:
        ack = await publish(gw, event, expected=0)
    except WrongExpectedSequence:  # a UUIDv7 collision: practically impossible
        raise ProblemError(409, "run-exists", f"run {run_id} already exists") from None
    return await answer(
        gw,
        request,
        event,
        ack,
        resource_id=run_id,
        projection=PROJECTION,
        load=_loader(gw, who.tenant, run_id),
        wait_status=201,
        headers={"Location": f"{BASE}/runs/{run_id}"},
    )


def _states(request: web.Request) -> frozenset[str]:
    """The ``state`` filter: the specification's six; a state earlier versions showed is
    named with the one it became."""
    try:
        return set_param(request, "state", STATES)
    except ProblemError:
        old = sorted(OLD_STATES.keys() & set_param(request, "state", STATES | OLD_STATES.keys()))
        if not old:
            raise
        now = ", ".join(f"`{x}` is `{OLD_STATES[x]}`" for x in old)
        raise ProblemError(
            400,
            "invalid-parameter",
            f"state: unknown value(s) {old}: {now} (states: {', '.join(RUN_STATES)})",
            field="query.state",
        ) from None


async def list_runs(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    page = paged(
        request,
        gw.rm.runs,
        who.tenant,
        states=_states(request),
        triggers=set_param(request, "trigger", TRIGGERS),
    )
    return page_response(page, run_view)


async def get_run(gw: GatewayContext, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    return json_response(run_view(await found_run(gw, who.tenant, request.match_info["id"])))


async def list_deltas(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    rec = await found_run(gw, who.tenant, request.match_info["id"])
    page = paged(request, gw.rm.deltas, who.tenant, rec.id)
    acks = gw.rm.acknowledgements(who.tenant, rec.id, [d.digest for d in page.items])

    def render(d: DeltaRecord) -> DeltaView:
        return delta_view(d, acks.get(d.digest))

    return page_response(page, render)


async def list_exports(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    rec = await found_run(gw, who.tenant, request.match_info["id"])
    return page_response(paged(request, gw.rm.run_exports, who.tenant, rec.id), run_export_view)


async def impact_cursors(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    return json_response(cursor_view(who.tenant, gw.rm.impact_cursor(who.tenant)))


async def cancel_run(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    run_id = request.match_info["id"]
    body = RunCancel()
    if request.body_exists:
        raw = await read_body(request, gw.body_cap)
        if raw.strip():
            require_json(request)
            body = decode_json(raw, _cancel)
    rec = await found_run(gw, who.tenant, run_id)
    if rec.state in TERMINAL:
        raise ProblemError(
            409, "run-finished", f"run {run_id} is already {rec.state}", reason="run_finished"
        )
    payload = p.RunCancelRequested(run_id=run_id, by=recorded_by(who), reason=body.reason)
    # One cancel per run: repeats within JetStream's duplicate window are absorbed.
    event = stamp(
        gw,
        request,
        "run.cancel_requested",
        who.tenant,
        payload,
        event_id=derive_id(who.tenant, run_id, "cancel_requested"),
    )
    ack = await publish(gw, event)
    return await answer(
        gw,
        request,
        event,
        ack,
        resource_id=run_id,
        projection=PROJECTION,
        load=_loader(gw, who.tenant, run_id),
    )


_ACCEPTED = (Accepted, "recorded; the read model applies it shortly")
OPERATIONS = [
    Operation(
        "POST",
        "/run",
        create_run,
        "createRun",
        "Request an ad-hoc run",
        "runs",
        ADMIN,
        body=RunCreate,
        params=(WAIT,),
        responses={201: (RunView, "requested (with ?wait=true)"), 202: _ACCEPTED},
        headers={201: {"Location": "the run's URL"}, 202: {"Location": "the run's URL"}},
        errors=(413, 415, 503),
    ),
    Operation(
        "GET",
        "/runs",
        list_runs,
        "listRuns",
        "List runs, newest first",
        "runs",
        READ,
        params=(
            LIMIT,
            CURSOR,
            Param(
                "state",
                "query",
                {"type": "string"},
                f"comma-separated: {', '.join(RUN_STATES)}",
            ),
            Param(
                "trigger",
                "query",
                {"type": "string"},
                f"comma-separated: {', '.join(sorted(TRIGGERS))}",
            ),
        ),
        responses={200: (RunList, "one page")},
    ),
    Operation(
        "GET",
        "/runs/{id}",
        get_run,
        "getRun",
        "Read a run: state, stats, links",
        "runs",
        READ,
        params=(path_id(),),
        responses={200: (RunView, "the run")},
        errors=(404,),
    ),
    Operation(
        "GET",
        "/runs/{id}/deltas",
        list_deltas,
        "listRunDeltas",
        "Images whose verdict got worse in a run",
        "runs",
        READ,
        params=(path_id(), LIMIT, CURSOR),
        responses={200: (DeltaList, "one page, by digest")},
        errors=(404,),
    ),
    Operation(
        "GET",
        "/runs/{id}/exports",
        list_exports,
        "listRunExports",
        "The exports a run covers, in the order they were recorded",
        "runs",
        READ,
        params=(path_id(), LIMIT, CURSOR),
        responses={200: (RunExportList, "one page")},
        errors=(404,),
    ),
    Operation(
        "GET",
        "/impact-cursors",
        impact_cursors,
        "getImpactCursors",
        "The tenant's impact cursors: the latest export of each source a planned run covers",
        "runs",
        READ,
        responses={200: (ImpactCursorView, "the caller's tenant's cursors")},
    ),
    Operation(
        "POST",
        "/runs/{id}/cancel",
        cancel_run,
        "cancelRun",
        "Cancel a run (best effort)",
        "runs",
        ADMIN,
        body=RunCancel,
        body_required=False,
        params=(path_id(), WAIT),
        responses={200: (RunView, "recorded (with ?wait=true)"), 202: _ACCEPTED},
        errors=(404, 409, 503),
        description="A finished run answers 409.",
    ),
]
