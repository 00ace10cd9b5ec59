"""Turning an SBOM into an ``image.indexed`` event, and publishing image events safely.

Normalisation happens here, before anything is published: one bad purl refuses the whole
image. Publishing is serialised per image subject with
``Nats-Expected-Last-Subject-Sequence``, and the event id is derived from the content and
that sequence, so a retry is de-duplicated, an unchanged re-add publishes nothing, and a
remove-then-add is not mistaken for a duplicate. ``streamproc index`` and the gateway's image
routes both build and write images here.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Collection, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from streamproc.bus import jsapi, objects
from streamproc.bus.publisher import Publisher, WrongExpectedSequence
from streamproc.events.catalog import subject_for
from streamproc.events.envelope import EventError, decode, new_event
from streamproc.events.payloads import MAX_KEYS, Component, ImageIndexed, payload_digest
from streamproc.hlc import HybridLogicalClock
from streamproc.ids import InvalidTenant, derive_id, validate_tenant
from streamproc.names import sbom_bucket
from streamproc.sbom.image import build_image
from streamproc.sbom.parse import SbomError, parse_sbom
from streamproc.sbom.purls import PurlError, normalize_purl

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
    without a file (usage not known)."""
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


class UnknownUsedPurls(ValueError):
    """Used purls that the SBOM does not list (canonical form, sorted)."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"{len(missing)} used purl(s) not in the SBOM, e.g. {missing[0]!r}")
        self.missing = missing


def image_payload(
    *,
    tenant: str,
    digest: str,
    sbom: Any,
    used: Collection[str] | None,
    registry: str,
    repository: str,
    namespace: str | None,
    tags: Iterable[str],
    labels: dict[str, str],
    sbom_key: str | None = None,
) -> ImageIndexed:
    """The ``image.indexed`` payload of an SBOM, validated against the event schema.
    ``used``: the canonical purls the entrypoint uses, None when not known (usage unknown is
    not "nothing used"). Raises PurlError for a purl of the SBOM, UnknownUsedPurls, or
    msgspec.ValidationError. ``sbom_key``: the SBOM's name in the SBOM store (store it
    before publishing). The CLI and the gateway both build images here."""
    wanted = set(used or ())
    flags = None if used is None else [normalize_purl(p).purl in wanted for p in sbom.purls]
    rec = build_image(
        tenant=tenant,
        digest=digest,
        purls=sbom.purls,
        used=flags,
        registry=registry,
        repo=repository,
        namespace=namespace or "",
        tags=tags,
        labels=labels,
    )
    missing = wanted - set(rec.purls)
    if missing:
        raise UnknownUsedPurls(sorted(missing))
    payload = ImageIndexed(
        digest=digest,
        registry=registry,
        repository=repository,
        namespace=namespace or None,
        tags=rec.tags,
        labels=rec.labels,
        components=[
            Component(purl=p, product_key=k, used=u)
            for p, k, u in zip(rec.purls, rec.product_keys, rec.used, strict=True)
        ],
        usage_known=rec.usage_known,
        sbom=sbom_key,
    )
    # msgspec validates on decode only: round-trip to apply the schema's limits
    msgspec.json.decode(msgspec.json.encode(payload), type=ImageIndexed)
    return payload


class Built(NamedTuple):
    payload: ImageIndexed
    purls: int
    used: int | None
    """None when the image's usage is unknown."""
    sbom: bytes
    """The SBOM file's bytes, stored as they are (named by ``payload.sbom``)."""


def build_payload(args: argparse.Namespace) -> Built:
    """The validated ``image.indexed`` payload of ``index add``, and what it counts."""
    try:
        validate_tenant(args.tenant)
    except InvalidTenant as exc:
        raise UsageError(str(exc)) from None
    registry, repo = split_repo(args.repo)
    try:
        with open(args.sbom, "rb") as fh:
            data = fh.read()
        sbom = parse_sbom(data)
    except OSError as exc:
        raise UsageError(f"{exc}; nothing published") from None
    except SbomError as exc:
        raise UsageError(f"{args.sbom}: {exc}; nothing published") from None
    if len(sbom.purls) > MAX_KEYS:
        raise UsageError(
            f"{args.sbom}: {len(sbom.purls)} purls; at most {MAX_KEYS} per image are "
            f"allowed; nothing published"
        )
    try:
        payload = image_payload(
            tenant=args.tenant,
            digest=args.image,
            sbom=sbom,
            used=_used_purls(args.used_purls),
            registry=registry,
            repository=repo,
            namespace=args.namespace,
            tags=args.tag,
            labels=_labels(args.label),
            sbom_key=objects.key_of(data),
        )
    except PurlError as exc:
        raise UsageError(
            f"{args.sbom}: invalid purl {exc.purl!r}: {exc.reason}; the image is refused "
            f"and nothing was published"
        ) from None
    except UnknownUsedPurls as exc:
        raise UsageError(f"{args.used_purls}: {exc}; nothing published") from None
    except msgspec.ValidationError as exc:
        raise UsageError(f"image.indexed payload refused: {exc}; nothing published") from None
    comps = payload.components
    used = sum(c.used for c in comps) if payload.usage_known else None
    return Built(payload, len(comps), used, data)


