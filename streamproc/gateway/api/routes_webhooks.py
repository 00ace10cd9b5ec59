"""Export webhooks from Feedser and Vexer: authenticate the delivery (its signature or
client certificate, and its access token), decode it under the size limits, and record the
export once per tenant that both the token and the source's allowlist admit (every tenant of
the allowlist for a source configured to take no token).

An export is known by its ref, ``<source>:<exportId>``: export ids are the sender's own,
and another configured source using the same id neither blocks nor stands in for this one.
Each tenant's event is appended to its shard of the tenant's exports
(:mod:`streamproc.recording.exportlog`) only when the export's latest revision there has
another body: a repeated delivery — a moment or months later — yields no second event, and
the read model is checked first so repeats are answered without publishing at all. The same
source sending the same ``exportId`` with another body records the export's next revision
("keep last", docs/conformance.md §12), id ``derive_id(source, exportId, tenant, "revision",
n)``; of two different bodies sent at once, one is revision n and the other n + 1 — never
two of the same number. Every tenant has its own outcome — recorded (with its revision) or
duplicate.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from streamproc import metrics
from streamproc.events.payloads import FeedserExportBody, VexerExportBody
from streamproc.gateway.accesslog import RID
from streamproc.gateway.accesslog import SOURCE as SOURCE_KEY
from streamproc.gateway.accesslog import TENANT as TENANT_KEY
from streamproc.gateway.api.models import ExportEvent, WebhookAccepted
from streamproc.gateway.api.operations import Operation, Param
from streamproc.gateway.api.writes import UNAVAILABLE_HEADERS, json_response, publish_failure
from streamproc.gateway.auth.callers import PRINCIPAL, WEBHOOK, Principal
from streamproc.gateway.auth.webhooks import (
    DELIVERY,
    MAX_SIGNATURE_PARTS,
    SIGNATURE,
    SOURCE,
    TIMESTAMP,
    Delivery,
    Source,
)
from streamproc.gateway.context import GatewayContext
from streamproc.gateway.hardening import (
    check_key_count,
    decode_content,
    decode_export,
    require_json,
)
from streamproc.problems import ProblemError
from streamproc.recording.exportlog import NotCaughtUp, Unreadable
from streamproc.recording.exports import NotRecorded, Outcome, Recorder, record

Body = FeedserExportBody | VexerExportBody
_DECODERS: dict[str, msgspec.json.Decoder[FeedserExportBody | VexerExportBody]] = {
    "feedser": msgspec.json.Decoder(FeedserExportBody),
    "vexer": msgspec.json.Decoder(VexerExportBody),
}
log = logging.getLogger("streamproc.gateway.routes_webhooks")  # the name log filters know it by
_RESULTS = {
    (kind, result): metrics.loop_counter(metrics.SCHEDULER_EVENTS.labels(kind, result))
    for kind in ("feedser", "vexer")
    for result in ("accepted", "duplicate", "refused", "failed")
}


def key_count(payload: Body) -> int:
    if isinstance(payload, FeedserExportBody):
        return (
            len(payload.changed_product_keys)
            + len(payload.kev)
            + sum(len(a.product_keys) for a in payload.advisories)
        )
    return len(payload.changed_claims)


def _outcome(out: Outcome) -> ExportEvent:
    rec = out.rec
    return ExportEvent(
        tenant=out.tenant,
        outcome="recorded" if out.recorded else "duplicate",
        event_id=rec.event_id,
        seq=rec.seq,
        duplicate=not out.recorded,
        revision=rec.revision,
    )


def _append_failure(exc: BaseException) -> ProblemError:
    if isinstance(exc, NotCaughtUp | Unreadable):
        log.warning("export not recorded now: %s", exc)
        return ProblemError(
            503,
            "log-unavailable",
            "the event log did not say whether it holds this export yet; retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        )
    return publish_failure(exc)


def recorder(gw: GatewayContext) -> Recorder:
    """The gateway's recording path: its export log over its read model's export records."""
    return Recorder(gw.exports, gw.rm.export, gw.ctx.clock, gw.ctx.publisher.prefix)


async def _record(
    gw: GatewayContext,
    request: web.Request,
    source: Source,
    kind: str,
    body: Body,
    tenants: list[str],
) -> tuple[int, WebhookAccepted]:
    """Record ``body`` for ``tenants`` (of ``source``) through
    :func:`streamproc.recording.exports.record`; the status (202 if any tenant's event is
    new, 200 if none is) and each tenant's outcome."""
    export_id = body.export_id
    try:
        outs = await record(recorder(gw), source.name, kind, body, tenants, request[RID])
    except NotRecorded as exc:
        # Tenants already stored are found on the sender's retry (by the ref).
        raise _append_failure(exc.cause) from None
    events = [_outcome(o) for o in outs]
    revised = [e.tenant for e in events if e.outcome == "recorded" and e.revision > 1]
    if revised:
        log.info(
            "export %s of source %s: revision %d recorded for %s",
            export_id,
            source.name,
            max(e.revision for e in events),
            ", ".join(revised),
        )
    recorded = any(e.outcome == "recorded" for e in events)
    accepted = WebhookAccepted(
        export_id=export_id,
        source=source.name,
        revision=max(e.revision for e in events),
        duplicate=not recorded,
        events=events,
    )
    return (202 if recorded else 200), accepted


