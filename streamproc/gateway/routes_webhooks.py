"""Export webhooks from Feedser and Vexer: authenticate the delivery, decode it under the
size limits, and record the export once per tenant of the source's allowlist.

An export is known by its ref, ``<source>:<exportId>``: export ids are the sender's own,
and another configured source using the same id neither blocks nor stands in for this one.
Event ids are ``derive_id(source, exportId, tenant)``; each tenant's event is appended to its
shard of the tenant's exports at most once (:mod:`streamproc.gateway.exportlog`), so a
repeated delivery — a moment or months later — yields no second event; the read model is
checked first and answers repeats without publishing at all. Every tenant has its own
outcome — recorded, duplicate, or conflict (the same export recorded before with another
body) — and one tenant's conflict never keeps the others from being recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Literal

import msgspec
from aiohttp import web

from streamproc import metrics
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.events.payloads import (
    FeedserExportBody,
    VexerExportBody,
    export_ref,
    sourced_export,
)
from streamproc.gateway.accesslog import RID
from streamproc.gateway.accesslog import SOURCE as SOURCE_KEY
from streamproc.gateway.auth import Principal
from streamproc.gateway.exportlog import Append, NotCaughtUp, Recorded, Unreadable
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
from streamproc.readmodel.exports import payload_digest
from streamproc.readmodel.queries import ReadModel

if TYPE_CHECKING:
    from streamproc.gateway.app import Gateway

Body = FeedserExportBody | VexerExportBody
Outcome = Literal["recorded", "duplicate", "conflict"]
_DECODERS: dict[str, msgspec.json.Decoder[FeedserExportBody | VexerExportBody]] = {
    "feedser": msgspec.json.Decoder(FeedserExportBody),
    "vexer": msgspec.json.Decoder(VexerExportBody),
}
log = logging.getLogger(__name__)
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


def _known(rm: ReadModel, tenant: str, kind: str, ref: str, export_id: str, event_id: str
           ) -> Recorded | None:  # fmt: skip
    """The read model's record of the export: by its ref, or this source's record of it from
    before refs (keyed by the bare id; the event id, derived from the source, tells it from
    another source's)."""
    rec = rm.export(tenant, kind, ref)
    if rec is None:
        legacy = rm.export(tenant, kind, export_id)
        rec = legacy if legacy is not None and legacy.event_id == event_id else None
    return None if rec is None else Recorded(rec.event_id, rec.seq, rec.payload_sha256)


def _settled(tenant: str, rec: Recorded, digest: str, fresh: bool = False) -> ExportEvent:
    if fresh:
        return ExportEvent(
            tenant=tenant, outcome="recorded", event_id=rec.event_id, seq=rec.seq, duplicate=False
        )
    same = rec.digest == digest
    outcome: Outcome = "duplicate" if same else "conflict"
    return ExportEvent(
        tenant=tenant, outcome=outcome, event_id=rec.event_id, seq=rec.seq, duplicate=same
    )


async def _append_all(
    gw: Gateway, events: list[Envelope], kind: str, ref: str, export_id: str, digest: str
) -> list[tuple[Recorded, bool] | BaseException]:
    """Append each tenant's event to its shard (:mod:`streamproc.gateway.exportlog`), the
    payload encoded once for every tenant; all at once, shielded when there are several, so
    a cancelled request cannot stop between tenants."""
    log_ = gw.exports
    publisher = gw.ctx.publisher
    raw = msgspec.Raw(msgspec.json.encode(events[0].payload))

    def append(e: Envelope) -> Awaitable[tuple[Recorded, bool]]:
        this = Append(encode(msgspec.structs.replace(e, payload=raw)), e.id, digest)
        return log_.append(
            publisher.subject_of(e),
            (e.tenant, kind, ref),
            lambda: _known(gw.rm, e.tenant, kind, ref, export_id, e.id),
            lambda latest: latest or this,  # recorded before: a repeat, or a conflict
        )

    if len(events) == 1:
        try:
            return [await append(events[0])]
        except Exception as exc:
            return [exc]
    sends = [append(e) for e in events]
    return list(await asyncio.shield(asyncio.gather(*sends, return_exceptions=True)))


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


async def _record(
    gw: Gateway, request: web.Request, source: Source, kind: str, body: Body
) -> tuple[int, WebhookAccepted]:
    """Record ``body`` for every tenant of ``source``; the status (202 if any tenant's event
    is new, 200 if none is) and each tenant's outcome. 409 when every tenant conflicts."""
    export_id = body.export_id
    ref = export_ref(source.name, export_id)
    payload = sourced_export(body, source.name)
    digest = payload_digest(body)
    settled: dict[str, ExportEvent] = {}
    fresh: list[Envelope] = []
    for tenant in source.tenants:
        event_id = derive_id(source.name, export_id, tenant)
        known = _known(gw.rm, tenant, kind, ref, export_id, event_id) or gw.exports.recent(
            tenant, kind, ref
        )
        if known is not None:
            settled[tenant] = _settled(tenant, known, digest)
            continue
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
    if fresh:
        failure: BaseException | None = None
        for event, out in zip(
            fresh, await _append_all(gw, fresh, kind, ref, export_id, digest), strict=True
        ):
            if isinstance(out, BaseException):
                failure = failure or out
                continue
            rec, appended = out
            settled[event.tenant] = _settled(event.tenant, rec, digest, fresh=appended)
        if failure is not None:
            # Tenants already stored are found on the sender's retry (by the ref).
            raise _append_failure(failure)
    events = [settled[t] for t in source.tenants]
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


async def _export(gw: Gateway, request: web.Request, kind: str) -> web.Response:
    hooks = gw.webhooks
    try:
        source = hooks.select(request, kind)
        request[SOURCE_KEY] = source.name
        require_json(request)
        delivery = hooks.admit(request, source)
        await hooks.refuse_seen(delivery)
        raw = await hooks.read_signed(request, source, delivery, gw.body_cap)
    except ProblemError:
        _RESULTS[kind, "refused"]()
        raise
    try:
        data = decode_content(raw, request.headers.get("Content-Encoding"), gw.inflated_cap)
        body = decode_export(data, _DECODERS[kind])
        check_key_count(key_count(body))
        status, accepted = await _record(gw, request, source, kind, body)
        await _remember(gw, delivery)
    except BaseException as exc:
        failed = isinstance(exc, ProblemError) and exc.status >= 500
        _RESULTS[kind, "failed" if failed else "refused"]()
        raise
    _RESULTS[kind, "accepted" if status == 202 else "duplicate"]()
    return json_response(accepted, status)


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
        errors=(409, 413, 415, 503),
        description="Recorded as export.feedser once per tenant of the source's allowlist "
        "(409 export-conflict: every tenant holds the export with another body).",
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
        errors=(409, 413, 415, 503),
        description="Recorded as export.vexer once per tenant of the source's allowlist "
        "(409 export-conflict: every tenant holds the export with another body).",
    ),
]
