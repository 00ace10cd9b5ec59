"""Audit chain verification for the caller's tenant, answered by an auditor over NATS
(:mod:`streamproc.audit.service`). A broken chain is a 200 with ``"verified": false``."""

from __future__ import annotations

from aiohttp import web

from streamproc.gateway.api.operations import Operation, Param
from streamproc.gateway.api.query import bool_param
from streamproc.gateway.api.writes import json_response
from streamproc.gateway.auth.callers import READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.ids import InvalidTenant, validate_tenant
from streamproc.problems import ProblemError
from streamproc.queries import ChainReport


async def verify_chain(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    tenant = request.query.get("tenantId", "")
    try:
        validate_tenant(tenant)
    except InvalidTenant as exc:
        raise ProblemError(400, "invalid-tenant", str(exc), field="tenantId") from None
    if tenant != who.tenant:  # as for every other resource of another tenant: it is not there
        raise ProblemError(404, "not-found", f"no audit chain for tenant {tenant!r}")
    log_view = bool(bool_param(request, "logView"))
    return json_response(await gw.remote.verify(tenant, log_view))


OPERATIONS = [
    Operation(
        "GET",
        "/chain/verify",
        verify_chain,
        "verifyChain",
        "Verify the caller's audit hash chain and its signed snapshots",
        "audit",
        READ,
        params=(
            Param(
                "tenantId",
                "query",
                {"type": "string"},
                "the caller's own tenant (another tenant's chain is 404)",
                required=True,
            ),
            Param(
                "logView",
                "query",
                {"type": "boolean", "default": False},
                "also compare the HLC-ordered log view with the chain (slower)",
            ),
        ),
        responses={200: (ChainReport, "the verification (a broken chain too)")},
        errors=(404, 429, 502, 503),
        description="Answered by an auditor over NATS; 429 when four of the tenant's verifications "
        "wait already, 503 (`Retry-After`) when the auditor is busy or no auditor "
        "answers within `gateway.verify_timeout_s`.",
    ),
]
