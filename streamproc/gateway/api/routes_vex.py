"""VEX documents in: ``PUT /vex/{documentId}`` reads an OpenVEX, CycloneDX VEX or CSAF 2.0
VEX document, checks it against its format's JSON Schema, normalises its statements to
claims, compares them with the claims held for the document and records an
``export.vexer`` with the ``changedClaims`` (``from→to``) — nothing when nothing changed.

Every version of one document is recorded on one subject (``…vexer.<vex-documents/id>``)
after that subject's last event (expected last subject sequence), so versions are
serialised across gateway replicas: a stale or conflicting version is refused (409), and the
claims a new version is compared with are the read model's, once it has folded that last
event. The event id is derived from the document's bytes and that sequence: a retried PUT
is de-duplicated.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from aiohttp import web
from msgspec import UNSET

from streamproc import metrics
from streamproc.bus.jsapi import JsApiError, last_on_subject
from streamproc.bus.publisher import WrongExpectedSequence
from streamproc.events import payloads as p
from streamproc.events.catalog import aggregate_subject
from streamproc.gateway.api.models import VexAccepted, VexDocumentList, VexDocumentView, VexSkipped
from streamproc.gateway.api.operations import CURSOR, LIMIT, WAIT, Operation, Param
from streamproc.gateway.api.query import paged
from streamproc.gateway.api.writes import (
    UNAVAILABLE_HEADERS,
    applied,
    json_response,
    publish,
    stamp,
    wants_wait,
)
from streamproc.gateway.auth.callers import READ, VEX_WRITE, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.gateway.hardening import decode_content, read_body, require_json
from streamproc.ids import derive_id
from streamproc.problems import ProblemError
from streamproc.readmodel.nextfire import ms_to_iso
from streamproc.readmodel.vex import VexDocumentRecord, VexReader
from streamproc.vex.claims import Change, diff
from streamproc.vex.documents import parse
from streamproc.vex.model import Document, VexError, version_key

_RESULTS = {
    r: metrics.SCHEDULER_EVENTS.labels("vex", r)
    for r in ("accepted", "duplicate", "refused", "failed")
}
ATTEMPTS = 3
Answer = tuple[VexAccepted, int]
"""The answer's body and status."""
DOCUMENT_ID = Param(
    "documentId",
    "path",
    {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:~-]{0,199}$"},
    "the document's name in this tenant (letters, digits, . _ : ~ -)",
    required=True,
)


def _document_id(request: web.Request) -> str:
    raw = request.match_info["documentId"]
    try:
        return msgspec.convert(raw, p.DocumentId)
    except msgspec.ValidationError:
        raise ProblemError(
            400,
            "invalid-parameter",
            f"{raw[:200]!r} is not a document id (1-200 of letters, digits, . _ : ~ -, "
            "starting with a letter or digit)",
            field="path.documentId",
        ) from None


def _read(data: bytes) -> Document:
    try:
        return parse(data)
    except VexError as exc:
        raise ProblemError(exc.status, exc.slug, exc.detail, field=exc.field) from None


class _Documents(msgspec.Struct, rename="camel"):
    documents: list[p.VexDocument] = []


class _LastEvent(msgspec.Struct, rename="camel"):
    """Of the document subject's last event, only what says which version it recorded: a
    version with 10,000 claims is ~2 MB, and its claims are the read model's business."""

    kind: str
    payload: _Documents


_last_event = msgspec.json.Decoder(_LastEvent)


def _held(data: bytes | None, document_id: str) -> p.VexDocument | None:
    """The version the document subject's last event recorded (None: never recorded)."""
    if not data:
        return None
    try:
        prev = _last_event.decode(data)
    except msgspec.DecodeError:
        return None
    if prev.kind != "export.vexer":
        return None
    return next((d for d in prev.payload.documents if d.document_id == document_id), None)


def _compare(held: p.VexDocument | None, doc: Document, sha256: str) -> bool:
    """True when ``doc`` is the held version itself; 409 when it is older or conflicts."""
    if held is None:
        return False
    if held.sha256 == sha256:
        return True
    old, new = version_key(held.version), version_key(doc.version)
    if new < old or (new == old and held.version != doc.version):
        raise ProblemError(
            409,
            "stale-version",
            f"version {doc.version} is older than version {held.version} held for this document",
            reason="stale_version",
        )
    if new == old:
        raise ProblemError(
            409,
            "version-conflict",
            f"version {doc.version} is held with other content: a changed document needs a "
            "new version",
            reason="version_conflict",
        )
    return False


