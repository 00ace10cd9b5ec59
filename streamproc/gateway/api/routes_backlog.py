"""The backlog: work a run spilled over its ``maxJobs`` to the next window, waiting for the
continuation run the planner requests then (the console's backlog banner reads it)."""

from __future__ import annotations

from aiohttp import web

from streamproc.gateway.api.models import Response
from streamproc.gateway.api.operations import Operation
from streamproc.gateway.api.writes import json_response
from streamproc.gateway.auth.callers import READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.readmodel.nextfire import ms_to_iso


class SpilledRun(Response, kw_only=True):
    run_id: str
    """The run whose surplus waits."""
    root_run_id: str
    """The chain's first run (the cause it plans: its export, tick or request)."""
    continuation_run_id: str
    """The run the planner requests for it, in the next window."""
    spilled: int
    """Images waiting."""
    planned_at: str
    """When the spilling run was planned (its next window opens a spill delay later)."""


class Backlog(Response, kw_only=True):
    images: int
    """Images spilled to the next window, all runs together."""
    runs: list[SpilledRun]
    """Oldest first."""


async def backlog(gw: GatewayContext, _request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    entries = gw.rm.backlog(who.tenant)
    runs = [
        SpilledRun(
            run_id=b.run_id,
            root_run_id=b.root_run_id,
            continuation_run_id=b.continuation_id,
            spilled=b.spilled,
            planned_at=ms_to_iso(b.planned_ms) or "",
        )
        for b in entries
    ]
    return json_response(Backlog(images=sum(b.spilled for b in entries), runs=runs))


OPERATIONS = [
    Operation(
        "GET",
        "/backlog",
        backlog,
        "getBacklog",
        "Work spilled to the next window (oversubscription)",
        "runs",
        READ,
        responses={200: (Backlog, "the tenant's spilled work, oldest first")},
        description="A run whose impacted images exceed its `maxJobs` queues the first "
        "`maxJobs` (KEV and critical first) and spills the rest; the planner plans them as a "
        "continuation run in the next window. Listed here until that run is requested.",
    ),
]
