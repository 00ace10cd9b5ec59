"""Runs: ad-hoc requests, listings (newest first, by state and trigger), details with stats
and links to deltas, the deltas themselves, and best-effort cancel."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.events import payloads as p
from streamproc.gateway.auth import ADMIN, READ, Principal
from streamproc.gateway.hardening import decode_json, read_body, require_json
from streamproc.gateway.models import Accepted, DeltaList, RunCancel, RunCreate, RunList, RunView
from streamproc.gateway.operations import BASE, CURSOR, LIMIT, WAIT, Operation, Param, path_id
from streamproc.gateway.query import paged, set_param
from streamproc.gateway.views import delta_view, run_view
from streamproc.gateway.writes import answer, json_response, publish, stamp
from streamproc.ids import derive_id, uuid7
from streamproc.problems import ProblemError
from streamproc.readmodel.records import TERMINAL, RunRecord
from streamproc.readmodel.runs import Runs

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

_create = msgspec.json.Decoder(RunCreate)
_cancel = msgspec.json.Decoder(RunCancel)
STATES = frozenset({"requested", "planned", "queued", "running", "completed", "cancelled", "error"})
TRIGGERS = frozenset({"cron", "feedser", "vexer", "manual"})
PROJECTION = Runs.name


def _by(who: Principal) -> str | None:
    return who.subject if who.subject and len(who.subject) <= 512 else None


def _found(gw: Gateway, tenant: str, run_id: str) -> RunRecord:
    rec = gw.rm.run(tenant, run_id)
    if rec is None:
        raise ProblemError(404, "not-found", f"no run {run_id!r}")
    return rec


def _loader(gw: Gateway, tenant: str, run_id: str) -> Callable[[], RunView | None]:
    def load() -> RunView | None:
        rec = gw.rm.run(tenant, run_id)
        return None if rec is None else run_view(rec)

    return load


async def create_run(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    body: RunCreate = await gw.json_body(request, _create)
    run_id = uuid7()
    payload = p.RunRequested(
        run_id=run_id,
        trigger="manual",
        mode=body.mode,
        selection=body.selection,
        reason=p.RunReason(text=body.reason),
        requested_by=_by(who),
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


async def list_runs(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    page = paged(
        request,
        gw.rm.runs,
        who.tenant,
        states=set_param(request, "state", STATES),
        triggers=set_param(request, "trigger", TRIGGERS),
    )
    return json_response(
        RunList(items=[run_view(r) for r in page.items], next_cursor=page.next_cursor)
    )


async def get_run(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    return json_response(run_view(_found(gw, who.tenant, request.match_info["id"])))


async def list_deltas(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    rec = _found(gw, who.tenant, request.match_info["id"])
    page = paged(request, gw.rm.deltas, who.tenant, rec.id)
    return json_response(
        DeltaList(items=[delta_view(d) for d in page.items], next_cursor=page.next_cursor)
    )


async def cancel_run(gw: Gateway, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    run_id = request.match_info["id"]
    body = RunCancel()
    if request.body_exists:
        raw = await read_body(request, gw.body_cap)
        if raw.strip():
            require_json(request)
            body = decode_json(raw, _cancel)
    rec = _found(gw, who.tenant, run_id)
    if rec.state in TERMINAL:
        raise ProblemError(
            409, "run-finished", f"run {run_id} is already {rec.state}", reason="run_finished"
        )
    payload = p.RunCancelRequested(run_id=run_id, by=_by(who), reason=body.reason)
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
                f"comma-separated: {', '.join(sorted(STATES))}",
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
