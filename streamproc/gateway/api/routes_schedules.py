"""Schedules: create, list, read (with next fire times), patch (edit, pause, resume) and
soft-delete, with optimistic concurrency through ``If-Match`` = the schedule's version."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
from aiohttp import web
from msgspec import UNSET

from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.events import payloads as p
from streamproc.gateway.api.models import (
    RENAMED,
    Accepted,
    ScheduleCreate,
    ScheduleList,
    SchedulePatch,
    ScheduleView,
)
from streamproc.gateway.api.operations import (
    BASE,
    CURSOR,
    IF_MATCH,
    LIMIT,
    WAIT,
    Operation,
    Param,
    path_id,
)
from streamproc.gateway.api.query import (
    ANY,
    bool_param,
    if_match,
    int_param,
    page_response,
    paged,
)
from streamproc.gateway.api.views import schedule_view
from streamproc.gateway.api.writes import answer, caught_up, json_response, publish, stamp
from streamproc.gateway.auth.callers import ADMIN, READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.ids import uuid7
from streamproc.problems import ProblemError
from streamproc.readmodel.records import ScheduleRecord
from streamproc.readmodel.schedules import Schedules

_create = msgspec.json.Decoder(ScheduleCreate)
_patch = msgspec.json.Decoder(SchedulePatch)
PROJECTION = Schedules.name
NEXT = Param(
    "next",
    "query",
    {"type": "integer", "minimum": 0, "maximum": 50},
    "how many next fire times to compute (default 5; 1 in listings)",
)


def _now() -> datetime:
    return datetime.now(UTC)


def _by(who: Principal) -> str | None:
    return who.subject if who.subject and len(who.subject) <= 512 else None


async def _found(gw: GatewayContext, tenant: str, sid: str) -> ScheduleRecord:
    rec = gw.rm.schedule(tenant, sid)
    if rec is None and await caught_up(gw):
        rec = gw.rm.schedule(tenant, sid)
    if rec is None or rec.deleted:
        raise ProblemError(404, "not-found", f"no schedule {sid!r}")
    return rec


def _view_loader(gw: GatewayContext, tenant: str, sid: str) -> Callable[[], ScheduleView | None]:
    def load() -> ScheduleView | None:
        rec = gw.rm.schedule(tenant, sid)
        return None if rec is None else schedule_view(rec, _now(), 5)

    return load


def _check_limits(gw: GatewayContext, limits: p.Limits, field: str) -> None:
    """``limits.maxJobs`` may not exceed the planner's ceiling (``max_jobs_per_run``)."""
    if limits.max_jobs is not None and limits.max_jobs > gw.max_jobs_per_run:
        raise ProblemError(
            400,
            "invalid-body",
            f"limits.maxJobs {limits.max_jobs} exceeds the ceiling of {gw.max_jobs_per_run} "
            f"images per run (planner.max_jobs_per_run)",
            field=field,
            limit=gw.max_jobs_per_run,
        )


