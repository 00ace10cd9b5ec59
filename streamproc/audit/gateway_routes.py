"""``GET /api/v1/scheduler/chain/verify`` on the process's gateway.

The auditor role mounts the route; the gateway in the same process authenticates the caller
(scope ``scheduler.read``) and a token of another tenant gets 404, as for every other route.
A process without a gateway answers 404 (the route exists only behind the gateway's auth).
"""

from __future__ import annotations

from aiohttp import web

from streamproc.audit.http import add_chain_routes, read_only_opener
from streamproc.audit.signing import build_keyring
from streamproc.gateway.app import GATEWAY
from streamproc.gateway.problems import ProblemError
from streamproc.reactor import RoleContext


def mount_chain_routes(app: web.Application, ctx: RoleContext) -> None:
    state_dir = ctx.settings.state_dir(ctx.role)
    data_dir = ctx.settings.data_dir

    def authorize(request: web.Request, tenant: str) -> None:
        gateway = request.app.get(GATEWAY)
        if gateway is None:
            raise ProblemError(404, "not-found", "no gateway in this process")
        principal = gateway.auth.authenticate(request, "scheduler.read")  # type: ignore[attr-defined]
        if principal.tenant != tenant:
            raise ProblemError(404, "not-found", f"no audit chain for tenant {tenant!r}")

    # A point-in-time read-only view of the auditor's directory (the handler closes it; the
    # live store stays with the projector).
    add_chain_routes(
        app, read_only_opener(state_dir), lambda: build_keyring(data_dir), authorize=authorize
    )
