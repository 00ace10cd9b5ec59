"""Answering queries: keys -> bitmaps (one C-level dict lookup each when resident), their
union within the selector's mask. Images are never scanned.

A selector is bitmap algebra: the tenant's bitmap AND, per non-empty filter, the OR of the
filter's values (namespaces, repos, labels, tags matching the globs, listed digests).
Product bitmaps that are not resident are loaded from the source on the spot (a cold
index answers correctly, just slower); after such loads the cache is trimmed to its bound.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from functools import partial
from itertools import compress
from operator import is_

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.groups import stored_union
from streamproc.impact.pending import Pending
from streamproc.impact.results import ImpactSet, covers, union, union_within
from streamproc.impact.selector import Selector, tag_matcher
from streamproc.impact.state import gc_paused
from streamproc.sbom.purls import check_key_count, is_product_key, normalize_purl

_is_none = partial(is_, None)

Usage = bool | BitMap
"""How a query is answered: False on the contains side, True on the used side, or (a
bitmap: the tenant's usage-known images) on the used side within it and the contains side
elsewhere."""


class Queries(Pending):
    def resolve_by_purls(
        self, keys: Collection[str], usage_only: bool, selector: Selector
    ) -> ImpactSet:
        """Images in scope containing (or using) any key: product keys or exact purls.

        With ``usage_only`` an image counts when its entrypoint uses a key, or when its
        usage is not known and it contains the key. Keys found in none of the tenant's
        images come back in ``unmatched`` (as given); an unparseable key raises PurlError;
        more than MAX_KEYS_PER_QUERY raise.
        """
        if isinstance(keys, str):
            raise TypeError("keys must be a collection of purls, not one string")
        check_key_count(len(keys))
        keys = keys if isinstance(keys, list) else list(keys)
        self._settle_keys(keys)
        usage = self._usage(selector.tenant, usage_only)
        found, result = self._answer(keys, usage, self._mask(selector))
        hit = self._hit_test(selector.tenant)

        def unmatched() -> list[str]:
            per_key = found
            if per_key is None or None in per_key:
                per_key = self._per_key(keys, usage)
            if hit is None:  # the tenant owns every image: only absent keys are unmatched
                return list(dict.fromkeys(k for k, bm in zip(keys, per_key, strict=True) if not bm))
            return list(
                dict.fromkeys(
                    k for k, bm in zip(keys, per_key, strict=True) if not bm or not hit(bm)
                )
            )

        unknown = self._unknown_count(selector, result)
        self._evict()
        return ImpactSet(result, unmatched, self._digest_of, unknown)

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
        self._settle_keys(all_keys)
        usage = self._usage(selector.tenant, usage_only)
        found_list, result = self._answer(all_keys, usage, self._mask(selector))
        hit = self._hit_test(selector.tenant) or (lambda bm: True)

        def unmatched() -> list[str]:
            per_key = found_list
            if per_key is None or None in per_key:
                per_key = self._per_key(all_keys, usage)
            found = dict(zip(all_keys, per_key, strict=True))
            return [
                v
                for v, ks in zip(vulns, per_vuln, strict=True)
                if not any((bm := found[k]) and hit(bm) for k in ks)
            ]

        unknown = self._unknown_count(selector, result)
        self._evict()
        return ImpactSet(result, unmatched, self._digest_of, unknown)

    def resolve_all(self, selector: Selector) -> ImpactSet:
        """Every image the selector admits."""
        mask = self._mask(selector)
        unknown = self._unknown_count(selector, mask)
        self._evict()
        return ImpactSet(mask, [], self._digest_of, unknown)

    # -- usage -----------------------------------------------------------------------------
    def _usage(self, tenant: str, usage_only: bool) -> Usage:
        """Which side answers for the tenant: contains (no ``usage_only``, or no image of
        the tenant has usage data), used (every one has), or both — used within the
        usage-known images, contains within the rest. Decided per tenant, so the answer
        and ``unmatched`` always agree."""
        if not usage_only:
            return False
        known = self._owner(K.OWNER_USAGE + tenant.encode())
        if not known:
            return False
        tb = self._owner(K.OWNER_TENANT + tenant.encode())
        if tb is not None and len(known) == len(tb):  # known is a subset of the tenant's
            return True
        return known

    def _unknown_count(self, selector: Selector, result: BitMap) -> Callable[[], int]:
        """How many of ``result`` have no usage data (computed when first asked for)."""
        known = self._owner(K.OWNER_USAGE + selector.tenant.encode())
        if not known:
            return result.__len__
        return partial(result.difference_cardinality, known)

    # -- lookups ---------------------------------------------------------------------------
    def _answer(
        self, keys: list[str], usage: Usage, mask: BitMap
    ) -> tuple[list[BitMap | None] | None, BitMap]:
        """(per-key bitmaps or None if not looked up, the union of the keys within mask),
        on the side ``usage`` says; both sides answer their part of the mask separately."""
        if not mask:
            return None, BitMap()
        if isinstance(usage, bool):
            return self._answer_side(keys, usage, mask)
        parts = [
            self._answer_side(keys, side, part)[1]
            for side, part in ((True, mask & usage), (False, mask - usage))
            if part
        ]
        return None, union(parts)

    def _answer_side(
        self, keys: list[str], usage_only: bool, mask: BitMap
    ) -> tuple[list[BitMap | None] | None, BitMap]:
        """The biggest products among the keys are tried first, before looking up the rest:
        those in 1% of the images, then those in 0.1%. They usually cover every image in
        scope already, and then the other ~10,000 dict lookups (~1 µs each here, all cache
        misses) are not needed for the answer."""
        first: list[BitMap] = []
        for tier in (self._popular, self._common):
            first = self._tier_of(tier, keys, usage_only)
            if first and covers(first, mask):
                return None, mask
        found, hits = self._lookup(keys, usage_only)
        return found, union_within(hits, mask, first)

    def _lookup(
        self, keys: list[str], usage_only: bool, *, bulk: bool = True
    ) -> tuple[list[BitMap | None], list[BitMap]]:
        """Per-key bitmap (None = no image) and the non-empty bitmaps to union.

        Products not in memory are loaded with one multi-get. With ``bulk`` (and more than
        one of them) their images come back as a single union in ``hits``, and their
        entries in the per-key list stay None: building ~10,000 product bitmaps one by one
        is what made the first query after a restart slow. Nor are their groups built:
        their stored chunks are kept (``_stored``) and a group is built from them when
        something needs it, e.g. the next query naming the product, which then builds
        its bitmap as for any resident group. Callers that need every key's bitmap
        (``unmatched``) ask again with ``bulk=False`` (the chunks are in memory by then;
        each bitmap is built on first use)."""
        side = 1 if usage_only else 0
        found: list[BitMap | None] = list(map((self._up if side else self._cp).get, keys))
        if not any(map(_is_none, found)):  # all in memory (no pass touching each bitmap)
            self._mark_recent(keys)
            return found, found  # type: ignore[return-value]  # no None in found (checked by the any() above)
        groups = self._groups
        cold_union: BitMap | None = None
        rest = set(compress(keys, map(_is_none, found)))
        if self.source is not None:  # cold products: one multi-get for all of them
            with gc_paused():
                if self._stored:  # read by an earlier query: answered one by one below
                    self._unstash(rest)
                cold = self._cold_gids(rest)
                if len(cold) > 1 and not bulk:
                    self._read_groups(cold)
                elif len(cold) > 1:
                    cold_union = stored_union(self._read_cold(cold), side)
                    if len(cold) == len(rest):  # every key left is one of them
                        rest.clear()
                    else:
                        rest.difference_update(map(self._pk_by_gid.__getitem__, cold))
        if rest:  # keys in memory but stale, exact purls, other spellings, unknown keys
            for i in compress(range(len(found)), map(_is_none, found)):
                key = keys[i]
                if key not in rest:
                    continue
                g = groups.get(key)
                if g is not None:
                    bm = self._product(g, side)
                    found[i] = bm if bm or not side else None
                else:
                    found[i] = self._bitmap_for(key, usage_only)
        hits = list(filter(None, found))  # the non-empty ones (C-level)
        if cold_union:
            hits.append(cold_union)
        self._mark_recent(keys)
        return found, hits

    def _per_key(self, keys: list[str], usage: Usage) -> list[BitMap | None]:
        """Every key's bitmap (what ``unmatched`` needs, after the answer itself skipped
        lookups or loaded cold products in bulk); trims the cache like a query. Both sides:
        a key's used images plus the images containing it whose usage is not known."""
        self._settle_keys(keys)  # asked after the answer: later batches may have folded
        if isinstance(usage, bool):
            found = self._lookup(keys, usage, bulk=False)[0]
        else:
            used = self._lookup(keys, True, bulk=False)[0]
            contains = self._lookup(keys, False, bulk=False)[0]
            found = [
                None if c is None else (c - usage) | u if u else c - usage
                for c, u in zip(contains, used, strict=True)
            ]
        self._evict()
        return found

    def _mark_recent(self, keys: list[str]) -> None:
        lru = self._lru
        if lru is not None and lru.total > lru.max_bytes * 0.8:  # only when eviction looms
            lru.recent.update(keys)

    def _tier_of(self, tier: set[str], keys: list[str], usage_only: bool) -> list[BitMap]:
        """The bitmaps of the tier's products among ``keys`` (only those in memory)."""
        got = (self._up if usage_only else self._cp).get
        return [bm for k in tier.intersection(keys) if (bm := got(k)) is not None]

    def _bitmap_for(self, key: str, usage_only: bool) -> BitMap | None:
        """Slow path: a product not resident, an exact purl, or a non-canonical spelling."""
        g = self._settled_group(key)
        if g is not None:
            product = self._product(g, 1 if usage_only else 0)
            return product if product or not usage_only else None
        pk = K.product_part(key)
        if pk != key:
            g = self._settled_group(pk)
            if g is not None:
                bm = g.exact(key[len(pk) :], usage_only)
                if bm is not None:
                    return bm
        n = normalize_purl(key)  # raises PurlError for garbage
        if n.purl == key:
            return None  # canonical, and in no image
        g = self._settled_group(n.product_key)
        if g is None:
            return None
        if is_product_key(n):
            bm = self._product(g, 1 if usage_only else 0)
            return bm if bm or not usage_only else None
        return g.exact(n.purl[len(n.product_key) :], usage_only)

    def _hit_test(self, tenant: str) -> Callable[[BitMap], bool] | None:
        """Does a bitmap touch the tenant? None when the tenant owns every live image."""
        tb = self._owner(K.OWNER_TENANT + tenant.encode())
        if tb is None:
            return lambda bm: False
        return None if len(tb) == len(self) else tb.intersect

    def _owner_union(self, kind: bytes, tenant: str, values: Iterable[str]) -> BitMap:
        bms = [self._owner(kind + K.scoped(tenant, v).encode()) for v in values]
        return union([b for b in bms if b is not None])

    def _mask(self, sel: Selector) -> BitMap:
        """Selector as bitmap algebra: tenant AND (OR of each non-empty filter's values)."""
        t = sel.tenant
        tb = self._owner(K.OWNER_TENANT + t.encode())
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
