"""Export webhooks from Feedser and Vexer: authenticate the delivery, decode it under the
size limits, and record the export once per tenant of the source's allowlist.

Event ids are ``derive_id(source, exportId, tenant)`` and each is published create-only on
its own subject (``…<tenant>.<feedser|vexer>.<exportId>``), so a repeated delivery — within
JetStream's duplicate window or long after it — yields no second event; the read model is
checked first and answers repeats without publishing at all.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from streamproc import metrics
from streamproc.bus.publisher import PubAck, WrongExpectedSequence
from streamproc.events.envelope import Envelope, new_event
from streamproc.events.payloads import FeedserExport, VexerExport
from streamproc.gateway.accesslog import RID
from streamproc.gateway.accesslog import SOURCE as SOURCE_KEY
from streamproc.gateway.auth import Principal
from streamproc.gateway.hardening import (
    check_key_count,
    decode_content,
    decode_export,
    read_body,
    require_json,
)
from streamproc.gateway.models import ExportEvent, WebhookAccepted
from streamproc.gateway.operations import Operation, Param
from streamproc.gateway.webhooks import DELIVERY, SIGNATURE, SOURCE, TIMESTAMP, Delivery, Source
from streamproc.gateway.writes import json_response, publish_failure
from streamproc.ids import derive_id
from streamproc.problems import ProblemError
from streamproc.readmodel.exports import payload_digest

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

_DECODERS = {
    "feedser": msgspec.json.Decoder(FeedserExport),
    "vexer": msgspec.json.Decoder(VexerExport),
}
log = logging.getLogger(__name__)
_LAST_SEQ = re.compile(r"wrong last sequence: (\d+)")
_RESULTS = {
    (kind, result): metrics.SCHEDULER_EVENTS.labels(kind, result)
    for kind in ("feedser", "vexer")
    for result in ("accepted", "duplicate", "refused", "failed")
}


def key_count(payload: FeedserExport | VexerExport) -> int:
    if isinstance(payload, FeedserExport):
        return (
            len(payload.changed_product_keys)
            + len(payload.kev)
            + sum(len(a.product_keys) for a in payload.advisories)
        )
    return len(payload.changed_claims)


async def _publish_all(gw: Gateway, events: list[Envelope]) -> list[object]:
    """Create-only publishes, all sent before any is awaited; shielded when there are
    several, so a cancelled request cannot stop between tenants."""
    publish = gw.ctx.publisher.publish_event
    if len(events) == 1:
        try:
            return [await publish(events[0], expected_last_subject_seq=0)]
        except Exception as exc:
            return [exc]
    return list(
        await asyncio.shield(
            asyncio.gather(
                *(publish(e, expected_last_subject_seq=0) for e in events),
                return_exceptions=True,
            )
        )
    )


async def _record(
    gw: Gateway,
    request: web.Request,
    source: Source,
    kind: str,
    payload: FeedserExport | VexerExport,
) -> WebhookAccepted:
    export_id = payload.export_id
    digest: str | None = None
    results: list[ExportEvent] = []
    fresh: list[Envelope] = []
    for tenant in source.tenants:
        known = gw.rm.export(tenant, kind, export_id)
        if known is None:
            fresh.append(
                new_event(
                    f"export.{kind}",
                    tenant,
                    payload,
                    gw.ctx.clock.now(),
                    event_id=derive_id(source.name, export_id, tenant),
                    correlation_id=request[RID],
                )
            )
            continue
        digest = digest or payload_digest(payload)
        if known.payload_sha256 != digest:
            raise ProblemError(
                409,
                "export-conflict",
                f"export {export_id!r} was already recorded with a different body",
            )
        results.append(
            ExportEvent(tenant=tenant, event_id=known.event_id, seq=known.seq, duplicate=True)
        )
    if fresh:
        outcomes = await _publish_all(gw, fresh)
        failure: BaseException | None = None
        for event, out in zip(fresh, outcomes, strict=True):
            if isinstance(out, PubAck):
                results.append(
                    ExportEvent(
                        tenant=event.tenant, event_id=event.id, seq=out.seq, duplicate=out.duplicate
                    )
                )
            elif isinstance(out, WrongExpectedSequence):  # the subject already has the export
                m = _LAST_SEQ.search(out.description)
                results.append(
                    ExportEvent(
                        tenant=event.tenant,
                        event_id=event.id,
                        seq=int(m.group(1)) if m else 0,
                        duplicate=True,
                    )
                )
            else:
                failure = out
        if failure is not None:
            # Tenants already stored are absorbed on the sender's retry (same derived ids).
            raise publish_failure(failure)
    return WebhookAccepted(
        export_id=export_id,
        source=source.name,
        duplicate=all(r.duplicate for r in results),
        events=results,
    )


async def _export(gw: Gateway, request: web.Request, kind: str) -> web.Response:
    try:
        source = gw.webhooks.select(request, kind)
        request[SOURCE_KEY] = source.name
        require_json(request)
        raw = await read_body(request, gw.body_cap)
        delivery = gw.webhooks.authenticate(request, source, raw)
        await gw.webhooks.refuse_seen(delivery)
    except ProblemError:
        _RESULTS[kind, "refused"].inc()
        raise
    try:
        data = decode_content(raw, request.headers.get("Content-Encoding"), gw.inflated_cap)
        payload = decode_export(data, _DECODERS[kind])
        check_key_count(key_count(payload))
        accepted = await _record(gw, request, source, kind, payload)
        await _remember(gw, delivery)
    except BaseException as exc:
        failed = isinstance(exc, ProblemError) and exc.status >= 500
        _RESULTS[kind, "failed" if failed else "refused"].inc()
        raise
    _RESULTS[kind, "duplicate" if accepted.duplicate else "accepted"].inc()
    return json_response(accepted, 200 if accepted.duplicate else 202)


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
        "several comma-separated values are accepted",
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
_RESPONSES = {
    202: (WebhookAccepted, "recorded for every tenant of the source"),
    200: (WebhookAccepted, "a repeat: every tenant's event already existed"),
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
        body=FeedserExport,
        params=_HEADERS,
        responses=_RESPONSES,
        errors=(409, 413, 415, 503),
        description="Recorded as export.feedser once per tenant of the source's allowlist.",
    ),
    Operation(
        "POST",
        "/events/vexer-export",
        vexer_export,
        "vexerExport",
        "Vexer export webhook",
        "webhooks",
        None,
        body=VexerExport,
        params=_HEADERS,
        responses=_RESPONSES,
        errors=(409, 413, 415, 503),
        description="Recorded as export.vexer once per tenant of the source's allowlist.",
    ),
]
