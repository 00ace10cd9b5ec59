"""The in-memory impact index: images <-> purls as roaring bitmaps over dense image ids.

Every answer is bitmap algebra: a multi-way union of the bitmaps named by the query,
ANDed with the selector's mask (which always starts from the tenant's own bitmap). Images
are never scanned. Per image we keep the record it was indexed with, so re-indexing or
removal touches exactly the bitmaps it was added to and leaves nothing stale behind.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import islice

import msgspec
from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.purls import check_key_count, is_product_key, normalize_image_purls
from streamproc.impact.purls import normalize_purl as _normalize
from streamproc.impact.selector import Selector, tag_matcher

__all__ = ["ImageError", "ImpactIndex", "ImpactSet", "IndexedImage", "build_image"]


class ImageError(ValueError):
    """An image record that cannot be indexed."""


class IndexedImage(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """Payload of ``image.indexed``: already normalised; purls/productKeys/used align.

    The index keeps the record as the image's "added under" list: never mutate it.
    """

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

    def __post_init__(self) -> None:
        if not self.tenant or K.SEP in self.tenant:
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
    )


class ImpactSet:
    """Result of a query. ``digests()``/``sample()`` are valid until the next mutation."""

    __slots__ = ("_digest_of", "bitmap", "unmatched")

    def __init__(self, bitmap: BitMap, unmatched: list[str], digest_of: Callable[[int], str]):
        self.bitmap = bitmap
        self.unmatched = unmatched
        self._digest_of = digest_of

    @property
    def count(self) -> int:
        return len(self.bitmap)

    def digests(self) -> list[str]:
        return [self._digest_of(i) for i in self.bitmap]

    def sample(self, n: int) -> list[str]:
        """Digests of the ``n`` lowest image ids: stable for an unchanged index."""
        return [self._digest_of(i) for i in islice(self.bitmap, max(n, 0))]

    def __repr__(self) -> str:
        return f"ImpactSet(count={self.count}, unmatched={len(self.unmatched)})"


def _union(bitmaps: Sequence[BitMap]) -> BitMap:
    """Multi-way union (one C call); always a fresh bitmap, never an alias."""
    return BitMap.union(*bitmaps) if bitmaps else BitMap()


def _union_within(bitmaps: Sequence[BitMap], mask: BitMap) -> BitMap:
    """``union(bitmaps) & mask``, stopping early once the union covers the mask.

    Multi-way unions over geometrically growing chunks (256, 512, ...): with popular
    packages a few hundred bitmaps usually already cover every image in scope, and the
    rest of a 10k-key query would only re-set bits. Costs at most ~6 subset checks more
    than one big union when it never saturates. ``mask`` is owned by the caller.
    """
    if not mask:
        return mask
    acc, start, step, n = BitMap(), 0, 256, len(bitmaps)
    while start < n:
        acc = BitMap.union(acc, *bitmaps[start : start + step])
        start, step = start + step, step * 2
        if start < n and mask.issubset(acc):
            return mask
    acc &= mask
    return acc


_IMAGE_CODEC: K.Codec = (
    msgspec.msgpack.Encoder().encode,
    msgspec.msgpack.Decoder(IndexedImage).decode,
)
_LIST_CODEC: K.Codec = (
    lambda v: msgspec.msgpack.encode(sorted(v)),
    lambda b: set(msgspec.msgpack.decode(b, type=list[str])),
)
_ID_CODEC: K.Codec = (lambda v: str(v).encode(), lambda b: int(b))
_CODECS = {K.IMAGE: _IMAGE_CODEC, K.DIGEST: _ID_CODEC, K.TAGS: _LIST_CODEC, K.VULN: _LIST_CODEC}


_CONTAINS = (K.CONTAINS_PRODUCT, K.CONTAINS_PURL)
_USED = (K.USED_PRODUCT, K.USED_PURL)


class ImpactIndex:
    """Images, their purls and owners as roaring bitmaps over dense, reusable ids.

    ``loader``/``max_bytes`` back the index with a key-value store: cold bitmaps and image
    records are loaded on demand and clean ones evicted LRU by serialized size. Call
    ``restore`` with the stored resident keys (``keys.RESIDENT_PREFIXES``) at start.
    """

    def __init__(self, loader: K.Loader | None = None, max_bytes: int | None = None) -> None:
        self.store = K.Store(_CODECS, loader=loader, max_bytes=max_bytes)
        self._maps = self.store.maps
        self._digests: dict[str, int] = self._maps[K.DIGEST]
        self._tags: dict[str, set[str]] = self._maps[K.TAGS]
        self._vulns: dict[str, set[str]] = self._maps[K.VULN]
        self._digest_by_id: list[str | None] = []
        self._free = BitMap()
        self._rebuild_ids()

    # -- ids -----------------------------------------------------------------------------
    def _rebuild_ids(self) -> None:
        top = max(self._digests.values(), default=-1) + 1
        self._digest_by_id = [None] * top
        for name, iid in self._digests.items():
            self._digest_by_id[iid] = name.partition(K.SEP)[2]
        self._free = BitMap(i for i, d in enumerate(self._digest_by_id) if d is None)

    def _alloc(self, digest: str) -> int:
        """Lowest free id: keeps bitmaps dense, and ids are reused only once freed."""
        if self._free:
            iid = self._free.min()
            self._free.remove(iid)
            self._digest_by_id[iid] = digest
        else:
            iid = len(self._digest_by_id)
            self._digest_by_id.append(digest)
        return iid

    def _digest_of(self, iid: int) -> str:
        d = self._digest_by_id[iid]
        if d is None:
            raise KeyError(f"image id {iid} is not live (index changed after the query?)")
        return d

    def __len__(self) -> int:
        return len(self._digest_by_id) - len(self._free)

    def image_id(self, tenant: str, digest: str) -> int | None:
        return self._digests.get(K.scoped(tenant, digest))

    def image(self, tenant: str, digest: str) -> IndexedImage | None:
        iid = self.image_id(tenant, digest)
        return None if iid is None else self.store.get(K.IMAGE, K.image_name(iid))

    # -- mutation ------------------------------------------------------------------------
    def index_image(self, rec: IndexedImage) -> int:
        """Add or replace an image; returns its id (unchanged on re-index)."""
        dkey = K.scoped(rec.tenant, rec.digest)
        iid = self._digests.get(dkey)
        old: dict[bytes, set[str]] = {}
        if iid is None:
            iid = self._alloc(rec.digest)
            self.store.put(K.DIGEST, dkey, iid)
        else:
            prev = self.store.get(K.IMAGE, K.image_name(iid))
            if prev is None:
                raise LookupError(f"image record {iid} missing from the store")
            old = K.image_bitmap_names(prev)
        new = K.image_bitmap_names(rec)
        for prefix, names in new.items():
            gone = old.get(prefix)
            self._add(prefix, names - gone if gone else names, iid, rec.tenant)
        for prefix, names in old.items():
            self._discard(prefix, names - new[prefix], iid, rec.tenant)
        self.store.put(K.IMAGE, K.image_name(iid), rec)
        return iid

    def remove_image(self, tenant: str, digest: str) -> bool:
        """Forget an image and free its id; False when it was not indexed."""
        dkey = K.scoped(tenant, digest)
        iid = self._digests.get(dkey)
        if iid is None:
            return False
        rec = self.store.get(K.IMAGE, K.image_name(iid))
        if rec is None:
            raise LookupError(f"image record {iid} missing from the store")
        for prefix, names in K.image_bitmap_names(rec).items():
            self._discard(prefix, names, iid, tenant)
        self.store.delete(K.IMAGE, K.image_name(iid))
        self.store.delete(K.DIGEST, dkey)
        self._digest_by_id[iid] = None
        self._free.add(iid)
        return True

    def _add(self, prefix: bytes, names: Collection[str], iid: int, tenant: str) -> None:
        created = self.store.add_id(prefix, names, iid)
        if created and prefix == K.OWNER_TAG:
            self._tags.setdefault(tenant, set()).update(n.partition(K.SEP)[2] for n in created)
            self.store.mark_dirty(K.TAGS, tenant)

    def _discard(self, prefix: bytes, names: Collection[str], iid: int, tenant: str) -> None:
        deleted = self.store.discard_id(prefix, names, iid)
        if deleted and prefix == K.OWNER_TAG:
            tags = self._tags.get(tenant, set())
            tags.difference_update(n.partition(K.SEP)[2] for n in deleted)
            if tags:
                self.store.mark_dirty(K.TAGS, tenant)
            else:
                self.store.delete(K.TAGS, tenant)

    def add_vuln_keys(self, vuln_id: str, keys: Iterable[str]) -> None:
        """Fold a Feedser export row: the vuln also affects these product keys/purls."""
        norm = {self._canonical(k) for k in keys}
        cur = self._vulns.get(vuln_id, set())
        if not norm <= cur:
            self.store.put(K.VULN, vuln_id, cur | norm)

    def set_vuln_keys(self, vuln_id: str, keys: Iterable[str]) -> None:
        """Replace a vuln's keys (an empty list forgets the vuln)."""
        norm = {self._canonical(k) for k in keys}
        if norm:
            self.store.put(K.VULN, vuln_id, norm)
        elif vuln_id in self._vulns:
            self.store.delete(K.VULN, vuln_id)

    def vuln_keys(self, vuln_id: str) -> set[str]:
        return set(self._vulns.get(vuln_id, ()))

    @staticmethod
    def _canonical(key: str) -> str:
        n = _normalize(key)
        return n.product_key if is_product_key(n) else n.purl

    # -- queries -------------------------------------------------------------------------
    def resolve_by_purls(
        self, keys: Collection[str], usage_only: bool, selector: Selector
    ) -> ImpactSet:
        """Images in scope containing (or using) any key: product keys or exact purls.

        Keys found in none of the tenant's images come back in ``unmatched`` (as given);
        an unparseable key raises PurlError; more than MAX_KEYS_PER_QUERY raise.
        """
        if isinstance(keys, str):
            raise TypeError("keys must be a collection of purls, not one string")
        check_key_count(len(keys))
        keys = keys if isinstance(keys, list) else list(keys)
        found, hits, missing = self._lookup(keys, usage_only)
        result = _union_within(hits, self._mask(selector))
        hit = self._hit_test(selector.tenant)
        if hit is None:  # the tenant owns every image: only absent keys are unmatched
            unmatched = [keys[i] for i in missing if found[i] is None]
        else:
            unmatched = [k for k, bm in zip(keys, found, strict=True) if bm is None or not hit(bm)]
        return ImpactSet(result, list(dict.fromkeys(unmatched)), self._digest_of)

    def resolve_by_vulns(
        self, vuln_ids: Collection[str], usage_only: bool, selector: Selector
    ) -> ImpactSet:
        """Images in scope affected by any vuln; unmatched = vulns hitting no tenant image."""
        if isinstance(vuln_ids, str):
            raise TypeError("vuln_ids must be a collection of ids, not one string")
        check_key_count(len(vuln_ids))
        vulns = list(dict.fromkeys(vuln_ids))
        per_vuln = [sorted(self._vulns.get(v, ())) for v in vulns]
        all_keys = list(dict.fromkeys(k for ks in per_vuln for k in ks))
        found_list, hits, _ = self._lookup(all_keys, usage_only)
        found = dict(zip(all_keys, found_list, strict=True))
        result = _union_within(hits, self._mask(selector))
        hit = self._hit_test(selector.tenant) or (lambda bm: True)
        unmatched = [
            v
            for v, ks in zip(vulns, per_vuln, strict=True)
            if not any(found[k] is not None and hit(found[k]) for k in ks)
        ]
        return ImpactSet(result, unmatched, self._digest_of)

    def resolve_all(self, selector: Selector) -> ImpactSet:
        """Every image the selector admits."""
        return ImpactSet(self._mask(selector), [], self._digest_of)

    def _lookup(
        self, keys: list[str], usage_only: bool
    ) -> tuple[list[BitMap | None], list[BitMap], list[int]]:
        """Per-key bitmap (None = no image), the non-None ones, and the slow-path indexes.

        Canonical resident keys cost one C-level dict probe each; the rest (exact purls,
        loader fetches, non-canonical spellings) takes the per-key slow path.
        """
        p_pfx, e_pfx = _USED if usage_only else _CONTAINS
        found: list[BitMap | None] = list(map(self._maps[p_pfx].get, keys))
        hits = [bm for bm in found if bm is not None]  # identity only: no bitmap is touched
        missing: list[int] = []
        if len(hits) < len(found):
            missing = [i for i, bm in enumerate(found) if bm is None]
            emap, get, loads = self._maps[e_pfx], self.store.get, self.store.loader is not None
            known_p, known_e = self._maps[K.CONTAINS_PRODUCT], self._maps[K.CONTAINS_PURL]
            for i in missing:
                k = keys[i]
                bm = emap.get(k)
                if bm is None and not loads and (k in known_p or k in known_e):
                    continue  # canonical, just not in the used map
                bm = bm or get(p_pfx, k) or get(e_pfx, k)
                if bm is None:
                    n = _normalize(k)  # raises PurlError for garbage
                    bm = get(p_pfx, n.product_key) if is_product_key(n) else get(e_pfx, n.purl)
                found[i] = bm
            hits = [bm for bm in found if bm is not None]
        if self.store.max_bytes is not None:
            self.store.touch(p_pfx, keys)
            self.store.touch(e_pfx, keys)
        return found, hits, missing

    def _hit_test(self, tenant: str) -> Callable[[BitMap], bool] | None:
        """Does a bitmap touch the tenant? None when the tenant owns every live image."""
        tb = self.store.get(K.OWNER_TENANT, tenant)
        if tb is None:
            return lambda bm: False
        return None if len(tb) == len(self) else tb.intersect

    def _owner_union(self, prefix: bytes, tenant: str, values: Iterable[str]) -> BitMap:
        bms = [self.store.get(prefix, K.scoped(tenant, v)) for v in values]
        return _union([b for b in bms if b is not None])

    def _mask(self, sel: Selector) -> BitMap:
        """Selector as bitmap algebra: tenant AND (OR of each non-empty filter's values)."""
        t = sel.tenant
        tb = self.store.get(K.OWNER_TENANT, t)
        if tb is None:
            return BitMap()
        parts = [tb]
        if sel.namespaces:
            parts.append(self._owner_union(K.OWNER_NAMESPACE, t, sel.namespaces))
        if sel.repos:
            parts.append(self._owner_union(K.OWNER_REPO, t, sel.repos))
        if sel.labels:
            parts.append(self._owner_union(K.OWNER_LABEL, t, sel.labels))
        if sel.include_tags:
            match = tag_matcher(sel.include_tags).match
            tags = [tag for tag in self._tags.get(t, ()) if match(tag)]
            parts.append(self._owner_union(K.OWNER_TAG, t, tags))
        if sel.digests:
            ids = (self._digests.get(K.scoped(t, d)) for d in sel.digests)
            parts.append(BitMap(i for i in ids if i is not None))
        return BitMap.intersection(*parts) if len(parts) > 1 else tb.copy()

    # -- persistence ---------------------------------------------------------------------
    def dirty_keys(self) -> set[bytes]:
        return self.store.dirty_keys()

    def dirty_items(self) -> Iterator[tuple[bytes, bytes | None]]:
        """(key, serialized value or None = delete) to write before ``clear_dirty``."""
        return self.store.dirty_items()

    def clear_dirty(self) -> None:
        """Everything returned by dirty_items is durable (no mutation in between)."""
        self.store.clear_dirty()

    def restore(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Warm start from stored pairs (at least every resident key), then rebuild ids."""
        self.store.restore(items)
        self._rebuild_ids()

    def iter_bitmaps(self) -> Iterator[tuple[bytes, BitMap]]:
        """Resident bitmaps by storage key (diagnostics and tests)."""
        for prefix in K.BITMAP_PREFIXES:
            for name, bm in self._maps[prefix].items():
                yield K.storage_key(prefix, name), bm
