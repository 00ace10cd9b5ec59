"""The impact index's in-memory state and its access paths, shared by ingest, queries and
persistence (each a mixin over this class).

Resident (always whole in memory): the product directory (product key -> group id), image
ids by (tenant, digest), tenants' tag names and the vuln map. Cached (loaded from the
source on demand, evicted least-recently-used under ``max_bytes``): product groups and owner
bitmaps. Image records are read from the source when an image is re-indexed or removed.

``_open[chunk]`` is the chunk's columnar open state (:mod:`streamproc.impact.columns`):
purl -> group id for the purls already checked there, so the fold resolves a whole image's
purls with one C-level ``map(dict.get, purls)`` and records it with a few C-level
appends into the batch's pending ids. On this class of machine a random memory
access costs ~1 µs; everything per purl beyond that is settled once per touched product per
batch, in bulk (``_settle`` merges the pending ids into the groups' stored chunks). Groups
hold nothing but stored bytes, so evicting one drops no fold state, and the fold never
needs a group in memory to add an image to it. The open state of a chunk no new image goes
to any more is dropped after the batch (re-indexing or removing one of its images builds it
again, as a cache).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from itertools import chain, compress, filterfalse
from operator import attrgetter, is_not, itemgetter, not_
from typing import cast

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.cache import Lru
from streamproc.impact.columns import (
    PENDING_PAIR_BYTES,
    PENDING_PURL_BYTES,
    NewIds,
    OpenChunk,
    absorb,
)
from streamproc.impact.groups import Group, bitmap_bytes, stored_sizes
from streamproc.impact.records import ImageRecord, decode_record
from streamproc.state.store import Store

_AFTER4 = itemgetter(slice(4, None))
_CHUNKS = attrgetter("chunks")
_PK = attrgetter("pk")
_IS6 = (6).__eq__
_is_not_none = partial(is_not, None)
_U16 = partial(int.from_bytes, byteorder="big")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC around a bulk load: thousands of new containers that all
    outlive it would otherwise trigger collections that walk the whole index (~100 ms)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class IndexState:
    def __init__(
        self, source: Store | None = None, max_bytes: int | None = None, *, defer: bool = False
    ) -> None:
        """``defer``: a batch's ids are merged into the stored chunks over the next batches
        (a time-bounded slice each), and stored image-major until then
        (:mod:`streamproc.impact.pending`); without it every batch merges all of its own."""
        if max_bytes is not None and source is None:
            raise ValueError("a memory bound needs a source to load evicted values back from")
        if defer and source is None:
            raise ValueError("deferred merging needs a source to store the pending ids in")
        self.source = source
        self.max_bytes = max_bytes
        self.defer = defer
        self._reset()

    def _reset(self) -> None:
        self._lru = Lru(self.max_bytes) if self.max_bytes is not None else None
        self._digests: dict[str, int] = {}
        self._digest_by_id: list[str | None] = []
        self._free = BitMap()
        self._records: dict[int, bytes] = {}
        self._gids: dict[str, int] = {}
        self._pk_by_gid: list[str | None] = []
        self._gdir: list[bytes] = []
        """Per group id, its product directory value: gid u32 + its stored chunk numbers
        (u16 each). For a one-chunk product that is exactly its chunk's key in
        ``impact_groups``: what a cold load asks for, with no bytes built per product."""
        self._free_gids = BitMap()
        self._groups: dict[str, Group] = {}
        self._stored: dict[str, bytes] = {}
        """One-chunk products a query read cold, as their stored chunk (product key -> the
        chunk's bytes), not yet built into a :class:`Group`: the query unions their images
        straight from these bytes, and a group is built from them (no read) when anything
        needs one. Cached and evicted like groups (the same estimated size)."""
        self._cp: dict[str, BitMap] = {}
        self._up: dict[str, BitMap] = {}
        self._popular: set[str] = set()
        """Products in at least 1% of the images (as of their last rebuild): their bitmaps
        are unioned first, and often already cover a query's whole scope."""
        self._common: set[str] = set()
        """Products in at least 0.1% of the images (popular ones included): tried next,
        before looking up every key."""
        self._open: dict[int, OpenChunk] = {}
        """Per chunk the fold touched since its last batch ended (the current one, and an
        older one an image of which was re-indexed or removed): checked purls and pending
        ids."""
        self._owners: dict[bytes, BitMap] = {}
        self._tags: dict[str, set[str]] = {}
        self._vulns: dict[str, set[str]] = {}
        self._dirty_chunks: dict[int, BitMap] = {}
        self._dead: list[bytes] = []
        self._dirty_owners: set[bytes] = set()
        self._dirty_records: set[int] = set()
        self._dirty_names: set[bytes] = set()
        self._warm_cursor: bytes | None = b""
        self._warm_owners: bytes | None = b""
        self._round: dict[int, NewIds] = {}
        """Per chunk, the pending ids being merged into the stored chunks, a slice per
        batch (:mod:`streamproc.impact.pending`); ``_pend``: those of the batches folded
        since this round began, merged in the next round."""
        self._pend: dict[int, NewIds] = {}
        self._round_iids: list[int] = []
        """The images whose pending ids are in the round (or its batch's open chunk): their
        stored pending entries are deleted in the batch that merges the round's last ids."""
        self._pend_iids: list[int] = []
        self._deltas: dict[int, bytes | None] = {}
        """Stored pending entries (image id -> value, None: delete) the batch writes."""
        self._round_cost = 0
        self._pend_cost = 0
        """Estimated bytes of the round's and of ``_pend``'s ids, as they were regrouped
        (a query merging some of them early leaves the estimate as it is until the round
        ends)."""

    # -- images ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._digest_by_id) - len(self._free)

    def image_id(self, tenant: str, digest: str) -> int | None:
        return self._digests.get(K.scoped(tenant, digest))

    def _digest_of(self, iid: int) -> str:
        d = self._digest_by_id[iid]
        if d is None:
            raise KeyError(f"image id {iid} is not live (index changed after the query?)")
        return d

    def _next_id(self) -> int:
        """Lowest free id: keeps bitmaps dense, and ids are reused only once freed."""
        return self._free.min() if self._free else len(self._digest_by_id)

    def _record(self, iid: int) -> ImageRecord:
        raw = self._records.get(iid)
        if raw is None and self.source is not None:
            raw = self.source.get(K.IMAGES_CF, K.u32(iid))
        if raw is None:
            raise LookupError(f"image record {iid} missing from the store")
        return decode_record(raw)

    # -- product groups --------------------------------------------------------------------
    def product_count(self) -> int:
        return len(self._gids)

    def _group(self, pk: str) -> Group | None:
        """The product's group, loaded from the source if not resident; None if unknown."""
        g = self._groups.get(pk)
        if g is not None:
            return g
        gid = self._gids.get(pk)
        if gid is None or self.source is None:
            return None
        return self._load_groups([pk])[0]

    def _load_groups(self, pks: list[str]) -> list[Group]:
        """Build the groups of known products that have none in memory (in no particular
        order): from ``_stored`` where a query left their chunk, the others read."""
        out = self._unstash(pks) if self._stored else []
        if out:
            pks = list(filterfalse(self._groups.__contains__, pks))
        got = self._read_groups(list(map(self._gids.__getitem__, pks))) if pks else []
        return [*out, *got] if out else got

    def _read_groups(self, gids: list[int]) -> list[Group]:
        """Build the groups of these known group ids (none resident, none in ``_stored``)
        with one multi-get of all their chunks (a cold load can be ~10,000 at once:
        everything per product is C-level maps).

        The multi-get asks for its keys in key order, which reads the table files front to
        back (a fifth to a third less CPU than in query order)."""
        assert self.source is not None
        gids = sorted(gids)
        pks: list[str] = list(map(self._pk_by_gid.__getitem__, gids))  # type: ignore[arg-type]  # a known product's gid maps back to its key
        dirs = list(map(self._gdir.__getitem__, gids))
        if all(map(_IS6, map(len, dirs))):  # one chunk each: the common case
            vals = self._get_chunks(dirs)
            got = list(map(Group.single, gids, pks, map(_U16, map(_AFTER4, dirs)), vals))
        else:
            keys: list[bytes] = []
            spans: list[int] = []
            for d in dirs:
                spans.append(len(keys))
                keys.extend(d[:4] + d[i : i + 2] for i in range(4, len(d), 2))
            vals = self._get_chunks(keys)
            ends = [*spans[1:], len(keys)]
            got = [
                Group.load(gid, pk, [(_U16(keys[n][4:]), vals[n]) for n in range(lo, hi)])
                for gid, pk, lo, hi in zip(gids, pks, spans, ends, strict=True)
            ]
        self._groups.update(zip(pks, got, strict=True))
        if self._lru is not None:
            self._lru.set_many(pks, list(map(Group.size, got)))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)
        return got

    def _unstash(self, pks: Iterable[str]) -> list[Group]:
        """Build the groups of the products among ``pks`` that a query left in ``_stored``
        (no read; their cache entries stay as they are: a fresh one-chunk group has the
        same estimated size)."""
        stored = self._stored
        hit = list(filter(stored.__contains__, pks))
        if not hit:
            return []
        gids = list(map(self._gids.__getitem__, hit))
        chunks = map(_U16, map(_AFTER4, map(self._gdir.__getitem__, gids)))
        out = list(map(Group.single, gids, hit, chunks, map(stored.pop, hit)))
        self._groups.update(zip(hit, out, strict=True))
        return out

    def _cold_gids(self, pks: Iterable[str]) -> list[int]:
        """Group ids of the known products among ``pks`` that have no group in memory (ids
        in ``_stored`` included: ``_unstash`` first): one look-up per key, however many
        groups are resident."""
        groups = self._groups
        todo = filterfalse(groups.__contains__, pks) if groups else pks
        # filter with partial(is_not, None): C-level, but typeshed wants a TypeGuard.
        return list(filter(_is_not_none, map(self._gids.get, todo)))  # type: ignore[arg-type]

    def _read_cold(self, gids: list[int]) -> list[bytes]:
        """The stored chunks of these known products (no group in memory, none in
        ``_stored``), for a query that unions their images in bulk: one multi-get in key
        order. One-chunk products are kept as their chunk's bytes in ``_stored`` (no
        :class:`Group`, no per-product Python work); the others are built into groups."""
        assert self.source is not None
        gids = sorted(gids)
        dirs = list(map(self._gdir.__getitem__, gids))
        single = list(map(_IS6, map(len, dirs)))
        extra: list[bytes] = []
        if not all(single):
            several = self._read_groups(list(compress(gids, map(not_, single))))
            extra = list(chain.from_iterable(map(dict.values, map(_CHUNKS, several))))
            gids = list(compress(gids, single))
            dirs = list(compress(dirs, single))
        if not gids:
            return extra
        vals = self._get_chunks(dirs)
        pks = list(map(self._pk_by_gid.__getitem__, gids))
        self._stored.update(zip(pks, vals, strict=True))  # type: ignore[arg-type]  # a known product's gid maps back to its key
        if self._lru is not None:
            self._lru.set_many(pks, stored_sizes(vals))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)
        return [*vals, *extra] if extra else vals

    def _get_chunks(self, keys: list[bytes]) -> list[bytes]:
        assert self.source is not None
        vals = self.source.get_many(K.GROUPS_CF, keys)
        if None in vals:
            k = keys[vals.index(None)]
            raise LookupError(f"impact chunk {k.hex()} is missing from the store")
        return vals  # type: ignore[return-value]  # no None left (raised above)

    def _admit(self, g: Group) -> None:
        self._groups[g.pk] = g
        if g.cp is not None:
            self._cp[g.pk] = g.cp
        if g.up:
            self._up[g.pk] = g.up
        if self._lru is not None:
            self._lru.set(g.pk, g.size())

    def _products(self, g: Group) -> tuple[BitMap, BitMap]:
        """The group's product bitmaps, rebuilt if stale and published to the query maps."""
        return self._product(g, 0), self._product(g, 1)

    def _product(self, g: Group, side: int) -> BitMap:
        built = (g.up if side else g.cp) is None
        bm = g.product(side)
        if built and self._lru is not None and g.pk in self._lru:
            self._lru.resize(g.pk, g.size())  # the bitmap is charged from now on
        if not side:
            self._cp[g.pk] = bm
            n, live = len(bm), len(self)
            if n * 1000 >= live:
                self._common.add(g.pk)
                if n * 100 >= live:
                    self._popular.add(g.pk)
                else:
                    self._popular.discard(g.pk)
            else:
                self._common.discard(g.pk)
                self._popular.discard(g.pk)
        elif bm:
            self._up[g.pk] = bm
        return bm

    def _stale(self, g: Group) -> None:
        g.cp = g.up = None
        self._cp.pop(g.pk, None)
        self._up.pop(g.pk, None)

    def _new_group(self, pk: str) -> Group:
        gid = self._free_gids.min() if self._free_gids else len(self._pk_by_gid)
        if gid == len(self._pk_by_gid):
            self._pk_by_gid.append(pk)
            self._gdir.append(K.u32(gid))
        else:
            self._free_gids.remove(gid)
            self._pk_by_gid[gid] = pk
            self._gdir[gid] = K.u32(gid)
        self._gids[pk] = gid
        # written in this batch, with or without a chunk: a deferred merge may write its
        # first chunk batches later, and a restart must find the group under this id
        self._dirty_names.add(K.PRODUCT + pk.encode())
        g = self._groups[pk] = Group(gid, pk)  # sized for the cache bound at flush
        return g

    def _drop_group(self, g: Group) -> None:
        """Forget a group's in-memory form (eviction or deletion)."""
        del self._groups[g.pk]
        self._cp.pop(g.pk, None)
        self._up.pop(g.pk, None)

    def _take_open(self) -> None:
        """Move the open chunks' pending ids (the batch's) into ``_pend``, by group: at
        every flush (regrouping a whole round at once held the loop for seconds), and
        before a query reads them or the checked purls they are found by are dropped."""
        for chunk, oc in self._open.items():
            if oc.pairs:
                self._take_chunk(chunk, oc)

    def _take_chunk(self, chunk: int, oc: OpenChunk) -> None:
        self._pend_cost += PENDING_PURL_BYTES * (len(oc.c) + len(oc.u))
        self._pend_cost += PENDING_PAIR_BYTES * oc.pairs
        absorb(self._pend.setdefault(chunk, {}), oc.take(self._pk_by_gid))

    def _mark_dirty(self, chunk: int, gids: Iterable[int]) -> None:
        """These groups' chunk ``chunk`` changed: the flush writes it."""
        dirty = self._dirty_chunks.get(chunk)
        if dirty is None:
            self._dirty_chunks[chunk] = K.bitmap(gids)
        else:
            dirty.update(gids)

    def _open_bytes(self) -> int:
        """Estimated bytes of the open chunks (checked purls, the batch's pending ids) and
        of the ids still pending from earlier batches."""
        return (
            sum(map(OpenChunk.held_bytes, self._open.values())) + self._round_cost + self._pend_cost
        )

    # -- owners ----------------------------------------------------------------------------
    def _owner(self, key: bytes) -> BitMap | None:
        bm = self._owners.get(key)
        if bm is not None or self.source is None or key in self._dirty_owners:
            return bm
        raw = self.source.get(K.OWNERS_CF, key)
        if raw is None:
            return None
        bm = BitMap.deserialize(raw)
        self._owners[key] = bm
        if self._lru is not None:
            self._lru.set(key, bitmap_bytes(bm))
        return bm

    # -- eviction --------------------------------------------------------------------------
    def _has_dirty(self) -> bool:
        return bool(
            self._dirty_chunks
            or self._dead
            or self._dirty_owners
            or self._dirty_records
            or self._dirty_names
            or self._deltas
        )

    def _evict(self) -> None:
        """Drop least recently used groups and owners; never while a batch is pending."""
        if self._lru is None or self._has_dirty():
            return
        held = self._open_bytes()
        if 2 * held > self._lru.max_bytes:  # a cache: dropped rather than evict the rest
            self._take_open()  # (pending purls are found by it)
            for oc in self._open.values():
                oc.flat = {}
            held = self._open_bytes()
        self._lru.pin(held)
        for key in self._lru.victims():
            if isinstance(key, str):
                g = self._groups.get(key)
                if g is not None:
                    self._drop_group(g)
                else:
                    self._stored.pop(key, None)
            else:
                self._owners.pop(cast(bytes, key), None)  # an owner key: not a product's str

    @property
    def cached_bytes(self) -> int:
        """Estimated bytes of cached groups and owners (what ``max_bytes`` bounds)."""
        if self._lru is not None:
            return self._lru.total
        return (
            self._open_bytes()
            + sum(g.size() for g in self._groups.values())
            + sum(stored_sizes(list(self._stored.values())))
            + sum(map(bitmap_bytes, self._owners.values()))
        )