def _payload(document_id: str, doc: Document, sha256: str, changes: list[Change]) -> p.VexerExport:
    claims = [
        p.ChangedClaim(
            product_key=ch.claim.purl,
            vuln_id=ch.claim.vuln_id,
            status=ch.transition,
            justification=(None if ch.removed else ch.claim.justification) or UNSET,
            document_id=document_id,
            image_digest=ch.claim.image or UNSET,
            removed=ch.removed or UNSET,
        )
        for ch in changes
    ]
    return p.VexerExport(
        export_id=f"{document_id}@{doc.version}",
        changed_claims=claims,
        documents=[
            p.VexDocument(
                document_id=document_id,
                format=doc.format,
                version=doc.version,
                sha256=sha256,
                statements=doc.statements,
                claims=len(doc.claims),
            )
        ],
        source=p.VEX_DOCUMENT_SOURCE,
    )


def _answer(document_id: str, doc: Document, changed: int, **kw: object) -> VexAccepted:
    return VexAccepted(
        document_id=document_id,
        format=doc.format,
        version=doc.version,
        statements=doc.statements,
        claims=len(doc.claims),
        changed_claims=changed,
        skipped=VexSkipped(count=doc.skipped_count, reasons=doc.skipped),
        **kw,  # type: ignore[arg-type]
    )


def _subject(gw: GatewayContext, tenant: str, document_id: str) -> str:
    """Where every version of the document is recorded (``VexerExport.subject_id``)."""
    return aggregate_subject(
        gw.ctx.settings.prefix, tenant, "vexer", f"{p.VEX_DOCUMENT_SOURCE}/{document_id}"
    )