class ImageWrite(NamedTuple):
    event_id: str
    seq: int
    duplicate: bool
    """The log already held this: the image's last event says the same (then ``event_id``
    and ``seq`` are that event's), or JetStream de-duplicated a retry of the same id."""


async def write_image_event(
    nc: Any,
    stream: str,
    prefix: str,
    publish: Callable[..., Awaitable[Any]],
    now: Callable[[], Any],
    kind: str,
    tenant: str,
    digest: str,
    payload: Any,
    correlation_id: str | None = None,
) -> ImageWrite | None:
    """Publish ``kind`` after the image subject's last event, unless that event already
    says it; None for a removal of an image that is not indexed.

    The subject's last event is the truth (it outlives JetStream's duplicate window and any
    read model's lag); the write expects that sequence, so concurrent writers of one image
    are serialised, and its id is derived from the content and that sequence, so a retry is
    de-duplicated and a remove-then-add is a new event. ``publish`` is
    ``Publisher.publish_event``; ``now`` stamps the event (an HLC ``now``).
    """
    subject = subject_for(prefix, tenant, kind, payload)
    content = payload_digest(payload)
    for _ in range(3):
        last, data = await jsapi.last_on_subject(nc, stream, subject)
        prev = None
        if data:
            try:
                prev = decode(data)
            except EventError:
                prev = None
        if kind == "image.removed":
            if prev is None or prev.kind == "image.removed":
                return None
        elif prev is not None and prev.kind == kind and payload_digest(prev.payload) == content:
            return ImageWrite(prev.id, last, True)
        eid = derive_id(kind, tenant, digest, content, last)
        event = new_event(kind, tenant, payload, now(), event_id=eid, correlation_id=correlation_id)
        try:
            ack = await publish(event, expected_last_subject_seq=last)
        except WrongExpectedSequence:
            continue  # someone else wrote this image meanwhile: look again
        return ImageWrite(eid, ack.seq, ack.duplicate)
    raise UsageError(f"image {digest} keeps changing under us; try again")


async def store_sbom(nc: Any, prefix: str, data: bytes) -> str:
    """Keep an SBOM as sent in the SBOM store (before the event naming it is published);
    returns its name. Storing the same bytes again is cheap (no chunk is rewritten)."""
    return await objects.put(nc, sbom_bucket(prefix), data)


async def publish_image_event(
    settings: Any,
    nc: Any,
    kind: str,
    tenant: str,
    digest: str,
    payload: Any,
    sbom: bytes | None = None,
) -> tuple[str, int] | None:
    """Publish with a publisher and clock of its own (the CLI): the event id and sequence,
    or None when the log already says this (see :func:`write_image_event`). ``sbom``: the
    document ``payload.sbom`` names, stored first."""
    stream = settings.events_stream
    if await jsapi.stream_info(nc, stream) is None:
        raise UsageError(f"stream {stream} does not exist: run `streamproc streams apply`")
    if sbom is not None:
        if await jsapi.stream_info(nc, objects.stream_of(sbom_bucket(settings.prefix))) is None:
            raise UsageError(
                f"the SBOM store {sbom_bucket(settings.prefix)} does not exist: run "
                "`streamproc streams apply`"
            )
        await store_sbom(nc, settings.prefix, sbom)
    clock = HybridLogicalClock(settings.node_id)
    pub = await Publisher(nc, prefix=settings.prefix).start()
    try:
        out = await write_image_event(
            nc, stream, settings.prefix, pub.publish_event, clock.now, kind, tenant, digest, payload
        )
    finally:
        await pub.close()
    if out is None or out.duplicate:
        return None
    return out.event_id, out.seq
