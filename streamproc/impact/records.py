"""Image records: what an image is indexed under, as given and as stored.

:class:`IndexedImage` is the normalised input (purls, product keys and usage flags aligned,
owners). :class:`ImageRecord` is what the index keeps per image id to undo exactly that
later (re-index, removal): the owners and the product groups the image is in. It does not
repeat the purls: the groups' own chunk of that id says which exact purls hold it, so a
record stays ~1 KB instead of ~30 KB and a batch of 1,000 images writes ~1 MB, not 30 MB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from streamproc.impact.keys import SEP
from streamproc.impact.purls import normalize_image_purls

__all__ = ["ImageError", "ImageRecord", "IndexedImage", "build_image"]


class ImageError(ValueError):
    """An image record that cannot be indexed."""


class IndexedImage(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """An image as indexed: already normalised; purls/productKeys/used align.

    ``usage_known`` says whether ``used`` is usage data at all: without it the image counts
    as using every component it contains (usage unknown is not unused)."""

    tenant: str
    digest: str
    registry: str = ""
    repo: str = ""
    namespace: str = ""
    tags: list[str] = []
    labels: dict[str, str] = {}
    purls: list[str] = []
    product_keys: list[str] = []
    used: list[bool] = []
    usage_known: bool = False

    def __post_init__(self) -> None:
        if not self.tenant or SEP in self.tenant:
            raise ImageError("image tenant must be non-empty and free of NUL")
        if not self.digest:
            raise ImageError("image digest must be non-empty")
        if not len(self.purls) == len(self.product_keys) == len(self.used):
            raise ImageError("purls, productKeys and used must have the same length")


class ImageRecord(msgspec.Struct, array_like=True, frozen=True):
    """Stored per image id: its owners, its product groups (sorted group ids) and whether
    its usage is known (it is then in the tenant's usage-known owner bitmap)."""

    tenant: str
    digest: str
    registry: str
    repo: str
    namespace: str
    tags: list[str]
    labels: dict[str, str]
    gids: list[int]
    usage_known: bool


_record_enc = msgspec.msgpack.Encoder(order="deterministic")
_record_dec = msgspec.msgpack.Decoder(ImageRecord)


def encode_record(rec: ImageRecord) -> bytes:
    return _record_enc.encode(rec)


def decode_record(raw: bytes) -> ImageRecord:
    return _record_dec.decode(raw)


def build_image(
    *,
    tenant: str,
    digest: str,
    purls: Iterable[str],
    used: Iterable[bool] | None = None,
    registry: str = "",
    repo: str = "",
    namespace: str = "",
    tags: Iterable[str] = (),
    labels: Mapping[str, str] | None = None,
) -> IndexedImage:
    """Normalise raw scanner output into an :class:`IndexedImage` (raises PurlError).

    Duplicate purls collapse into one entry whose ``used`` flag is the OR of theirs.
    ``used`` is usage data: given (even all false), the image's usage is known; None, it
    is not, and the image counts as using everything it contains.
    """
    raw = list(purls)
    flags = [False] * len(raw) if used is None else list(used)
    if len(flags) != len(raw):
        raise ImageError("used must have one flag per purl")
    merged: dict[str, tuple[str, bool]] = {}
    for n, u in zip(normalize_image_purls(raw), flags, strict=True):
        merged[n.purl] = (n.product_key, u or merged.get(n.purl, ("", False))[1])
    order = sorted(merged)
    return IndexedImage(
        tenant=tenant,
        digest=digest,
        registry=registry,
        repo=repo,
        namespace=namespace,
        tags=sorted(set(tags)),
        labels=dict(labels or {}),
        purls=order,
        product_keys=[merged[p][0] for p in order],
        used=[merged[p][1] for p in order],
        usage_known=used is not None,
    )
