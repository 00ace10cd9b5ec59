"""Indexed images: what the log says each tenant's image is indexed with, for the image
routes and the console (the planner's ImpactIndex holds the bitmaps; this is the summary).

One record per (tenant, digest), replaced by every ``image.indexed`` and deleted by
``image.removed``; removing an image that is not indexed is rejected with
``image_not_indexed``, as the ImpactIndex rejects it.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import ImageIndexed, ImageRemoved, payload_digest
from streamproc.names import RM_IMAGES
from streamproc.readmodel import keys
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.tx import Tx

CF = RM_IMAGES


class ImageSummary(msgspec.Struct, kw_only=True):
    """An indexed image as the read model keeps it: owners and counts, not the purls."""

    digest: str
    registry: str
    repository: str
    namespace: str | None
    tags: list[str]
    labels: dict[str, str]
    purls: int
    product_keys: int
    used_purls: int
    usage_known: bool
    """The event carries usage information (:func:`usage_known`)."""
    content_sha256: str
    """SHA-256 of the payload's canonical encoding: equal for the same content."""
    indexed_hlc: str
    event_id: str
    seq: int
    sbom: str | None = None
    """The SBOM's name in the SBOM store (None: not kept)."""


_enc = msgspec.msgpack.Encoder()
decode_image = msgspec.msgpack.Decoder(ImageSummary).decode


def usage_known(p: ImageIndexed) -> bool:
    """As the ImpactIndex decides it: the event's own ``usage_known`` flag where the payload
    has one, else whether some component is marked used (``usedPurls``, ``--used-purls``)."""
    explicit = getattr(p, "usage_known", None)
    return explicit if explicit is not None else any(c.used for c in p.components)


def summarize(event: Envelope, p: ImageIndexed, seq: int) -> ImageSummary:
    """The record an ``image.indexed`` event makes (pure)."""
    comps = p.components
    used = sum(1 for c in comps if c.used)
    return ImageSummary(
        digest=p.digest,
        registry=p.registry,
        repository=p.repository,
        namespace=p.namespace,
        tags=list(p.tags),
        labels=dict(p.labels),
        purls=len(comps),
        product_keys=len({c.product_key for c in comps}),
        used_purls=used,
        usage_known=usage_known(p),
        content_sha256=payload_digest(p),
        indexed_hlc=event.hlc,
        event_id=event.id,
        seq=seq,
        sbom=p.sbom,
    )


def image_key(tenant: str, digest: str) -> bytes:
    return keys.key(tenant, digest)


class Images(Projection):
    name: ClassVar[str] = CF
    creates: ClassVar[frozenset[str]] = frozenset({"image.indexed"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(ImageIndexed)
    def _indexed(self, tx: Tx, event: Envelope, p: ImageIndexed) -> None:
        tx.table(CF).put(
            image_key(event.tenant, p.digest), _enc.encode(summarize(event, p, tx.seq))
        )

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, event: Envelope, p: ImageRemoved) -> None:
        table = tx.table(CF)
        k = image_key(event.tenant, p.digest)
        if table.get(k) is None:
            raise Rejection(
                "image_not_indexed", f"image {p.digest} of tenant {event.tenant} is not indexed"
            )
        table.delete(k)
