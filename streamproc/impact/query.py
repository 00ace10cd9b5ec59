"""Answering queries: keys -> bitmaps (one C-level dict lookup each when resident), their
union within the selector's mask. Images are never scanned.

A selector is bitmap algebra: the tenant's bitmap AND, per non-empty filter, the OR of the
filter's values (namespaces, repos, labels, tags matching the globs, listed digests).
Product bitmaps that are not resident are loaded from the source on the spot (a cold
index answers correctly, just slower); after such loads the cache is trimmed to its bound.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.purls import check_key_count, is_product_key, normalize_purl
from streamproc.impact.results import ImpactSet, union, union_within
from streamproc.impact.selector import Selector, tag_matcher
from streamproc.impact.state import IndexState


class Queries(IndexState):
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
        self._settle()
        found, hits = self._lookup(keys, usage_only)
        result = union_within(hits, self._mask(selector), self._popular_of(keys, usage_only))
        hit = self._hit_test(selector.tenant)

        def unmatched() -> list[str]:
            if hit is None:  # the tenant owns every image: only absent keys are unmatched
                return list(dict.fromkeys(k for k, bm in zip(keys, found, strict=True) if not bm))
            return list(
                dict.fromkeys(k for k, bm in zip(keys, found, strict=True) if not bm or not hit(bm))
            )

        self._evict()
        return ImpactSet(result, unmatched, self._digest_of)

    def resolve_by_vulns(
        self, vuln_ids: Collection[str], usage_only: bool, selector: Selector
    ) -> ImpactSet:
        """Images in scope affected by any vuln; unmatched = vulns hitting no tenant image."""
        if isinstance(vuln_ids, str):
            raise TypeError("vuln_ids must be a collection of ids, not one string")
        check_key_count(len(vuln_ids))
        self._settle()
        vulns = list(dict.fromkeys(vuln_ids))
        per_vuln = [sorted(self._vulns.get(v, ())) for v in vulns]
        all_keys = list(dict.fromkeys(k for ks in per_vuln for k in ks))
        found_list, hits = self._lookup(all_keys, usage_only)
        found = dict(zip(all_keys, found_list, strict=True))
        result = union_within(hits, self._mask(selector), self._popular_of(all_keys, usage_only))
        hit = self._hit_test(selector.tenant) or (lambda bm: True)

        def unmatched() -> list[str]:
            return [
                v
                for v, ks in zip(vulns, per_vuln, strict=True)
                if not any((bm := found[k]) and hit(bm) for k in ks)
            ]

        self._evict()
        return ImpactSet(result, unmatched, self._digest_of)

    def resolve_all(self, selector: Selector) -> ImpactSet:
        """Every image the selector admits."""
        mask = self._mask(selector)
        self._evict()
        return ImpactSet(mask, [], self._digest_of)

    # -- lookups ---------------------------------------------------------------------------
    def _lookup(
        self, keys: list[str], usage_only: bool
    ) -> tuple[list[BitMap | None], list[BitMap]]:
        """Per-key bitmap (None = no image) and the non-empty ones, in key order."""
        found: list[BitMap | None] = list(map((self._up if usage_only else self._cp).get, keys))
        hits = [bm for bm in found if bm is not None]
        if len(hits) < len(found):
            missing = [i for i, bm in enumerate(found) if bm is None]
            if self.source is not None:  # cold products: one multi-get for all of them
                groups, gids = self._groups, self._gids
                cold = [keys[i] for i in missing if keys[i] in gids and keys[i] not in groups]
                if len(cold) > 1:
                    self._load_groups(list(dict.fromkeys(cold)))
            side = 1 if usage_only else 0
            for i in missing:
                g = self._groups.get(keys[i])
                if g is not None:
                    bm = self._product(g, side)
                    found[i] = bm if bm or not side else None
                else:
                    found[i] = self._bitmap_for(keys[i], usage_only)
            hits = [bm for bm in found if bm]
        lru = self._lru
        if lru is not None and lru.total > lru.max_bytes * 0.8:  # only when eviction looms
            lru.recent.update(keys)
        return found, hits

    def _popular_of(self, keys: list[str], usage_only: bool) -> list[BitMap]:
        """The bitmaps of the popular products among ``keys`` (already looked up)."""
        got = (self._up if usage_only else self._cp).get
        return [bm for k in self._popular.intersection(keys) if (bm := got(k)) is not None]

    def _bitmap_for(self, key: str, usage_only: bool) -> BitMap | None:
        """Slow path: a product not resident, an exact purl, or a non-canonical spelling."""
        g = self._group(key)
        if g is not None:
            bm = self._product(g, 1 if usage_only else 0)
            return bm if bm or not usage_only else None
        pk = K.product_part(key)
        if pk != key:
            g = self._group(pk)
            if g is not None:
                bm = g.exact(key[len(pk) :], usage_only)
                if bm is not None:
                    return bm
        n = normalize_purl(key)  # raises PurlError for garbage
        if n.purl == key:
            return None  # canonical, and in no image
        g = self._group(n.product_key)
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