async def create_schedule(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    body: ScheduleCreate = await gw.json_body(request, _create, RENAMED)
    if body.tenant_id is not None and body.tenant_id != who.tenant:
        raise ProblemError(
            400,
            "invalid-body",
            f"tenantId {body.tenant_id!r} is not the token's tenant {who.tenant!r}",
            field="$.tenantId",
        )
    _check_limits(gw, body.limits, "$.limits.maxJobs")
    sid = body.id or uuid7()
    if body.id is not None and gw.rm.schedule(who.tenant, sid) is not None:
        raise ProblemError(409, "schedule-exists", f"schedule {sid!r} already exists")
    payload = p.ScheduleCreated(
        schedule_id=sid,
        name=body.name,
        enabled=body.enabled,
        cron=body.cron,
        timezone=body.timezone,
        mode=body.mode,
        selection=body.selection,
        only_if=body.only_if,
        notify=body.notify,
        limits=body.limits,
        subscriptions=list(body.subscriptions),
        created_by=_by(who),
    )
    event = stamp(gw, request, "schedule.created", who.tenant, payload)
    try:
        ack = await publish(gw, event, expected=0)
    except WrongExpectedSequence:
        raise ProblemError(409, "schedule-exists", f"schedule {sid!r} already exists") from None
    return await answer(
        gw,
        request,
        event,
        ack,
        resource_id=sid,
        projection=PROJECTION,
        load=_view_loader(gw, who.tenant, sid),
        wait_status=201,
        headers={"Location": f"{BASE}/schedules/{sid}"},
    )


async def list_schedules(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    n = int_param(request, "next", 1, 0, 50)
    paused = bool_param(request, "paused")
    enabled = bool_param(request, "enabled")
    if paused is not None and enabled is not None and paused == enabled:
        raise ProblemError(
            400, "invalid-parameter", "enabled and paused contradict", field="query.enabled"
        )
    page = paged(
        request,
        gw.rm.schedules,
        who.tenant,
        include_deleted=bool(bool_param(request, "includeDeleted")),
        paused=paused if paused is not None else None if enabled is None else not enabled,
    )
    now = _now()
    return page_response(page, lambda r: schedule_view(r, now, n))


async def get_schedule(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    rec = await _found(gw, who.tenant, request.match_info["id"])
    n = int_param(request, "next", 5, 0, 50)
    return json_response(schedule_view(rec, _now(), n), headers={"ETag": f'"{rec.version}"'})


async def _current(gw: GatewayContext, tenant: str, sid: str, wanted: int | None) -> ScheduleRecord:
    """The schedule as of the caller's If-Match (waiting briefly if the read model lags —
    before answering 404 too: the version may come from a write through another gateway)."""
    if wanted is not None and wanted != ANY and wanted > gw.ctx.applied():
        with contextlib.suppress(Exception):  # a lagging read model only means stale
            await gw.ctx.wait_for(wanted, 2.0)
    rec = await _found(gw, tenant, sid)
    if wanted is not None and wanted != ANY and wanted != rec.version:
        raise ProblemError(
            412,
            "stale-version",
            f"If-Match {wanted} is not the current version {rec.version}",
            current_version=rec.version,
        )
    return rec


def _conflict(wanted: int | None, sid: str) -> ProblemError:
    if wanted is not None:
        return ProblemError(
            412, "stale-version", f"schedule {sid!r} changed since version {wanted}"
        )
    return ProblemError(409, "concurrent-update", f"schedule {sid!r} changed meanwhile; retry")


def _state_change(body: SchedulePatch) -> bool | None:
    """The pause (True) or resume (False) the patch asks for, if any: ``enabled`` is the
    specification's switch, ``paused`` the same inverted; both given, they must agree."""
    asked: set[bool] = set()
    if body.paused is not UNSET:
        asked.add(body.paused)
    if body.enabled is not UNSET:
        asked.add(not body.enabled)
    if len(asked) > 1:
        raise ProblemError(
            400, "invalid-body", "enabled and paused contradict each other", field="$.enabled"
        )
    return next(iter(asked), None)


async def patch_schedule(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    sid = request.match_info["id"]
    wanted = if_match(request)
    body: SchedulePatch = await gw.json_body(request, _patch, RENAMED)
    changes = {f: getattr(body, f) for f in p.SCHEDULE_PATCHABLE if getattr(body, f) is not UNSET}
    pause = _state_change(body)
    switch = "$.enabled" if body.enabled is not UNSET else "$.paused"
    if body.reason is not UNSET and pause is None:
        raise ProblemError(
            400, "invalid-body", "reason goes with enabled (or paused) only", field="$.reason"
        )
    if pause is None and not changes:
        raise ProblemError(400, "invalid-body", "the patch changes nothing", field="$")
    if "limits" in changes:
        _check_limits(gw, changes["limits"], "$.limits.maxJobs")
    rec = await _current(gw, who.tenant, sid, wanted)
    if pause is not None and pause != rec.paused and changes:
        raise ProblemError(
            400,
            "invalid-body",
            "pausing or resuming is a change of its own: send enabled alone, then the edits",
            field=switch,
        )
    if pause is None or pause == rec.paused:
        if not changes:  # already so: nothing to record
            return json_response(
                schedule_view(rec, _now(), 5), headers={"ETag": f'"{rec.version}"'}
            )
        kind = "schedule.updated"
        payload: p.Payload = p.ScheduleUpdated(schedule_id=sid, updated_by=_by(who), **changes)
    else:
        kind = "schedule.paused" if pause else "schedule.resumed"
        reason = body.reason if body.reason is not UNSET else None
        payload = p.ScheduleStateChange(schedule_id=sid, by=_by(who), reason=reason)
    return await _write_version(gw, request, who, kind, payload, rec, wanted)


async def delete_schedule(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    sid = request.match_info["id"]
    wanted = if_match(request)
    rec = await _current(gw, who.tenant, sid, wanted)
    payload = p.ScheduleStateChange(schedule_id=sid, by=_by(who))
    return await _write_version(gw, request, who, "schedule.deleted", payload, rec, wanted)


async def _write_version(
    gw: GatewayContext,
    request: web.Request,
    who: Principal,
    kind: str,
    payload: p.Payload,
    rec: ScheduleRecord,
    wanted: int | None,
) -> web.Response:
    """Publish a change of the schedule at the version read (optimistic concurrency: the
    stream refuses it if another write came first) and answer with the new view."""
    sid = rec.id
    event = stamp(gw, request, kind, who.tenant, payload)
    try:
        ack = await publish(gw, event, expected=rec.version)
    except WrongExpectedSequence:
        raise _conflict(wanted, sid) from None
    return await answer(
        gw,
        request,
        event,
        ack,
        resource_id=sid,
        projection=PROJECTION,
        load=_view_loader(gw, who.tenant, sid),
    )


_ACCEPTED = (Accepted, "recorded; the read model applies it shortly")
OPERATIONS = [
    Operation(
        "POST",
        "/schedules",
        create_schedule,
        "createSchedule",
        "Create a schedule",
        "schedules",
        ADMIN,
        body=ScheduleCreate,
        params=(WAIT,),
        responses={201: (ScheduleView, "created (with ?wait=true)"), 202: _ACCEPTED},
        headers={
            201: {"Location": "the schedule's URL", "ETag": "its version"},
            202: {"Location": "the schedule's URL"},
        },
        errors=(409, 413, 415, 503),
    ),
    Operation(
        "GET",
        "/schedules",
        list_schedules,
        "listSchedules",
        "List the tenant's schedules",
        "schedules",
        READ,
        params=(
            LIMIT,
            CURSOR,
            NEXT,
            Param("includeDeleted", "query", {"type": "boolean", "default": False}),
            Param("enabled", "query", {"type": "boolean"}, "only enabled (true) or paused"),
            Param("paused", "query", {"type": "boolean"}, "only paused (true) or enabled"),
        ),
        responses={200: (ScheduleList, "one page, by id")},
    ),
    Operation(
        "GET",
        "/schedules/{id}",
        get_schedule,
        "getSchedule",
        "Read a schedule",
        "schedules",
        READ,
        params=(path_id(), NEXT),
        responses={200: (ScheduleView, "the schedule")},
        headers={200: {"ETag": "the version, for If-Match"}},
        errors=(404,),
    ),
    Operation(
        "PATCH",
        "/schedules/{id}",
        patch_schedule,
        "patchSchedule",
        "Update, pause or resume a schedule",
        "schedules",
        ADMIN,
        body=SchedulePatch,
        params=(path_id(), IF_MATCH, WAIT),
        responses={200: (ScheduleView, "applied (with ?wait=true), or already so"), 202: _ACCEPTED},
        errors=(404, 409, 412, 413, 415, 503),
        description="Updates never create: an unknown or deleted schedule is 404. "
        '`{"enabled": false}` pauses and `{"enabled": true}` resumes (`paused` is the same '
        "switch, inverted).",
    ),
    Operation(
        "DELETE",
        "/schedules/{id}",
        delete_schedule,
        "deleteSchedule",
        "Soft-delete a schedule",
        "schedules",
        ADMIN,
        params=(path_id(), IF_MATCH, WAIT),
        responses={200: (ScheduleView, "deleted (with ?wait=true)"), 202: _ACCEPTED},
        errors=(404, 409, 412, 503),
    ),
]