async def _last(
    gw: GatewayContext, subject: str, document_id: str
) -> tuple[int, p.VexDocument | None]:
    """The document subject's last sequence, and the version its event recorded."""
    try:
        last, data = await last_on_subject(
            gw.ctx.publisher.nc, gw.ctx.settings.events_stream, subject
        )
    except JsApiError as exc:
        raise ProblemError(
            503,
            "log-unavailable",
            f"the event log did not answer: {exc.description}; retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        ) from None
    return last, _held(data, document_id)


def _unchanged(gw: GatewayContext, tenant: str, held: p.VexDocument, last: int) -> Answer:
    """The same bytes as the version held: nothing to record, nothing to parse again."""
    rec = VexReader(gw.ctx.store).document(tenant, held.document_id)
    return (
        VexAccepted(
            document_id=held.document_id,
            format=held.format,
            version=held.version,
            statements=held.statements,
            claims=held.claims,
            changed_claims=0,
            unchanged=True,
            export_id=rec.export_id if rec else None,
            event_id=rec.event_id if rec else None,
            seq=last,
            applied=gw.ctx.applied() >= last,
        ),
        200,
    )


async def _record(
    gw: GatewayContext, request: web.Request, tenant: str, document_id: str, doc: Document, sha: str
) -> Answer:
    vex = VexReader(gw.ctx.store)
    subject = _subject(gw, tenant, document_id)
    for _ in range(ATTEMPTS):
        last, held = await _last(gw, subject, document_id)
        if _compare(held, doc, sha):
            assert held is not None
            return _unchanged(gw, tenant, held, last)
        if last and not await applied(gw, last):
            raise ProblemError(
                503,
                "read-model-behind",
                "the claims held for this document are not read yet; retrying is safe",
                headers=UNAVAILABLE_HEADERS,
            )
        if not doc.claims and held is None:
            raise ProblemError(
                422,
                "no-claims",
                f"none of the document's {doc.statements} statements names a product by purl "
                f"({doc.skipped_count} skipped: {'; '.join(doc.skipped[:3])})",
            )
        changes = diff(vex.claims(tenant, document_id), doc.claims)
        if len(changes) > p.MAX_KEYS:
            raise ProblemError(
                413,
                "too-many-keys",
                f"{len(changes)} changed claims in one document; at most {p.MAX_KEYS}",
                count=len(changes),
                limit=p.MAX_KEYS,
            )
        payload = _payload(document_id, doc, sha, changes)
        eid = derive_id("export.vexer", tenant, document_id, sha, str(last))
        event = stamp(gw, request, "export.vexer", tenant, payload, event_id=eid)
        try:
            ack = await publish(gw, event, expected=last)
        except WrongExpectedSequence:
            continue  # another version was recorded meanwhile: compare with it
        done = wants_wait(request) and await applied(gw, ack.seq)
        body = _answer(
            document_id,
            doc,
            len(changes),
            export_id=payload.ref,
            event_id=eid,
            seq=ack.seq,
            applied=done or gw.ctx.applied() >= ack.seq,
        )
        return body, 200 if done else 202
    raise ProblemError(409, "concurrent-update", f"document {document_id} keeps changing; retry")


async def put_vex(gw: GatewayContext, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    try:
        document_id = _document_id(request)
        require_json(request)
        raw = await read_body(request, gw.body_cap)
        data = decode_content(raw, request.headers.get("Content-Encoding"), gw.inflated_cap)
        sha = hashlib.sha256(data).hexdigest()
        last, held = await _last(gw, _subject(gw, who.tenant, document_id), document_id)
        if held is not None and held.sha256 == sha:
            body, status = _unchanged(gw, who.tenant, held, last)
        else:
            doc = _read(data)
            body, status = await _record(gw, request, who.tenant, document_id, doc, sha)
    except ProblemError as exc:
        _RESULTS["failed" if exc.status >= 500 else "refused"].inc()
        raise
    _RESULTS["duplicate" if body.unchanged else "accepted"].inc()
    return json_response(body, status)


def _view(rec: VexDocumentRecord) -> VexDocumentView:
    return VexDocumentView(
        document_id=rec.document_id,
        format=rec.format,
        version=rec.version,
        sha256=rec.sha256,
        statements=rec.statements,
        claims=rec.claims,
        export_id=rec.export_id,
        updated_at=ms_to_iso(rec.updated_ms) or "",
    )


async def get_vex(gw: GatewayContext, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    document_id = _document_id(request)
    rec = VexReader(gw.ctx.store).document(who.tenant, document_id)
    if rec is None:
        raise ProblemError(404, "not-found", f"VEX document {document_id} is not recorded")
    return json_response(_view(rec))


async def list_vex(gw: GatewayContext, request: web.Request, who: Principal | None) -> web.Response:
    assert who is not None
    page = paged(request, VexReader(gw.ctx.store).documents, who.tenant)
    return json_response(
        VexDocumentList(items=[_view(r) for r in page.items], next_cursor=page.next_cursor)
    )


OPERATIONS = [
    Operation(
        "PUT",
        "/vex/{documentId}",
        put_vex,
        "putVexDocument",
        "Record a VEX document (OpenVEX, CycloneDX VEX, CSAF 2.0 VEX)",
        "vex",
        VEX_WRITE,
        body=dict[str, Any],
        params=(
            DOCUMENT_ID,
            WAIT,
            Param("Content-Encoding", "header", {"enum": ["identity", "gzip", "zstd"]}),
        ),
        responses={
            202: (VexAccepted, "recorded as export.vexer with the claims that changed"),
            200: (
                VexAccepted,
                "nothing new (`unchanged`: this document was recorded before), or with "
                "?wait=true applied by the read model",
            ),
        },
        errors=(409, 413, 415, 422, 503),
        description="The document is checked against its format's own JSON Schema (422 "
        "schema-violation names the first violations), its statements normalised to claims of "
        "(purl, vulnerability, status, justification) and compared with the claims held for "
        "this document id. A newer version replaces the document's claims; an older one is "
        "409 stale-version, the same version with other content 409 version-conflict. "
        "Also allowed with scope scheduler.admin.",
    ),
    Operation(
        "GET",
        "/vex/{documentId}",
        get_vex,
        "getVexDocument",
        "A VEX document's version in force",
        "vex",
        READ,
        params=(DOCUMENT_ID,),
        responses={200: (VexDocumentView, "the document as recorded")},
        errors=(404,),
    ),
    Operation(
        "GET",
        "/vex",
        list_vex,
        "listVexDocuments",
        "List the tenant's VEX documents, by id",
        "vex",
        READ,
        params=(LIMIT, CURSOR),
        responses={200: (VexDocumentList, "one page")},
    ),
]
