"""Export webhooks from Feedser and Vexer: authenticate the delivery (its signature or
client certificate, and its access token), decode it under the size limits, and record the
export once per tenant that both the token and the source's allowlist admit (every tenant of
the allowlist for a source configured to take no token).

An export is known by its ref, ``<source>:<exportId>``: export ids are the sender's own,
and another configured source using the same id neither blocks nor stands in for this one.
Event ids are ``derive_id(source, exportId, tenant)`` and each is published create-only on
its own subject (``…<tenant>.<feedser|vexer>.<ref>``), so a repeated delivery — within
JetStream's duplicate window or long after it — yields no second event; the read model is
checked first and answers repeats without publishing at all. Every tenant has its own
outcome — recorded, duplicate, or conflict (the same export recorded before with another
body) — and one tenant's conflict never keeps the others from being recorded.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from typing import TYPE_CHECKING, Literal

import msgspec
from aiohttp import web

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.publisher import PubAck, WrongExpectedSequence
from streamproc.events.envelope import Envelope, EventError, decode, encode, new_event
from streamproc.events.payloads import (
    FeedserExport,
    FeedserExportBody,
    VexerExport,
    VexerExportBody,
    export_ref,
    sourced_export,
)
from streamproc.gateway.accesslog import RID
from streamproc.gateway.accesslog import SOURCE as SOURCE_KEY
from streamproc.gateway.accesslog import TENANT as TENANT_KEY
from streamproc.gateway.auth import PRINCIPAL, WEBHOOK, Principal
from streamproc.gateway.hardening import (
    check_key_count,
    decode_content,
    decode_export,
    require_json,
)
from streamproc.gateway.models import ExportEvent, WebhookAccepted
from streamproc.gateway.operations import Operation, Param
from streamproc.gateway.webhooks import (
    DELIVERY,
    MAX_SIGNATURE_PARTS,
    SIGNATURE,
    SOURCE,
    TIMESTAMP,
    Delivery,
    Source,
)
from streamproc.gateway.writes import UNAVAILABLE_HEADERS, json_response, publish_failure
from streamproc.ids import derive_id
from streamproc.problems import ProblemError
from streamproc.readmodel.exports import export_digest, payload_digest
from streamproc.readmodel.queries import ReadModel
from streamproc.readmodel.records import ExportRecord

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

Body = FeedserExportBody | VexerExportBody
Outcome = Literal["recorded", "duplicate", "conflict"]
_DECODERS: dict[str, msgspec.json.Decoder[FeedserExportBody | VexerExportBody]] = {
    "feedser": msgspec.json.Decoder(FeedserExportBody),
    "vexer": msgspec.json.Decoder(VexerExportBody),
}
log = logging.getLogger(__name__)
_LAST_SEQ = re.compile(r"wrong last sequence: (\d+)")
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


async def _publish_all(gw: Gateway, events: list[Envelope]) -> list[object]:
    """Create-only publishes, all sent before any is awaited, the payload encoded once for
    every tenant; shielded when there are several, so a cancelled request cannot stop
    between tenants."""
    publisher = gw.ctx.publisher
    if len(events) == 1:
        try:
            return [await publisher.publish_event(events[0], expected_last_subject_seq=0)]
        except Exception as exc:
            return [exc]
    raw = msgspec.Raw(msgspec.json.encode(events[0].payload))
    sends = [
        publisher.publish(
            publisher.subject_of(e),
            encode(msgspec.structs.replace(e, payload=raw)),
            e.id,
            expected_last_subject_seq=0,
        )
        for e in events
    ]
    return list(await asyncio.shield(asyncio.gather(*sends, return_exceptions=True)))


def _own_legacy(
    rm: ReadModel, tenant: str, kind: str, export_id: str, event_id: str
) -> ExportRecord | None:
    """This source's record of the export from before refs (keyed by the bare id), if any:
    the event id, derived from the source, tells it from another source's."""
    rec = rm.export(tenant, kind, export_id)
    return rec if rec is not None and rec.event_id == event_id else None


