"""Images: SBOM ingestion over HTTP (the way CI pipelines and scanners hand SBOMs over),
the indexed summary, removal, and a paged listing.

A PUT turns the SBOM into an ``image.indexed`` event exactly as ``streamproc index add``
does (:mod:`streamproc.sbom.publish`), under the webhooks' body caps and encodings. Whether
the image is already indexed with the same content is decided by the image subject's last
event in the log, not by the read model, so it holds beyond JetStream's duplicate window and
while the read model lags; GETs answer from the read model (``rm_images``).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from streamproc import metrics
from streamproc.bus import objects
from streamproc.bus.jsapi import JsApiError
from streamproc.events.payloads import ImageIndexed, ImageRemoved
from streamproc.gateway.accesslog import RID
from streamproc.gateway.api.models import ImageAccepted, ImageList, ImagePut, ImageView
from streamproc.gateway.api.operations import CURSOR, DIGEST, LIMIT, WAIT, Operation, Param
from streamproc.gateway.api.query import digest_param, page_response, paged
from streamproc.gateway.api.views import image_view
from streamproc.gateway.api.writes import (
    UNAVAILABLE_HEADERS,
    json_response,
    publish_failure,
    waited,
)
from streamproc.gateway.auth.callers import ADMIN, IMAGES_WRITE, READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.gateway.hardening import (
    check_key_count,
    decode_content,
    decode_json,
    field_of,
    read_body,
    require_json,
)
from streamproc.names import sbom_bucket
from streamproc.problems import ProblemError
from streamproc.readmodel.images import Images
from streamproc.sbom.parse import SbomError, parse_sbom
from streamproc.sbom.publish import (
    ImageWrite,
    UnknownUsedPurls,
    UsageError,
    image_payload,
    split_repo,
    store_sbom,
    write_image_event,
)
from streamproc.sbom.purls import PurlError, normalize_purl

_put = msgspec.json.Decoder(ImagePut)
PROJECTION = Images.name
_RESULTS = {
    r: metrics.SCHEDULER_EVENTS.labels("images", r)
    for r in ("accepted", "duplicate", "refused", "failed")
}


def _sbom_field(path: str) -> str:
    return "$.sbom" + path[1:]


def _used(purls: list[str]) -> list[str]:
    """Canonical forms of ``usedPurls``, in order; 400 naming the first bad one."""
    out = []
    for i, purl in enumerate(purls):
        try:
            out.append(normalize_purl(purl).purl)
        except PurlError as exc:
            raise ProblemError(
                400,
                "invalid-body",
                f"usedPurls[{i}] {purl!r} is not a valid purl: {exc.reason}",
                field=f"$.usedPurls[{i}]",
            ) from None
    return out


def build(tenant: str, digest: str, body: ImagePut) -> ImageIndexed:
    """The ``image.indexed`` payload of a PUT, or a 400/413 naming what is wrong. It names
    the SBOM by the SHA-256 of its bytes exactly as they were sent."""
    try:
        sbom = parse_sbom(body.sbom)
    except SbomError as exc:
        detail = str(exc).replace(" - at `$", " - at `$.sbom")
        raise ProblemError(
            400, "invalid-sbom", f"sbom: {detail}", field=_sbom_field(exc.field)
        ) from None
    check_key_count(len(sbom.purls))
    try:
        registry, repository = split_repo(body.repository)
    except UsageError:
        raise ProblemError(
            400,
            "invalid-body",
            f"repository {body.repository!r} is not [registry/]path",
            field="$.repository",
        ) from None
    used = None if body.used_purls is None else _used(body.used_purls)
    try:
        return image_payload(
            tenant=tenant,
            digest=digest,
            sbom=sbom,
            used=used,
            registry=registry,
            repository=repository,
            namespace=body.namespace,
            tags=body.tags,
            labels=body.labels,
            sbom_key=objects.key_of(bytes(body.sbom)),
        )
    except PurlError as exc:
        raise ProblemError(
            400,
            "invalid-sbom",
            f"sbom: invalid purl {exc.purl!r}: {exc.reason}; the image is refused",
            field="$.sbom",
        ) from None
    except UnknownUsedPurls as exc:
        i = next(n for n, p in enumerate(used or ()) if p in set(exc.missing))
        raise ProblemError(
            400,
            "invalid-body",
            f"usedPurls[{i}] {exc.missing[0]!r} is not a purl of the SBOM ({exc})",
            field=f"$.usedPurls[{i}]",
        ) from None
    except msgspec.ValidationError as exc:
        msg = str(exc)
        raise ProblemError(400, "invalid-body", msg, field=field_of(msg)) from None


async def _write(
    gw: GatewayContext,
    request: web.Request,
    kind: str,
    tenant: str,
    digest: str,
    payload: ImageIndexed | ImageRemoved,
) -> ImageWrite | None:
    pub = gw.ctx.publisher
    settings = gw.ctx.settings
    try:
        return await write_image_event(
            pub.nc,
            settings.events_stream,
            settings.prefix,
            pub.publish_event,
            gw.ctx.clock.now,
            kind,
            tenant,
            digest,
            payload,
            correlation_id=request[RID],
        )
    except UsageError as exc:
        raise ProblemError(409, "concurrent-update", str(exc)) from None
    except JsApiError as exc:  # looking up the image's last event
        raise ProblemError(
            503,
            "log-unavailable",
            f"the event log did not answer: {exc.description}; retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        ) from None
    except Exception as exc:
        raise publish_failure(exc) from None


async def _store(gw: GatewayContext, sbom: bytes) -> None:
    """Keep the SBOM as sent, before the event that names it is published."""
    try:
        await store_sbom(gw.ctx.publisher.nc, gw.ctx.settings.prefix, sbom)
    except (objects.ObjectError, JsApiError) as exc:
        raise ProblemError(
            503,
            "sbom-store-unavailable",
            f"the SBOM store did not take the SBOM: {exc}; nothing was published, retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        ) from None


async def _accepted(
    gw: GatewayContext, request: web.Request, digest: str, out: ImageWrite
) -> web.Response:
    """202 when recorded; 200 when nothing more will happen: a duplicate, or ``?wait=true``
    and the read model has applied it."""
    done = await waited(gw, request, out.event_id, out.seq, PROJECTION)
    body = ImageAccepted(
        event_id=out.event_id,
        seq=out.seq,
        id=digest,
        duplicate=out.duplicate,
        applied=done or gw.ctx.applied() >= out.seq,
    )
    return json_response(body, 200 if out.duplicate or done else 202)


async def put_image(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    try:
        digest = digest_param(request)
        require_json(request)
        raw = await read_body(request, gw.body_cap)
        data = decode_content(raw, request.headers.get("Content-Encoding"), gw.inflated_cap)
        body = decode_json(data, _put)
        payload = build(who.tenant, digest, body)
        await _store(gw, bytes(body.sbom))
        out = await _write(gw, request, "image.indexed", who.tenant, digest, payload)
    except ProblemError as exc:
        _RESULTS["failed" if exc.status >= 500 else "refused"].inc()
        raise
    assert out is not None
    _RESULTS["duplicate" if out.duplicate else "accepted"].inc()
    return await _accepted(gw, request, digest, out)


async def delete_image(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    digest = digest_param(request)
    out = await _write(
        gw, request, "image.removed", who.tenant, digest, ImageRemoved(digest=digest)
    )
    if out is None:
        raise ProblemError(404, "not-found", f"image {digest} is not indexed")
    return await _accepted(gw, request, digest, out)


async def get_image(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    digest = digest_param(request)
    rec = gw.rm.image(who.tenant, digest)
    if rec is None:
        raise ProblemError(404, "not-found", f"image {digest} is not indexed")
    return json_response(image_view(who.tenant, rec))


async def get_sbom(gw: GatewayContext, request: web.Request, who: Principal | None) -> web.Response:
    """The image's SBOM, byte for byte as it was sent; 404 for an image of another tenant,
    as for any image this tenant has not indexed."""
    assert who is not None
    digest = digest_param(request)
    rec = gw.rm.image(who.tenant, digest)
    if rec is None:
        raise ProblemError(404, "not-found", f"image {digest} is not indexed")
    if rec.sbom is None:
        raise ProblemError(
            404,
            "sbom-not-kept",
            f"image {digest} was indexed without its SBOM being kept (indexed before SBOMs "
            "were stored, or by a producer that did not store it); index it again",
        )
    try:
        data = await objects.get(gw.ctx.publisher.nc, sbom_bucket(gw.ctx.settings.prefix), rec.sbom)
    except objects.Missing:
        raise ProblemError(
            404, "sbom-missing", f"the SBOM {rec.sbom} of image {digest} is no longer stored"
        ) from None
    except (objects.ObjectError, JsApiError) as exc:
        raise ProblemError(
            503, "sbom-store-unavailable", f"the SBOM store did not answer: {exc}",
            headers=UNAVAILABLE_HEADERS,
        ) from None  # fmt: skip
    return web.Response(
        body=data,
        content_type="application/json",
        headers={"ETag": f'"{rec.sbom}"'},
    )


async def list_images(
    gw: GatewayContext, request: web.Request, who: Principal | None
) -> web.Response:
    assert who is not None
    page = paged(
        request,
        gw.rm.images,
        who.tenant,
        repository=request.query.get("repository") or None,
        namespace=request.query.get("namespace") or None,
    )
    return page_response(page, lambda r: image_view(who.tenant, r))


_WRITTEN: dict[int, tuple[type | None, str]] = {
    202: (ImageAccepted, "recorded; the read model and the impact index apply it shortly"),
    200: (
        ImageAccepted,
        "nothing more to wait for: `duplicate` (already so in the log), or with "
        "?wait=true applied by the read model",
    ),
}
OPERATIONS = [
    Operation(
        "PUT",
        "/images/{digest}",
        put_image,
        "putImage",
        "Index an image from its SBOM",
        "images",
        IMAGES_WRITE,
        body=ImagePut,
        params=(
            DIGEST,
            WAIT,
            Param("Content-Encoding", "header", {"enum": ["identity", "gzip", "zstd"]}),
        ),
        responses=_WRITTEN,
        errors=(409, 413, 415, 503),
        description="Publishes image.indexed with the SBOM's purls (CycloneDX 1.4-1.7 or "
        "SPDX 2.2/2.3 JSON). The same content again answers 200 with duplicate: true and "
        f"publishes nothing. Also allowed with scope {ADMIN}.",
    ),
    Operation(
        "GET",
        "/images/{digest}",
        get_image,
        "getImage",
        "What the index holds for an image",
        "images",
        READ,
        params=(DIGEST,),
        responses={200: (ImageView, "the image's SBOM summary")},
        errors=(404,),
    ),
    Operation(
        "GET",
        "/images/{digest}/sbom",
        get_sbom,
        "getImageSbom",
        "The image's SBOM, exactly as it was sent",
        "images",
        READ,
        params=(DIGEST,),
        responses={200: (None, "the SBOM document (CycloneDX or SPDX JSON), byte for byte")},
        errors=(404, 503),
        description="Answers the bytes the image was indexed with (the `sbom` of the PUT, "
        "or the file `streamproc index add` read). 404 for an image this tenant has not "
        "indexed, for one indexed before SBOMs were kept, and for one whose SBOM is gone.",
    ),
    Operation(
        "DELETE",
        "/images/{digest}",
        delete_image,
        "deleteImage",
        "Remove an image from the index",
        "images",
        IMAGES_WRITE,
        params=(DIGEST, WAIT),
        responses=_WRITTEN,
        errors=(404, 409, 503),
        description=f"Publishes image.removed. Also allowed with scope {ADMIN}.",
    ),
    Operation(
        "GET",
        "/images",
        list_images,
        "listImages",
        "List indexed images, by digest",
        "images",
        READ,
        params=(
            LIMIT,
            CURSOR,
            Param("repository", "query", {"type": "string"}, "org/app or registry/org/app"),
            Param("namespace", "query", {"type": "string"}),
        ),
        responses={200: (ImageList, "one page")},
    ),
]