async def _tenants(gw: GatewayContext, request: web.Request, source: Source) -> list[str]:
    """The tenants this delivery records for: those both its token and the source's
    allowlist admit (403 when none), or the whole allowlist for a source configured to
    take no token. The token is checked as any API call's (issuer, audience, DPoP or mTLS
    binding, proof replay), for scope ``scheduler.webhook``."""
    if not source.require_token:
        return source.tenants
    who = await gw.auth.authenticate(request, WEBHOOK)
    request[TENANT_KEY] = who.tenant
    request[PRINCIPAL] = who
    if who.tenant not in source.tenants:
        raise ProblemError(
            403,
            "tenant-not-allowed",
            f"webhook source {source.name} does not record exports for tenant {who.tenant} "
            "(the token's tenant is not in the source's tenants)",
            reason="tenant_not_allowed",
        )
    return [who.tenant]


async def _export(gw: GatewayContext, request: web.Request, kind: str) -> web.Response:
    hooks = gw.webhooks
    try:
        source = hooks.select(request, kind)
        request[SOURCE_KEY] = source.name
        require_json(request)
        delivery = hooks.admit(request, source)
        tenants = await _tenants(gw, request, source)
        await hooks.refuse_seen(delivery)
        raw = await hooks.read_signed(request, source, delivery, gw.body_cap)
    except ProblemError:
        _RESULTS[kind, "refused"]()
        raise
    try:
        data = decode_content(raw, request.headers.get("Content-Encoding"), gw.inflated_cap)
        body = decode_export(data, _DECODERS[kind])
        check_key_count(key_count(body))
        status, accepted = await _record(gw, request, source, kind, body, tenants)
        await _remember(gw, delivery)
    except BaseException as exc:
        failed = isinstance(exc, ProblemError) and exc.status >= 500
        _RESULTS[kind, "failed" if failed else "refused"]()
        raise
    _RESULTS[kind, "accepted" if status == 202 else "duplicate"]()
    return gw.with_nonce(json_response(accepted, status), request.get(PRINCIPAL))


async def _remember(gw: GatewayContext, delivery: Delivery) -> None:
    """The export is recorded: claim the delivery id (409 for a replay). If the replay
    bucket cannot take it, the answer still says what was recorded — refusing now would
    only make the sender retry an export that is already stored."""
    try:
        await gw.webhooks.remember(delivery)
    except ProblemError as exc:
        if exc.status == 409:
            raise
        log.warning(
            "delivery %s of %s recorded but not remembered against replays: %s",
            delivery.id,
            delivery.source,
            exc.detail,
        )


async def feedser_export(
    gw: GatewayContext, request: web.Request, _who: Principal | None
) -> web.Response:
    return await _export(gw, request, "feedser")


async def vexer_export(
    gw: GatewayContext, request: web.Request, _who: Principal | None
) -> web.Response:
    return await _export(gw, request, "vexer")


_HEADERS = (
    Param(
        SIGNATURE,
        "header",
        {"type": "string"},
        "sha256=<hex HMAC-SHA256> or ed25519=<base64 signature> over timestamp + '.' + body; "
        f"at most {MAX_SIGNATURE_PARTS} comma-separated values (sha256: one per secret during "
        "a rotation), one of them ed25519",
    ),
    Param(
        TIMESTAMP,
        "header",
        {"type": "string", "pattern": "^[0-9]{1,12}$"},
        "Unix seconds; within 5 minutes of server time",
        required=True,
    ),
    Param(
        DELIVERY,
        "header",
        {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
        "unique per delivery; a repeat is refused (409)",
        required=True,
    ),
    Param(
        SOURCE,
        "header",
        {"type": "string"},
        "configured source name (needed when several sources of the kind exist)",
    ),
    Param("Content-Encoding", "header", {"enum": ["identity", "gzip", "zstd"]}),
)
_RESPONSES: dict[int, tuple[type | None, str]] = {
    202: (
        WebhookAccepted,
        "recorded (the first body, or the next revision) for at least one tenant; each "
        "tenant's outcome and revision in events",
    ),
    200: (
        WebhookAccepted,
        "nothing new: each tenant's latest revision of the export has this body (a repeat)",
    ),
}
OPERATIONS = [
    Operation(
        "POST",
        "/events/feedser-export",
        feedser_export,
        "feedserExport",
        "Feedser export webhook",
        "webhooks",
        None,
        body=FeedserExportBody,
        params=_HEADERS,
        responses=_RESPONSES,
        errors=(403, 409, 413, 415, 503),
        description="A signature (or client certificate) and an access token with scope "
        "`scheduler.webhook` (admin implies it; none for a source configured with "
        "`require_token = false`). Recorded as export.feedser for the token's tenant when the "
        "source lists it (403 otherwise), or for every tenant of a source that takes no "
        "token. The same exportId with another body is the export's next revision (202, "
        "`revision`); with the same body, a duplicate (200).",
    ),
    Operation(
        "POST",
        "/events/vexer-export",
        vexer_export,
        "vexerExport",
        "Vexer export webhook",
        "webhooks",
        None,
        body=VexerExportBody,
        params=_HEADERS,
        responses=_RESPONSES,
        errors=(403, 409, 413, 415, 503),
        description="A signature (or client certificate) and an access token with scope "
        "`scheduler.webhook` (admin implies it; none for a source configured with "
        "`require_token = false`). Recorded as export.vexer for the token's tenant when the "
        "source lists it (403 otherwise), or for every tenant of a source that takes no "
        "token. The same exportId with another body is the export's next revision (202, "
        "`revision`); with the same body, a duplicate (200).",
    ),
]