async def _stored_export(gw: Gateway, seq: int) -> tuple[str, str]:
    """The id and body digest of the export event at ``seq`` (one that took the subject or
    the message id first): whether ours is a repeat of it or conflicts with it."""
    nc = gw.ctx.publisher.nc
    try:
        doc = await jsapi.request(
            nc, f"STREAM.MSG.GET.{gw.ctx.settings.events_stream}", {"seq": seq}
        )
        event = decode(base64.b64decode(doc["message"]["data"]))
    except (jsapi.JsApiError, EventError, KeyError) as exc:
        log.warning("could not read the export event at %d to compare: %s", seq, exc)
        raise ProblemError(
            503,
            "log-unavailable",
            "the event log did not say what it holds for this export; retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        ) from None
    assert isinstance(event.payload, FeedserExport | VexerExport)
    return event.id, export_digest(event.payload)


def _settled(tenant: str, event_id: str, seq: int, same_body: bool) -> ExportEvent:
    outcome: Outcome = "duplicate" if same_body else "conflict"
    return ExportEvent(
        tenant=tenant, outcome=outcome, event_id=event_id, seq=seq, duplicate=same_body
    )


async def _record(
    gw: Gateway, request: web.Request, source: Source, kind: str, body: Body, tenants: list[str]
) -> tuple[int, WebhookAccepted]:
    """Record ``body`` for ``tenants`` (of ``source``); the status (202 if any tenant's event
    is new, 200 if none is) and each tenant's outcome. 409 when every tenant conflicts."""
    export_id = body.export_id
    ref = export_ref(source.name, export_id)
    payload = sourced_export(body, source.name)
    digest = ""
    settled: dict[str, ExportEvent] = {}
    fresh: list[Envelope] = []
    for tenant in tenants:
        event_id = derive_id(source.name, export_id, tenant)
        known = gw.rm.export(tenant, kind, ref) or _own_legacy(
            gw.rm, tenant, kind, export_id, event_id
        )
        if known is None:
            fresh.append(
                new_event(
                    f"export.{kind}",
                    tenant,
                    payload,
                    gw.ctx.clock.now(),
                    event_id=event_id,
                    correlation_id=request[RID],
                )
            )
            continue
        digest = digest or payload_digest(body)
        settled[tenant] = _settled(
            tenant, known.event_id, known.seq, known.payload_sha256 == digest
        )
    if fresh:
        failure: BaseException | None = None
        for event, out in zip(fresh, await _publish_all(gw, fresh), strict=True):
            if isinstance(out, PubAck) and not out.duplicate:
                settled[event.tenant] = ExportEvent(
                    tenant=event.tenant,
                    outcome="recorded",
                    event_id=event.id,
                    seq=out.seq,
                    duplicate=False,
                )
                continue
            seq = out.seq if isinstance(out, PubAck) else _taken_by(out)
            if seq is None:
                failure = failure or out  # type: ignore[assignment]  # out is an exception when it is not a PubAck (return_exceptions)
                continue
            # The subject (or the id, within the duplicate window) holds this export already,
            # and the read model has not folded it yet: a repeat, or a conflicting body?
            stored_id, stored_digest = await _stored_export(gw, seq)
            digest = digest or payload_digest(body)
            settled[event.tenant] = _settled(event.tenant, stored_id, seq, stored_digest == digest)
        if failure is not None:
            # Tenants already stored are absorbed on the sender's retry (same derived ids).
            raise publish_failure(failure)
    events = [settled[t] for t in tenants]
    conflicts = [e.tenant for e in events if e.outcome == "conflict"]
    if conflicts:
        log.warning(
            "export %s of source %s was recorded before with a different body for %s",
            export_id,
            source.name,
            ", ".join(conflicts),
        )
        if len(conflicts) == len(events):
            raise ProblemError(
                409,
                "export-conflict",
                f"export {export_id!r} was already recorded with a different body",
            )
    recorded = any(e.outcome == "recorded" for e in events)
    accepted = WebhookAccepted(
        export_id=export_id,
        source=source.name,
        duplicate=all(e.outcome == "duplicate" for e in events),
        events=events,
    )
    return (202 if recorded else 200), accepted


def _taken_by(out: object) -> int | None:
    """The sequence of the event that holds the subject a create-only publish was refused."""
    if isinstance(out, WrongExpectedSequence):
        m = _LAST_SEQ.search(out.description)
        if m:
            return int(m.group(1))
    return None


async def _tenants(gw: Gateway, request: web.Request, source: Source) -> list[str]:
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


async def _export(gw: Gateway, request: web.Request, kind: str) -> web.Response:
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


async def _remember(gw: Gateway, delivery: Delivery) -> None:
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


async def feedser_export(gw: Gateway, request: web.Request, _who: Principal | None) -> web.Response:
    return await _export(gw, request, "feedser")


async def vexer_export(gw: Gateway, request: web.Request, _who: Principal | None) -> web.Response:
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
        "recorded for at least one tenant of the source; each tenant's outcome in events",
    ),
    200: (
        WebhookAccepted,
        "nothing new: every tenant's event already existed (a repeat), or "
        "some conflict (see events)",
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
        "token (409 export-conflict: every tenant holds the export with another body).",
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
        "token (409 export-conflict: every tenant holds the export with another body).",
    ),
]
