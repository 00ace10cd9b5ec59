"""Getting changes out (per batch) and committed state back in (at opening, lazily, or
by warming).

``restore()`` reads the resident maps (the product directory, image ids, tags, vulns) in
bulk when the index is opened. After a batch, ``dirty_writes()`` returns every (column
family -> key -> value-or-None) the batch changed, built in bulk (one msgspec call per
touched product chunk, C-level maps for the rest); the projection hands them to the
batch's transaction, and ``clear_dirty()`` then trims the cache. Warming loads product
groups in group-id order (the order products were first seen: the popular ones first) in
small slices, from committed bytes only, until everything or the bound is in.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from functools import partial
from itertools import islice, repeat
from operator import attrgetter, itemgetter, setitem
from typing import Any

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.columns import consume
from streamproc.impact.groups import Group, bitmap_bytes
from streamproc.impact.pending import Pending, delta_key
from streamproc.sbom.image import IndexedImage

Item = tuple[str, bytes, bytes | None]
_KEY = itemgetter(0)
_VALUE = itemgetter(1)
_FIRST4 = itemgetter(slice(0, 4))
_AFTER1 = itemgetter(slice(1, None))
_THIRD = itemgetter(2)
_U32 = partial(int.from_bytes, byteorder="big")
_PK = attrgetter("pk")
Writes = dict[str, dict[bytes, bytes | None]]


class Persistence(Pending):
    # -- restoring -------------------------------------------------------------------------
    def restore(self) -> None:
        """Load the resident maps from the source (at start, and after a discarded batch)."""
        self._reset()
        if self.source is None:
            return
        gids: list[int] = []
        pks: list[str] = []
        dirs: list[bytes] = []
        ids: list[int] = []
        scoped: list[str] = []
        pending: list[tuple[int, bytes]] = []
        for kind, names, raws in self._scan_names():
            if kind == K.PRODUCT:
                pks, dirs = names, raws
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
            elif kind == K.PENDING:
                pending = list(zip(map(_U32, names), raws, strict=True))
        # id -> name tables, filled by C-level maps (hundreds of thousands of entries)
        self._digest_by_id = [None] * (max(ids, default=-1) + 1)
        digests = map(_THIRD, map(str.partition, scoped, repeat(K.SEP)))
        consume(map(setitem, repeat(self._digest_by_id), ids, digests))
        self._free = BitMap(range(len(self._digest_by_id))) - BitMap(ids)
        top = max(gids, default=-1) + 1
        self._pk_by_gid = [None] * top
        self._gdir = [b""] * top
        consume(map(setitem, repeat(self._pk_by_gid), gids, pks))
        consume(map(setitem, repeat(self._gdir), gids, dirs))
        self._free_gids = BitMap(range(top)) - BitMap(gids)
        if pending:
            self._restore_pending(pending)

    def _scan_names(self) -> list[tuple[bytes, list[Any], list[bytes]]]:
        """The names column family as (kind, names, values), read in bulk: ~300,000
        entries for a 50,000-image catalog, so per-item Python is what opening costs.
        Names are str, but for pending entries: the image id's 4 bytes."""
        assert self.source is not None
        pairs = list(self.source.scan(K.NAMES_CF))
        keys = list(map(_KEY, pairs))
        out = []
        for kind in (K.DIGEST, K.PRODUCT, K.PENDING, K.TAGS, K.VULN):
            lo = bisect_left(keys, kind)
            hi = bisect_left(keys, bytes([kind[0] + 1]), lo)
            raw_names = map(_AFTER1, keys[lo:hi])
            names = list(raw_names if kind == K.PENDING else map(bytes.decode, raw_names))
            out.append((kind, names, list(map(_VALUE, pairs[lo:hi]))))
        return out

    # -- batches ---------------------------------------------------------------------------
    def dirty_writes(self, budget_s: float | None = None) -> Writes:
        """Per column family, key -> serialized value (None = delete), changed since the
        last ``clear_dirty``. Merges pending ids into their chunks first: all of them
        (``budget_s`` None), or for about ``budget_s`` (:mod:`streamproc.impact.pending`);
        the values are then the groups' chunks as they are."""
        if budget_s is None:
            self._settle()
        else:
            self._merge_budgeted(budget_s)
        groups_cf: dict[bytes, bytes | None] = dict.fromkeys(self._dead)
        names: dict[bytes, bytes | None] = {}
        by_gid, groups, gdir = self._pk_by_gid, self._groups, self._gdir
        for chunk, gids in self._dirty_chunks.items():
            suffix = chunk.to_bytes(2, "big")
            for gid in gids:
                g = groups.get(by_gid[gid])  # type: ignore[arg-type]  # a dirty gid is live, so its product key is not None
                if g is None or g.gid != gid:
                    continue  # deleted (its chunks are in _dead)
                gid4 = gid.to_bytes(4, "big")
                groups_cf[gid4 + suffix] = g.chunks.get(chunk)
                value = gid4 + K.pack_chunks(g.chunks) if g.chunks else gid4
                if value != gdir[gid]:  # the set of its chunks changed: a new directory entry
                    gdir[gid] = value
                    names[K.PRODUCT + g.pk.encode()] = value
        owners = self._owners
        dirty_names = self._dirty_names.difference(names)
        names.update(zip(dirty_names, map(self._name_value, dirty_names), strict=True))
        names.update(zip(map(delta_key, self._deltas), self._deltas.values(), strict=True))
        records = self._dirty_records
        out: Writes = {
            K.GROUPS_CF: groups_cf,
            K.OWNERS_CF: {
                key: K.encode_bitmap(bm) if (bm := owners.get(key)) else None
                for key in self._dirty_owners
            },
            K.IMAGES_CF: dict(
                zip(map(K.u32, records), map(self._records.get, records), strict=True)
            ),
            K.NAMES_CF: names,
        }
        return {cf: items for cf, items in out.items() if items}

    def dirty_items(self) -> Iterator[Item]:
        """``dirty_writes`` as (column family, key, value or None) items."""
        for cf, items in self.dirty_writes().items():
            yield from zip(repeat(cf), items.keys(), items.values())

    def _name_value(self, key: bytes) -> bytes | None:
        kind, name = key[:1], key[1:].decode()
        if kind == K.PRODUCT:
            gid = self._gids.get(name)
            return None if gid is None else self._gdir[gid]
        if kind == K.DIGEST:
            iid = self._digests.get(name)
            return None if iid is None else K.u32(iid)
        values = (self._tags if kind == K.TAGS else self._vulns).get(name)
        return K.encode_names(values) if values else None

    def dirty_keys(self) -> set[tuple[str, bytes]]:
        """What ``dirty_writes`` would write (without encoding anything)."""
        out = {(K.GROUPS_CF, k) for k in self._dead}
        out.update(
            (K.GROUPS_CF, K.group_key(gid, chunk))
            for chunk, gids in self._dirty_chunks.items()
            for gid in gids
        )
        out.update((K.OWNERS_CF, k) for k in self._dirty_owners)
        out.update((K.IMAGES_CF, K.u32(i)) for i in self._dirty_records)
        out.update((K.NAMES_CF, k) for k in self._dirty_names)
        out.update((K.NAMES_CF, delta_key(i)) for i in self._deltas)
        return out

    def clear_dirty(self) -> None:
        """Everything from ``dirty_writes`` is durable (no mutation in between)."""
        if self._lru is not None:
            for key in self._dirty_owners:
                bm = self._owners.get(key)
                if bm is not None:
                    self._lru.set(key, bitmap_bytes(bm))
        if self.source is not None:
            self._records.clear()
        self._dirty_chunks.clear()
        self._dead.clear()
        self._dirty_owners.clear()
        self._dirty_records.clear()
        self._dirty_names.clear()
        self._deltas.clear()
        self._close_finished()
        self._evict()

    def _close_finished(self) -> None:
        """Drop the open state of chunks no new image goes to (below the lowest free id's):
        their checked purls are only a cache (an image of theirs re-indexed or removed
        builds it again), and their pending ids are kept by group."""
        current = self._next_id() >> K.CHUNK_BITS
        for c in [c for c in self._open if c != current]:
            oc = self._open.pop(c)
            if oc.pairs:  # pending over batches: by group from now on
                self._take_chunk(c, oc)

    # -- warming ---------------------------------------------------------------------------
    @property
    def warm_progress(self) -> tuple[int, int]:
        """(product groups resident, product groups known)."""
        return len(self._groups) + len(self._stored), len(self._gids)

    def warm_step(self, budget: int = 2000) -> bool:
        """Load up to ``budget`` groups (or owner bitmaps) that are not resident; True when
        warming is finished (everything loaded, or the memory bound reached)."""
        source = self.source
        if source is None or (self._lru is not None and self._lru.full()):
            self._warm_cursor = None
        if source is None or self._warm_cursor is None:
            return True
        if self._warm_owners is not None:
            rows = list(islice(source.scan(K.OWNERS_CF, start=self._warm_owners), budget))
            for key, raw in rows:
                if key not in self._owners and key not in self._dirty_owners:
                    bm = self._owners[key] = BitMap.deserialize(raw)
                    if self._lru is not None:
                        self._lru.set(key, bitmap_bytes(bm))
            self._warm_owners = rows[-1][0] + b"\x00" if len(rows) == budget else None
            if self._lru is not None and self._lru.full():
                self._warm_cursor = None
            self._evict()
            return self._warm_cursor is None
        groups: dict[int, list[tuple[int, bytes]]] = {}
        last: bytes | None = None
        for key, raw in source.scan(K.GROUPS_CF, start=self._warm_cursor):
            gid = int.from_bytes(key[:4], "big")
            if gid not in groups and len(groups) == budget:
                last = key[:4]
                break
            groups.setdefault(gid, []).append((int.from_bytes(key[4:6], "big"), raw))
        for gid, items in groups.items():
            pk = self._pk_by_gid[gid] if gid < len(self._pk_by_gid) else None
            if pk is not None and pk not in self._groups:
                self._stored.pop(pk, None)  # built into a group here, with its bitmaps
                g = Group.load(gid, pk, items)
                self._products(g)
                self._admit(g)
        self._warm_cursor = last
        if self._lru is not None and self._lru.full():
            self._warm_cursor = None
        self._evict()
        return self._warm_cursor is None

    # -- diagnostics -----------------------------------------------------------------------
    def iter_bitmaps(self) -> Iterator[tuple[bytes, BitMap]]:
        """Every non-empty logical bitmap (``c:p:<key>`` ...) by name; loads what it must."""
        self._settle()
        for pk in sorted(self._gids):
            g = self._group(pk)
            assert g is not None
            cp, up = self._products(g)
            if cp:
                yield K.storage_key(K.CONTAINS_PRODUCT, pk), cp
            if up:
                yield K.storage_key(K.USED_PRODUCT, pk), up
            for suffix, c, u in g.members():
                if c:
                    yield K.storage_key(K.CONTAINS_PURL, pk + suffix), c
                if u:
                    yield K.storage_key(K.USED_PURL, pk + suffix), u
        keys = set(self._owners)
        if self.source is not None:
            keys.update(k for k, _ in self.source.scan(K.OWNERS_CF))
        for key in sorted(keys):
            bm = self._owner(key)
            if bm:
                yield K.LOGICAL_OWNER + key[:1] + b":" + key[1:], bm

    def image(self, tenant: str, digest: str) -> IndexedImage | None:
        """The image as indexed, rebuilt from its record and its groups' chunk."""
        self._settle()
        iid = self.image_id(tenant, digest)
        if iid is None:
            return None
        rec = self._record(iid)
        chunk = iid >> K.CHUNK_BITS
        rows: dict[str, tuple[str, bool]] = {}
        for gid in rec.gids:
            g = self._group(self._pk_by_gid[gid])  # type: ignore[arg-type]  # a record's gids are live, so their product keys are not None
            assert g is not None
            cmap, umap = g.chunk_members(chunk)
            for suffix, ids in cmap.items():
                if iid in ids:
                    u = umap.get(suffix)
                    rows[g.pk + suffix] = (g.pk, u is not None and iid in u)
        order = sorted(rows)
        return IndexedImage(
            tenant=rec.tenant,
            digest=rec.digest,
            registry=rec.registry,
            repo=rec.repo,
            namespace=rec.namespace,
            tags=rec.tags,
            labels=rec.labels,
            purls=order,
            product_keys=[rows[p][0] for p in order],
            used=[rows[p][1] for p in order],
            usage_known=rec.usage_known,
        )
