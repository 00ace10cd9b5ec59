"""The impact index's in-memory state and its access paths, shared by ingest, queries and
persistence (each a mixin over this class).

Resident (always whole in memory): the product directory (product key -> group id), image
ids by (tenant, digest), tenants' tag names and the vuln map. Cached (loaded from the
source on demand, evicted least-recently-used under ``max_bytes``): product groups and owner
bitmaps. Pinned (neither cached nor evictable): the groups with a part in the current
window, which the fold appends to. Image records are read from the source when an image is
re-indexed or removed.

``_flat_c[part][purl]`` / ``_flat_u[part][purl]`` point straight at the purl's member in
an open part (see :data:`~streamproc.impact.groups.Member`), so the fold resolves a whole
image's purls with one C-level ``map(dict.get, purls)`` and records it with one C-level
``map(list.append, ...)``. The fold never reads a product's older parts: a product it
touches for the first time in a window gets a lazy group (nothing read) whose new part
starts empty. When the window moves on, the parts of the window that ended are closed
(their decoded members freed) once they are written, and their groups become cacheable.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from itertools import chain, filterfalse
from operator import attrgetter, is_not
from typing import cast

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.cache import Lru
from streamproc.impact.groups import Group, Member, Opened, Parts, bitmap_bytes, stored_sizes
from streamproc.impact.records import ImageRecord, decode_record
from streamproc.state.store import Store

_CHUNKS = attrgetter("chunks")
_GID = attrgetter("gid")
_is_not_none = partial(is_not, None)


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
        self, source: Store | None = None, max_bytes: int | None = None, window: int = K.WINDOW
    ) -> None:
        """``window``: image events per window for a new state (a stored state keeps its
        own)."""
        if max_bytes is not None and source is None:
            raise ValueError("a memory bound needs a source to load evicted values back from")
        if window < 1:
            raise ValueError("a window holds at least one image event")
        self.source = source
        self.max_bytes = max_bytes
        self.window = window
        self._reset()

    def _reset(self) -> None:
        self._lru = Lru(self.max_bytes) if self.max_bytes is not None else None
        self._digests: dict[str, int] = {}
        self._digest_by_id: list[str | None] = []
        self._free = BitMap()
        self._records: dict[int, bytes] = {}
        self._gids: dict[str, int] = {}
        self._pk_by_gid: list[str | None] = []
        self._free_gids = BitMap()
        self._groups: dict[str, Group] = {}
        self._stored: dict[str, Parts] = {}
        """Products a query read cold, as their stored parts, not yet built into a
        :class:`Group`: the query unions their images straight from these bytes, and a
        group is built from them (no read) when anything needs one. Cached and evicted
        like groups (the same estimated size)."""
        self._events = 0
        """Image events folded (indexing or removal): the current part is
        ``_events // window``."""
        self._window_gids = BitMap()
        """Products with a part in the current window (their groups are pinned)."""
        self._closing: list[tuple[int, BitMap]] = []
        """Windows that ended in this batch: their parts are closed once written."""
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

    @property
    def _part(self) -> int:
        """The current window's part number."""
        return self._events // self.window

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
        """The product's group with all its parts, loaded from the source if need be; None
        if unknown."""
        g = self._groups.get(pk)
        if g is not None and g.loaded:
            return g
        if g is None and (pk not in self._gids or self.source is None):
            return None
        return self._load_groups([pk])[0]

    def _load_groups(self, pks: list[str]) -> list[Group]:
        """The complete groups of these known products (in no particular order): resident
        ones as they are, lazy ones completed, the others built from ``_stored`` where a
        query left their parts, or read."""
        groups = self._groups
        out = [g for pk in pks if (g := groups.get(pk)) is not None and g.loaded]
        lazy = [g for pk in pks if (g := groups.get(pk)) is not None and not g.loaded]
        if lazy:
            self._complete(lazy)
            out += lazy
        rest = [pk for pk in pks if pk not in groups]
        if rest and self._stored:
            out += self._unstash(rest)
            rest = [pk for pk in rest if pk not in groups]
        if rest:
            out += self._read_groups(list(map(self._gids.__getitem__, rest)))
        return out

    def _parts(self, gids: list[int]) -> list[Parts]:
        """The stored parts of these group ids (one prefix scan each, in key order), less
        what this batch deleted."""
        assert self.source is not None
        rows = self.source.scan_many(K.GROUPS_CF, list(map(K.u32, gids)))
        dead = set(self._dead) if self._dead else None
        return [
            [(K.part_of(k), v) for k, v in items if dead is None or k not in dead] for items in rows
        ]

    def _complete(self, lazy: list[Group]) -> None:
        """Read the stored parts of lazy groups (pinned by the fold, so not cached)."""
        if self.source is None:
            for g in lazy:
                g.loaded = True
            return
        lazy.sort(key=_GID)
        for g, items in zip(lazy, self._parts(list(map(_GID, lazy))), strict=True):
            g.complete(items)

    def _read_groups(self, gids: list[int]) -> list[Group]:
        """Build the groups of these known group ids (none in memory, none in ``_stored``)
        with one scan of all their parts (a cold load can be ~10,000 at once)."""
        assert self.source is not None
        gids = sorted(gids)
        pks: list[str] = list(map(self._pk_by_gid.__getitem__, gids))  # type: ignore[arg-type]  # a known product's gid maps back to its key
        got = list(map(Group.load, gids, pks, self._parts(gids)))
        self._groups.update(zip(pks, got, strict=True))
        if self._lru is not None:
            self._lru.set_many(pks, list(map(Group.size, got)))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)
        return got

    def _unstash(self, pks: Iterable[str]) -> list[Group]:
        """Build the groups of the products among ``pks`` that a query left in ``_stored``
        (no read; their cache entries stay as they are: a fresh group has the same
        estimated size)."""
        stored = self._stored
        hit = list(filter(stored.__contains__, pks))
        if not hit:
            return []
        gids = list(map(self._gids.__getitem__, hit))
        out = list(map(Group.load, gids, hit, map(stored.pop, hit)))
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
        """The stored parts of these known products (no group in memory, none in
        ``_stored``), for a query that unions their images in bulk: one scan in key order.
        They are kept as bytes in ``_stored`` (no :class:`Group`, no per-product Python
        work) and charged to the cache."""
        assert self.source is not None
        gids = sorted(gids)
        parts = self._parts(gids)
        pks = list(map(self._pk_by_gid.__getitem__, gids))
        self._stored.update(zip(pks, parts, strict=True))  # type: ignore[arg-type]  # a known product's gid maps back to its key
        if self._lru is not None:
            self._lru.set_many(pks, stored_sizes(parts))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)
        return [raw for items in parts for _, raw in items]

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
        if not g.loaded:
            self._complete([g])
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
        else:
            self._free_gids.remove(gid)
            self._pk_by_gid[gid] = pk
        self._gids[pk] = gid
        self._dirty_names.add(K.PRODUCT + pk.encode())
        g = self._groups[pk] = Group(gid, pk)  # pinned: the fold opens its current part
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
        if new and chunk == self._part:
            self._pin(g)
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

    def _pin(self, g: Group) -> None:
        """The fold opened the group's current part: out of the cache until it closes."""
        if self._lru is not None:
            self._lru.drop(g.pk)

    def _evict(self) -> None:
        """Drop least recently used groups and owners; never while a batch is pending."""
        if self._lru is None or self._has_dirty():
            return
        part = self._part
        for key in self._lru.victims():
            if isinstance(key, str):
                g = self._groups.get(key)
                if g is None:
                    self._stored.pop(key, None)
                elif part not in g.open:  # a pinned group is not in the cache (defensive)
                    self._drop_group(g)
            else:
                self._owners.pop(cast(bytes, key), None)  # an owner key: not a product's str

    @property
    def cached_bytes(self) -> int:
        """Estimated bytes of cached groups and owners (what ``max_bytes`` bounds)."""
        if self._lru is not None:
            return self._lru.total
        return (
            sum(g.size() for g in self._groups.values())
            + sum(stored_sizes(list(self._stored.values())))
            + sum(map(bitmap_bytes, self._owners.values()))
        )
