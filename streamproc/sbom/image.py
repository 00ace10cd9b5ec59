"""The image an SBOM becomes: its purls normalised, with their product keys and usage flags
aligned, and its owners — what ``image.indexed`` carries and the impact index takes in.

:func:`build_image` is the one place raw scanner output is normalised (duplicate spellings
of a purl merged, the usage flag of each the OR of theirs); the impact index keeps its own
per-image record of what it added (:mod:`streamproc.impact.records`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from streamproc.sbom.purls import normalize_image_purls

__all__ = ["ImageError", "IndexedImage", "build_image"]

_NUL = "\x00"
"""Never in a tenant: the impact index's storage keys use it as their separator
(:data:`streamproc.impact.keys.SEP`)."""


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
        if not self.tenant or _NUL in self.tenant:
            raise ImageError("image tenant must be non-empty and free of NUL")
        if not self.digest:
            raise ImageError("image digest must be non-empty")
        if not len(self.purls) == len(self.product_keys) == len(self.used):
            raise ImageError("purls, productKeys and used must have the same length")


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
