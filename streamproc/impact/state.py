"""The impact index's in-memory state and its access paths, shared by ingest, queries and
persistence (each a mixin over this class).

Resident (always whole in memory): the product directory (product key -> group id), image
ids by (tenant, digest), tenants' tag names and the vuln map. Cached (loaded from the
source on demand, evicted least-recently-used under ``max_bytes``): product groups and owner
bitmaps. Image records are read from the source when an image is re-indexed or removed.

``_flat_c[chunk][purl]`` / ``_flat_u[chunk][purl]`` point straight at the purl's member in
an open chunk (see :data:`~streamproc.impact.groups.Member`), so the fold resolves a whole
image's purls with one C-level ``map(dict.get, purls)`` and records it with one C-level
``map(list.append, ...)``. On this class of machine a random memory access costs ~1 µs;
everything per purl beyond those two is settled once per touched product per batch, in
bulk. Chunks stay open (decoded) until their group is evicted under the memory bound:
closing and re-decoding them cost more than all the appends.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from itertools import chain, repeat
from operator import itemgetter, setitem
from typing import cast

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.cache import Lru
from streamproc.impact.groups import Group, Member, Opened, bitmap_bytes
from streamproc.impact.records import ImageRecord, decode_record
from streamproc.state.store import Store

_KEY = itemgetter(0)
_VALUE = itemgetter(1)
_FIRST4 = itemgetter(slice(0, 4))
_AFTER4 = itemgetter(slice(4, None))
_AFTER1 = itemgetter(slice(1, None))
_THIRD = itemgetter(2)
_IS2 = (2).__eq__
_U16 = partial(int.from_bytes, byteorder="big")


def _consume(it: Iterator[object]) -> None:
    deque(it, maxlen=0)


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
    def __init__(self, source: Store | None = None, max_bytes: int | None = None) -> None:
        if max_bytes is not None and source is None:
            raise ValueError("a memory bound needs a source to load evicted values back from")
        self.source = source
        self.max_bytes = max_bytes
        self._reset()

    def _reset(self) -> None:
        self._lru = Lru(self.max_bytes) if self.max_bytes is not None else None
        self._digests: dict[str, int] = {}
        self._digest_by_id: list[str | None] = []
        self._free = BitMap()
        self._records: dict[int, bytes] = {}
        self._gids: dict[str, int] = {}
        self._pk_by_gid: list[str | None] = []
        self._gchunks: list[bytes] = []
        """Per group id, its stored chunk numbers (packed u16): what a cold load reads."""
        self._free_gids = BitMap()
        self._groups: dict[str, Group] = {}
        self._cp: dict[str, BitMap] = {}
        self._up: dict[str, BitMap] = {}
        self._popular: set[str] = set()
        """Products in at least 1% of the images (as of their last rebuild): their bitmaps
        are unioned first, and often already cover a query's whole scope."""
        self._common: set[str] = set()
        """Products in at least 0.1% of the images (popular ones included): tried next,
        before looking up every key."""
        self._flat_c: dict[int, dict[str, Member]] = {}
        self._flat_u: dict[int, dict[str, Member]] = {}
        self._pending: dict[int, BitMap] = {}
        """Per chunk, the group ids changed since the last ``_settle``."""
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

    def restore(self) -> None:
        """Load the resident maps from the source (at start, and after a discarded batch)."""
        self._reset()
        if self.source is None:
            return
        gids: list[int] = []
        pks: list[str] = []
        packed: list[bytes] = []
        ids: list[int] = []
        scoped: list[str] = []
        for kind, names, raws in self._scan_names():
            if kind == K.PRODUCT:
                pks, packed = names, list(map(_AFTER4, raws))
                # int.from_bytes mapped with repeat("big"): C-level, but typeshed's Literal
                # byteorder does not match a repeat of str.
                gids = list(map(int.from_bytes, map(_FIRST4, raws), repeat("big")))  # type: ignore[arg-type]
                self._gids = dict(zip(pks, gids, strict=True))
            elif kind == K.DIGEST:
                scoped, ids = names, list(map(int.from_bytes, raws, repeat("big")))  # type: ignore[arg-type]  # as above
                self._digests = dict(zip(scoped, ids, strict=True))
            elif kind == K.TAGS:
                self._tags = {n: set(K.decode_names(r)) for n, r in zip(names, raws, strict=True)}
            elif kind == K.VULN:
                self._vulns = {n: set(K.decode_names(r)) for n, r in zip(names, raws, strict=True)}
        # id -> name tables, filled by C-level maps (hundreds of thousands of entries)
        self._digest_by_id = [None] * (max(ids, default=-1) + 1)
        digests = map(_THIRD, map(str.partition, scoped, repeat(K.SEP)))
        _consume(map(setitem, repeat(self._digest_by_id), ids, digests))
        self._free = BitMap(range(len(self._digest_by_id))) - BitMap(ids)
        top = max(gids, default=-1) + 1
        self._pk_by_gid = [None] * top
        self._gchunks = [b""] * top
        _consume(map(setitem, repeat(self._pk_by_gid), gids, pks))
        _consume(map(setitem, repeat(self._gchunks), gids, packed))
        self._free_gids = BitMap(range(top)) - BitMap(gids)

    def _scan_names(self) -> list[tuple[bytes, list[str], list[bytes]]]:
        """The names column family as (kind, names, values), read in bulk: ~300,000
        entries for a 50,000-image catalog, so per-item Python is what opening costs."""
        assert self.source is not None
        pairs = list(self.source.scan(K.NAMES_CF))
        keys = list(map(_KEY, pairs))
        out = []
        for kind in (K.DIGEST, K.PRODUCT, K.TAGS, K.VULN):
            lo = bisect_left(keys, kind)
            hi = bisect_left(keys, bytes([kind[0] + 1]), lo)
            names = list(map(bytes.decode, map(_AFTER1, keys[lo:hi])))
            out.append((kind, names, list(map(_VALUE, pairs[lo:hi]))))
        return out

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
        """Load known, non-resident products with one multi-get of all their chunks (a
        cold query loads ~10,000 at once: everything per product is C-level maps).

        Returns the groups in group-id order: the multi-get asks for its keys in key order,
        which reads the table files front to back (a fifth to a third less CPU than in query
        order)."""
        assert self.source is not None
        gids = sorted(map(self._gids.__getitem__, pks))
        pks = list(map(self._pk_by_gid.__getitem__, gids))  # type: ignore[arg-type]  # a known product's gid maps back to its key
        packed = list(map(self._gchunks.__getitem__, gids))
        # C-level map; typeshed's Literal byteorder does not match a repeat of str.
        heads = list(map(int.to_bytes, gids, repeat(4), repeat("big")))  # type: ignore[arg-type]
        if all(map(_IS2, map(len, packed))):  # one chunk each: the common case
            keys = list(map(bytes.__add__, heads, packed))
            vals = self._get_chunks(keys)
            out = list(map(Group.single, gids, pks, map(_U16, packed), vals))
        else:
            keys, spans = [], []
            for head, raw in zip(heads, packed, strict=True):
                spans.append(len(keys))
                keys.extend(head + raw[i : i + 2] for i in range(0, len(raw), 2))
            vals = self._get_chunks(keys)
            ends = [*spans[1:], len(keys)]
            out = [
                Group.load(gid, pk, [(_U16(keys[n][4:]), vals[n]) for n in range(lo, hi)])
                for gid, pk, lo, hi in zip(gids, pks, spans, ends, strict=True)
            ]
        self._groups.update(zip(pks, out, strict=True))
        if self._lru is not None:
            self._lru.set_many(pks, list(map(Group.size, out)))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)
        return out

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
        bm = g.product(side)
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
            self._gchunks.append(b"")
        else:
            self._free_gids.remove(gid)
            self._pk_by_gid[gid] = pk
            self._gchunks[gid] = b""
        self._gids[pk] = gid  # its directory entry is written with its first chunk
        g = self._groups[pk] = Group(gid, pk)  # sized for the cache bound at flush
        return g

    def _drop_group(self, g: Group) -> None:
        """Forget a group's in-memory form (eviction or deletion)."""
        for chunk in list(g.open):
            self._close(g, chunk)
        del self._groups[g.pk]
        self._cp.pop(g.pk, None)
        self._up.pop(g.pk, None)

    def _open(self, g: Group, chunk: int) -> Opened:
        opened, new = g.open_chunk(chunk)
        if new:
            add = g.pk.__add__
            fc = self._flat_c.setdefault(chunk, {})
            for members in opened[:2]:
                fc.update(zip(map(add, members), members.values(), strict=True))
            if opened[2] or opened[3]:
                fu = self._flat_u.setdefault(chunk, {})
                for members in opened[2:]:
                    fu.update(zip(map(add, members), members.values(), strict=True))
        return opened

    def _close(self, g: Group, chunk: int) -> None:
        opened = g.open.pop(chunk, None)
        if opened is None:
            return
        g.open_members = max(0, g.open_members - sum(map(len, opened)))
        pk = g.pk
        for flat, members in ((self._flat_c, opened[:2]), (self._flat_u, opened[2:])):
            fm = flat.get(chunk)
            if fm is None:
                continue
            for s in chain(*members):
                fm.pop(pk + s, None)

    def _settle(self) -> None:
        """Mark the product bitmaps of groups changed since the last call as stale (they
        are rebuilt from the members when next asked for): before queries and strips."""
        if not self._pending:
            return
        groups, by_gid = self._groups, self._pk_by_gid
        for gids in self._pending.values():
            for gid in gids:
                g = groups.get(by_gid[gid])  # type: ignore[arg-type]  # a pending gid is live, so its product key is not None
                if g is not None and g.gid == gid:
                    self._stale(g)
        self._pending.clear()

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
        )

    def _evict(self) -> None:
        """Drop least recently used groups and owners; never while a batch is pending."""
        if self._lru is None or self._has_dirty():
            return
        for key in self._lru.victims():
            if isinstance(key, str):
                g = self._groups.get(key)
                if g is not None:
                    self._drop_group(g)
            else:
                self._owners.pop(cast(bytes, key), None)  # an owner key: not a product's str

    @property
    def cached_bytes(self) -> int:
        """Estimated bytes of cached groups and owners (what ``max_bytes`` bounds)."""
        if self._lru is not None:
            return self._lru.total
        return sum(g.size() for g in self._groups.values()) + sum(
            map(bitmap_bytes, self._owners.values())
        )
