"""Turning an SBOM into an ``image.indexed`` event, and publishing image events safely.

Normalisation happens here, before anything is published: one bad purl refuses the whole
image. Publishing is serialised per image subject with
``Nats-Expected-Last-Subject-Sequence``, and the event id is derived from the content and
that sequence, so a retry is de-duplicated, an unchanged re-add publishes nothing, and a
remove-then-add is not mistaken for a duplicate.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
from pathlib import Path
from typing import Any

import msgspec

NO_MESSAGE = 10037
"""JetStream's "no message found" (the subject has no event yet)."""


class UsageError(Exception):
    """Bad input or environment: exit code 2, nothing published."""


def split_repo(ref: str) -> tuple[str, str]:
    """``ghcr.io/org/app`` -> (ghcr.io, org/app); ``nginx`` -> (docker.io, library/nginx),
    as Docker reads image references: the first part is a registry only if it looks like a
    host (has a dot or a port, or is localhost)."""
    first, sep, rest = ref.strip().partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        if not rest:
            raise UsageError(f"--repo {ref!r}: no repository after the registry")
        return first, rest
    if not first:
        raise UsageError(f"--repo {ref!r} is empty")
    return "docker.io", ref if sep else f"library/{ref}"


def _labels(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--label {pair!r} is not of the form key=value")
        out[k] = v
    return out


def _used_purls(path: str | None) -> set[str] | None:
    """Canonical purls listed one per line (blank lines and ``#`` comments skipped); None
    without a file: the image's usage is then unknown (not "nothing used")."""
    from streamproc.impact.purls import PurlError, normalize_purl

    if path is None:
        return None
    out: set[str] = set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            try:
                out.add(normalize_purl(s).purl)
            except PurlError as exc:
                raise UsageError(
                    f"{path}:{n}: invalid purl {exc.purl!r}: {exc.reason}; nothing published"
                ) from None
    return out


def build_payload(args: argparse.Namespace) -> tuple[Any, int, int | None]:
    """The validated ``image.indexed`` payload, its purl count and used count (None when
    the image's usage is unknown)."""
    from streamproc.events.payloads import MAX_KEYS, Component, ImageIndexed
    from streamproc.ids import InvalidTenant, validate_tenant
    from streamproc.impact.purls import PurlError, normalize_purl
    from streamproc.impact.records import build_image
    from streamproc.impact.sbom import SbomError, read_sbom

    try:
        validate_tenant(args.tenant)
    except InvalidTenant as exc:
        raise UsageError(str(exc)) from None
    registry, repo = split_repo(args.repo)
    try:
        sbom = read_sbom(args.sbom)
    except (OSError, SbomError) as exc:
        raise UsageError(f"{exc}; nothing published") from None
    if len(sbom.purls) > MAX_KEYS:
        raise UsageError(
            f"{args.sbom}: {len(sbom.purls)} purls; at most {MAX_KEYS} per image are "
            f"allowed; nothing published"
        )
    used = _used_purls(args.used_purls)
    try:
        flags = None if used is None else [normalize_purl(p).purl in used for p in sbom.purls]
        rec = build_image(
            tenant=args.tenant,
            digest=args.image,
            purls=sbom.purls,
            used=flags,
            registry=registry,
            repo=repo,
            namespace=args.namespace or "",
            tags=args.tag,
            labels=_labels(args.label),
        )
    except PurlError as exc:
        raise UsageError(
            f"{args.sbom}: invalid purl {exc.purl!r}: {exc.reason}; the image is refused "
            f"and nothing was published"
        ) from None
    missing = (used or set()) - set(rec.purls)
    if missing:
        raise UsageError(
            f"{args.used_purls}: {len(missing)} used purl(s) not in the SBOM, e.g. "
            f"{sorted(missing)[0]!r}; nothing published"
        )
    payload = ImageIndexed(
        digest=args.image,
        registry=registry,
        repository=repo,
        namespace=args.namespace or None,
        tags=rec.tags,
        labels=rec.labels,
        components=[
            Component(purl=p, product_key=k, used=u)
            for p, k, u in zip(rec.purls, rec.product_keys, rec.used, strict=True)
        ],
        usage_known=rec.usage_known,
    )
    try:  # msgspec validates on decode only: round-trip to apply the schema's limits
        msgspec.json.decode(msgspec.json.encode(payload), type=ImageIndexed)
    except msgspec.ValidationError as exc:
        raise UsageError(f"image.indexed payload refused: {exc}; nothing published") from None
    return payload, len(rec.purls), sum(rec.used) if rec.usage_known else None


async def _last_on_subject(nc: Any, stream: str, subject: str) -> tuple[int, bytes | None]:
    """Sequence and data of the subject's last message (0, None when there is none)."""
    from streamproc.bus import jsapi

    try:
        doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    except jsapi.JsApiError as exc:
        if exc.err_code == NO_MESSAGE:
            return 0, None
        raise
    msg = doc["message"]
    return int(msg["seq"]), base64.b64decode(msg.get("data") or "")


def _payload_digest(payload: Any) -> str:
    return hashlib.sha256(msgspec.json.encode(payload)).hexdigest()


async def publish_image_event(
    settings: Any, nc: Any, kind: str, tenant: str, digest: str, payload: Any
) -> tuple[str, int, bool] | None:
    """Publish after the subject's last event; None when that event already says this."""
    from streamproc.bus import jsapi
    from streamproc.bus.publisher import Publisher, WrongExpectedSequence
    from streamproc.events.catalog import subject_for
    from streamproc.events.envelope import EventError, decode, new_event
    from streamproc.hlc import HybridLogicalClock
    from streamproc.ids import derive_id

    stream = settings.events_stream
    if await jsapi.stream_info(nc, stream) is None:
        raise UsageError(f"stream {stream} does not exist: run `streamproc streams apply`")
    subject = subject_for(settings.prefix, tenant, kind, payload)
    content = _payload_digest(payload)
    clock = HybridLogicalClock(settings.node_id)
    pub = await Publisher(nc, prefix=settings.prefix).start()
    try:
        for _ in range(3):
            last, data = await _last_on_subject(nc, stream, subject)
            prev = None
            if data:
                try:
                    prev = decode(data)
                except EventError:
                    prev = None
            if kind == "image.removed":
                if prev is None or prev.kind == "image.removed":
                    return None
            elif (
                prev is not None and prev.kind == kind and _payload_digest(prev.payload) == content
            ):
                return None
            eid = derive_id(kind, tenant, digest, content, last)
            event = new_event(kind, tenant, payload, clock.now(), event_id=eid)
            try:
                ack = await pub.publish_event(event, expected_last_subject_seq=last)
            except WrongExpectedSequence:
                continue  # someone else wrote this image meanwhile: look again
            return eid, ack.seq, ack.duplicate
        raise UsageError(f"image {digest} keeps changing under us; try again")
    finally:
        await pub.close()
