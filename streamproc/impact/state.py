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
everything per purl beyond those two is settled once per chunk per batch instead.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import repeat
from operator import itemgetter

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
        are unioned first, and usually already cover a query's whole scope."""
        self._flat_c: dict[int, dict[str, Member]] = {}
        self._flat_u: dict[int, dict[str, Member]] = {}
        self._pending: dict[int, set[int]] = {}
        self._opened: set[tuple[str, int]] = set()
        self._kept: set[tuple[str, int]] = set()
        self._batches = 0
        self._owners: dict[bytes, BitMap] = {}
        self._tags: dict[str, set[str]] = {}
        self._vulns: dict[str, set[str]] = {}
        self._dirty_chunks: dict[int, set[int]] = {}
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
        chunks: dict[int, bytes] = {}
        for kind, names, raws in self._scan_names():
            if kind == K.PRODUCT:
                gids = list(map(int.from_bytes, map(_FIRST4, raws), repeat("big")))
                self._gids = dict(zip(names, gids, strict=True))
                chunks = dict(zip(gids, map(_AFTER4, raws), strict=True))
            elif kind == K.DIGEST:
                ids = map(int.from_bytes, raws, repeat("big"))
                self._digests = dict(zip(names, ids, strict=True))
            elif kind == K.TAGS:
                self._tags = {n: set(K.decode_names(r)) for n, r in zip(names, raws, strict=True)}
            elif kind == K.VULN:
                self._vulns = {n: set(K.decode_names(r)) for n, r in zip(names, raws, strict=True)}
        top = max(self._digests.values(), default=-1) + 1
        self._digest_by_id = [None] * top
        for name, iid in self._digests.items():
            self._digest_by_id[iid] = name.partition(K.SEP)[2]
        self._free = BitMap(i for i, d in enumerate(self._digest_by_id) if d is None)
        top = max(self._gids.values(), default=-1) + 1
        self._pk_by_gid = [None] * top
        self._gchunks = [b""] * top
        for pk, gid in self._gids.items():
            self._pk_by_gid[gid] = pk
            self._gchunks[gid] = chunks[gid]
        self._free_gids = BitMap(i for i, p in enumerate(self._pk_by_gid) if p is None)

    def _scan_names(self) -> list[tuple[bytes, list[str], list[bytes]]]:
        """The names column family as (kind, names, values), read in bulk: ~300,000
        entries for a 50,000-image catalog, so per-item Python is what opening costs."""
        assert self.source is not None
        cfs = getattr(self.source, "_cfs", None)  # RocksStore: iterate in C, not a generator
        pairs = list(cfs[K.NAMES_CF].items() if cfs is not None else self.source.scan(K.NAMES_CF))
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
        """Load known, non-resident products with one multi-get of all their chunks."""
        assert self.source is not None
        gids, packed = self._gids, self._gchunks
        keys: list[bytes] = []
        spans: list[tuple[str, int, int]] = []
        for pk in pks:
            gid = gids[pk]
            raw, pre = packed[gid], gid.to_bytes(4, "big")
            spans.append((pk, gid, len(keys)))
            keys.extend(pre + raw[i : i + 2] for i in range(0, len(raw), 2))
        vals = self._get_many(K.GROUPS_CF, keys)
        if None in vals:
            k = keys[vals.index(None)]
            raise LookupError(f"impact chunk {k.hex()} is missing from the store")
        out = []
        ends = [s[2] for s in spans[1:]] + [len(keys)]
        for (pk, gid, lo), hi in zip(spans, ends, strict=True):
            g = Group.load(
                gid, pk, [(int.from_bytes(keys[n][4:], "big"), vals[n]) for n in range(lo, hi)]
            )
            self._admit(g)
            out.append(g)
        return out  # type: ignore[return-value]

    def _get_many(self, cf: str, keys: list[bytes]) -> list[bytes | None]:
        """Committed values of many keys. RocksDB's multi-get costs ~5 µs a key against
        ~8-18 µs for single gets: it is what makes the first query after a restart fast.
        (The Store contract has no multi-get yet; RocksStore's column family is used.)"""
        assert self.source is not None
        cfs = getattr(self.source, "_cfs", None)
        if cfs is not None and len(keys) > 1:
            return cfs[cf].get(keys)  # type: ignore[no-any-return]
        get = self.source.get
        return [get(cf, k) for k in keys]

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
            if len(bm) * 100 >= len(self):
                self._popular.add(g.pk)
            else:
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
        self._gids[pk] = gid
        self._dirty_names.add(K.PRODUCT + pk.encode())
        g = Group(gid, pk)
        self._admit(g)
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
            self._opened.add((g.pk, chunk))
            pk = g.pk
            self._flat_c.setdefault(chunk, {}).update({pk + s: m for s, m in opened[0].items()})
            if opened[1]:
                fu = self._flat_u.setdefault(chunk, {})
                fu.update({pk + s: m for s, m in opened[1].items()})
        return opened

    def _close(self, g: Group, chunk: int) -> None:
        opened = g.open.pop(chunk, None)
        self._opened.discard((g.pk, chunk))
        if opened is None:
            return
        g.open_members -= len(opened[0]) + len(opened[1])
        pk = g.pk
        for flat, members in ((self._flat_c, opened[0]), (self._flat_u, opened[1])):
            fm = flat.get(chunk)
            if fm is None:
                continue
            for s in members:
                fm.pop(pk + s, None)

    def _settle(self) -> None:
        """Mark the product bitmaps of groups changed since the last call as stale (they
        are rebuilt from the members when next asked for): before queries and strips."""
        if not self._pending:
            return
        groups, by_gid = self._groups, self._pk_by_gid
        for gids in self._pending.values():
            for gid in gids:
                g = groups.get(by_gid[gid])  # type: ignore[arg-type]
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
                self._owners.pop(key, None)

    @property
    def cached_bytes(self) -> int:
        """Estimated bytes of cached groups and owners (what ``max_bytes`` bounds)."""
        if self._lru is not None:
            return self._lru.total
        return sum(g.size() for g in self._groups.values()) + sum(
            map(bitmap_bytes, self._owners.values())
        )
