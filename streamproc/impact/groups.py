"""A product group in memory: one product key, all its exact purls, chunked by image id.

A *member* is one exact purl's ids in one chunk. A group holds its chunks as their stored
bytes only (msgpack ``[contains small, contains big, used small, used big]``: suffix -> ids,
a plain list ``[gid, id, ...]`` up to ``BIG`` ids, roaring bytes beyond): what the fold adds
is kept apart, columnar, in the open chunk (:mod:`streamproc.impact.columns`), and merged
into these bytes before anything reads them (:mod:`streamproc.impact.pending`). So a group
costs its bytes and its object, however many members its chunk being filled holds.

The product's contains/used bitmaps (``cp``/``up``) are rebuilt from the stored chunks when a
query needs them after a change. On this class of machine every random memory access
costs ~1 µs, so per purl and per touched chunk, the fewer objects touched the better.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from operator import attrgetter, itemgetter

from pyroaring import BitMap

from streamproc.impact import keys as K

__all__ = ["Group", "bitmap_bytes", "bulk_union", "stored_sizes", "stored_union"]

_OVERHEAD = 400
"""A group's bytes besides its chunks' (measured with tracemalloc: the object, its chunks
dict, the bytes objects' headers, its slots in the group map and the LRU)."""
_AFTER1 = itemgetter(slice(1, None))
_deserialize = BitMap.deserialize
_CHUNKS = attrgetter("chunks")


class Group:
    __slots__ = ("chunks", "cp", "gid", "pk", "raw_bytes", "up")

    def __init__(self, gid: int, pk: str) -> None:
        self.gid = gid
        self.pk = pk
        self.cp: BitMap | None = None
        self.up: BitMap | None = None
        """Product bitmaps over all chunks; None until built, or once a change made them
        stale (each is built on its own: a product query needs only one of them)."""
        self.chunks: dict[int, bytes] = {}
        self.raw_bytes = 0

    @classmethod
    def load(cls, gid: int, pk: str, items: Iterable[tuple[int, bytes]]) -> Group:
        """A group from its stored chunks; the product bitmaps are built when asked for."""
        g = cls.__new__(cls)
        g.gid, g.pk, g.cp, g.up = gid, pk, None, None
        g.chunks = dict(items)
        g.raw_bytes = sum(map(len, g.chunks.values()))
        return g

    @classmethod
    def single(cls, gid: int, pk: str, chunk: int, raw: bytes) -> Group:
        """``load`` for the common one-chunk group (a cold query builds thousands)."""
        g = cls.__new__(cls)
        g.gid, g.pk, g.cp, g.up = gid, pk, None, None
        g.chunks = {chunk: raw}
        g.raw_bytes = len(raw)
        return g

    def set_chunk(self, chunk: int, raw: bytes | None) -> None:
        """Record a chunk's new stored form (None: the chunk is gone). Whether the set of
        chunks changed is told at flush, by comparing the product directory entry."""
        old = self.chunks.pop(chunk, None)
        if old is not None:
            self.raw_bytes -= len(old)
        if raw is not None:
            self.chunks[chunk] = raw
            self.raw_bytes += len(raw)

    def products(self) -> tuple[BitMap, BitMap]:
        """(contains, used) of the product, rebuilt if stale."""
        return self.product(0), self.product(1)

    def product(self, side: int) -> BitMap:
        """Contains (0) or used (1) over all chunks, rebuilt from the stored chunks if
        stale (one side decoded, the other left as raw bytes)."""
        got = self.up if side else self.cp
        if got is not None:
            return got
        smalls: list[list[int]] = []
        bigs: list[BitMap] = []
        for raw in self.chunks.values():
            small, big = K.decode_side(raw, side)
            smalls.extend(small.values())
            bigs.extend(map(_deserialize, big.values()))
        bm = K.bitmap(chain.from_iterable(map(_AFTER1, smalls)))
        if bigs:
            bm.update(*bigs)
        if side:
            self.up = bm
        else:
            self.cp = bm
        return bm

    def chunk_numbers(self) -> list[int]:
        return sorted(self.chunks)

    def chunk_members(self, chunk: int) -> tuple[dict[str, BitMap], dict[str, BitMap]]:
        """Read-only view of one stored chunk: suffix -> ids."""
        raw = self.chunks.get(chunk)
        if raw is None:
            return {}, {}
        cmap, umap = K.chunk_members(raw)
        return (
            {s: K.stored_ids(v) for s, v in cmap.items()},
            {s: K.stored_ids(v) for s, v in umap.items()},
        )

    def exact(self, suffix: str, used: bool) -> BitMap | None:
        """Images holding exactly ``pk + suffix`` (or using it), None when none do."""
        parts = []
        for chunk in self.chunk_numbers():
            v = K.chunk_members(self.chunks[chunk])[used].get(suffix)
            if v is not None:
                parts.append(K.stored_ids(v))
        if not parts:
            return None
        return BitMap.union(*parts) if len(parts) > 1 else parts[0]

    def members(self) -> Iterator[tuple[str, BitMap, BitMap]]:
        """Every exact purl suffix with its contains and used bitmaps (diagnostics)."""
        acc: dict[str, list[list[BitMap]]] = {}
        for chunk in self.chunk_numbers():
            for side, m in enumerate(self.chunk_members(chunk)):
                for suffix, bm in m.items():
                    acc.setdefault(suffix, [[], []])[side].append(bm)
        for suffix in sorted(acc):
            c, u = acc[suffix]
            yield suffix, BitMap.union(K.bitmap(), *c), BitMap.union(K.bitmap(), *u)

    def size(self) -> int:
        """Estimated resident bytes, O(1) while no product bitmap is built: the object and
        its stored chunks, plus the product bitmaps once built (a query or warming builds
        them; during an ingest they are not). The members being added are charged to the
        open chunk (:data:`~streamproc.impact.columns.FLAT_ENTRY_BYTES`)."""
        n = _OVERHEAD + self.raw_bytes
        if self.cp is not None:
            n += bitmap_bytes(self.cp)
        if self.up is not None:
            n += bitmap_bytes(self.up)
        return n


def bulk_union(groups: Iterable[Group], side: int) -> BitMap:
    """The images of one side (0 contains, 1 used) of many groups' *stored* chunks, as one
    union decoded in bulk: no per-product bitmap, no Python work per product."""
    return stored_union(chain.from_iterable(map(dict.values, map(_CHUNKS, groups))), side)


def stored_union(raws: Iterable[bytes], side: int) -> BitMap:
    """The images of one side (0 contains, 1 used) of stored chunks, as one union decoded
    in bulk (what a cold query needs of the products it reads: no group, no bitmap per
    product)."""
    decoded = list(map(K.side_decoder(side).decode, raws))
    smalls = chain.from_iterable(map(dict.values, map(itemgetter(2 * side), decoded)))
    bm = K.bitmap(list(chain.from_iterable(map(_AFTER1, smalls))))
    bigs = chain.from_iterable(map(dict.values, map(itemgetter(2 * side + 1), decoded)))
    big = list(map(_deserialize, bigs))
    if big:
        bm.update(*big)
    return bm


def stored_sizes(raws: list[bytes]) -> list[int]:
    """``Group.size`` of fresh one-chunk groups of these stored chunks (C-level maps): what
    a chunk kept without its group is charged to the cache, so that building the group
    later changes nothing there."""
    return list(map(_OVERHEAD.__add__, map(len, raws)))


def bitmap_bytes(bm: BitMap) -> int:
    """Rough resident size of a BitMap: arrays of 2-byte ids, 8 KiB per dense container."""
    n = len(bm)
    if n <= 4096:
        return 150 + 2 * n
    return 150 + min(2 * n, 8200 * (1 + (bm.max() >> 16)))
