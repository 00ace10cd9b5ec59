"""A product group in memory: one product key, all its exact purls, chunked by image id.

A *member* is one exact purl's ids in one chunk. While it holds at most ``BIG`` ids it is a
plain list ``[gid, id, id, ...]`` (sorted, unique) that is also its stored form: the fold
only ever appends an id to it (one ``list.append``), and a touched chunk's small members
are encoded by one msgspec call, with no Python work per purl. A larger member is
``[gid, BitMap, pending ids...]``: appends still go to the list, and ``encode_chunk`` folds
the pending ids into the bitmap. An open chunk keeps four maps, suffix -> member:
contains-small, contains-big, used-small, used-big (index ``2 * used`` and ``2 * used + 1``).

The product's contains/used bitmaps (``cp``/``up``) are rebuilt from the members when a
query needs them after a change. On this class of machine every random memory access
costs ~1 µs, so per purl and per touched chunk, the fewer objects touched the better.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, cast

from pyroaring import BitMap

from streamproc.impact import keys as K

__all__ = [
    "Group",
    "Member",
    "Opened",
    "bitmap_bytes",
    "bulk_union",
    "find",
    "member_bitmap",
    "stored_sizes",
    "stored_union",
]

Member = list[Any]
Members = dict[str, Member]
Opened = list[Members]
"""[contains small, contains big, used small, used big]: exact-purl suffix -> member."""

_OVERHEAD = 600
_PER_OPEN_MEMBER = 200
_BIGLEN = K.BIG + 1
_AFTER1 = itemgetter(slice(1, None))
_deserialize = BitMap.deserialize
_CHUNKS = attrgetter("chunks")


def member_bitmap(m: Member) -> BitMap:
    """The member's ids, pending ones included (a fresh bitmap)."""
    if len(m) > 1 and type(m[1]) is BitMap:
        bm = m[1].copy()
        if len(m) > 2:
            bm.update(m[2:])
        return bm
    return K.bitmap(m[1:])


def member_empty(m: Member) -> bool:
    return len(m) == 1 or (len(m) == 2 and type(m[1]) is BitMap and not m[1])


def find(opened: Opened, used: int, suffix: str) -> Member | None:
    """The member of ``suffix`` on one side of an open chunk (small or big)."""
    return opened[2 * used].get(suffix) or opened[2 * used + 1].get(suffix)


def _promote(small: Members, big: Members) -> None:
    """Move members grown beyond BIG ids from the small map to the big one (in place: the
    fold's flat maps keep pointing at the same lists)."""
    for s in [s for s, m in small.items() if len(m) > _BIGLEN]:
        m = small.pop(s)
        bm = K.bitmap(m[1:])
        del m[1:]
        m.append(bm)
        big[s] = m


def _encode_big(small: Members, big: Members) -> dict[str, bytes]:
    """Stored form of the big members; ones shrunk to BIG ids or fewer move back to the
    small map (so a member's stored form depends only on its ids)."""
    out: dict[str, bytes] = {}
    for s, m in list(big.items()):
        bm = m[1]
        if len(m) > 2:
            bm.update(m[2:])
            del m[2:]
        if len(bm) > K.BIG:
            out[s] = bm.serialize()
            continue
        del big[s]
        if bm:
            m[1:] = bm
            small[s] = m
    return out


class Group:
    __slots__ = (
        "chunk_set_changed",
        "chunks",
        "cp",
        "gid",
        "open",
        "open_members",
        "pk",
        "raw_bytes",
        "up",
    )

    def __init__(self, gid: int, pk: str) -> None:
        self.gid = gid
        self.pk = pk
        self.cp: BitMap | None = None
        self.up: BitMap | None = None
        """Product bitmaps over all chunks; None until built, or once a change made them
        stale (each is built on its own: a product query needs only one of them)."""
        self.chunks: dict[int, bytes] = {}
        self.open: dict[int, Opened] = {}
        self.raw_bytes = 0
        self.open_members = 0

    @classmethod
    def load(cls, gid: int, pk: str, items: Iterable[tuple[int, bytes]]) -> Group:
        """A group from its stored chunks; the product bitmaps are built when asked for."""
        g = cls.__new__(cls)
        g.gid, g.pk, g.cp, g.up, g.open, g.open_members = gid, pk, None, None, {}, 0
        g.chunks = dict(items)
        g.raw_bytes = sum(map(len, g.chunks.values()))
        return g

    @classmethod
    def single(cls, gid: int, pk: str, chunk: int, raw: bytes) -> Group:
        """``load`` for the common one-chunk group (a cold query builds thousands)."""
        g = cls.__new__(cls)
        g.gid, g.pk, g.cp, g.up, g.open, g.open_members = gid, pk, None, None, {}, 0
        g.chunks = {chunk: raw}
        g.raw_bytes = len(raw)
        return g

    def set_chunk(self, chunk: int, raw: bytes | None) -> bool:
        """Record a chunk's new stored form (None: the chunk is gone); True when the set
        of the group's chunks changed (the product directory entry must be rewritten)."""
        old = self.chunks.pop(chunk, None)
        if old is not None:
            self.raw_bytes -= len(old)
        if raw is not None:
            self.chunks[chunk] = raw
            self.raw_bytes += len(raw)
        return (old is None) != (raw is None)

    def products(self) -> tuple[BitMap, BitMap]:
        """(contains, used) of the product, rebuilt from the members if stale."""
        return self.product(0), self.product(1)

    def product(self, side: int) -> BitMap:
        """Contains (0) or used (1) over all chunks, rebuilt from the members if stale."""
        got = self.up if side else self.cp
        if got is not None:
            return got
        if not self.open and len(self.chunks) == 1:  # a cold product: decode one side only
            (raw,) = self.chunks.values()
            small, big = K.decode_side(raw, side)
            bm = K.bitmap(chain.from_iterable(map(_AFTER1, small.values())))
            if big:
                bm.update(*map(_deserialize, big.values()))
            if side:
                self.up = bm
            else:
                self.cp = bm
            return bm
        smalls: list[Member] = []
        bigs: list[BitMap] = []
        pending: list[int] = []
        for chunk in self.chunk_numbers():
            opened = self.open.get(chunk)
            if opened is not None:
                smalls.extend(opened[2 * side].values())
                for m in opened[2 * side + 1].values():
                    bigs.append(m[1])
                    pending += m[2:]
            else:
                stored = K.decode_chunk(self.chunks[chunk])
                small = cast(dict[str, list[int]], stored[2 * side])  # even: small members
                big = cast(dict[str, bytes], stored[2 * side + 1])  # odd: serialized bitmaps
                smalls.extend(small.values())
                bigs.extend(map(_deserialize, big.values()))
        bm = K.bitmap(chain.from_iterable(map(_AFTER1, smalls)))
        if pending:
            bm.update(pending)
        if bigs:
            bm.update(*bigs)
        if side:
            self.up = bm
        else:
            self.cp = bm
        return bm

    def open_chunk(self, chunk: int) -> tuple[Opened, bool]:
        """The chunk's mutable members, and whether this call decoded them."""
        got = self.open.get(chunk)
        if got is not None:
            return got, False
        raw = self.chunks.get(chunk)
        if raw is None:
            opened: Opened = [{}, {}, {}, {}]
        else:
            cs, cb, us, ub = K.decode_chunk(raw)
            gid = self.gid
            opened = [
                cs,
                {s: [gid, _deserialize(v)] for s, v in cb.items()},
                us,
                {s: [gid, _deserialize(v)] for s, v in ub.items()},
            ]
        self.open[chunk] = opened
        self.open_members += sum(map(len, opened))
        return opened, True

    def encode_chunk(self, chunk: int) -> bytes | None:
        """Stored form of an open chunk (None once empty); normalises members in place.
        Small members must be sorted, unique and non-empty (the fold keeps them so)."""
        cs, cb, us, ub = self.open[chunk]
        if cs and max(map(len, cs.values())) > _BIGLEN:
            _promote(cs, cb)
        if us and cb and max(map(len, us.values())) > _BIGLEN:  # used <= contains
            _promote(us, ub)
        cbo = _encode_big(cs, cb) if cb else {}
        ubo = _encode_big(us, ub) if ub else {}
        if not cs and not cbo:
            return None
        return K.encode_chunk(cs, cbo, us, ubo)

    def store_chunk(self, chunk: int) -> bytes | None:
        """``encode_chunk`` and ``set_chunk`` in one call (the flush does this ~100,000
        times a batch); afterwards ``chunk_set_changed`` says whether the set of the
        group's chunks changed."""
        raw = self.encode_chunk(chunk)
        chunks = self.chunks
        old = chunks.pop(chunk, None)
        if old is not None:
            self.raw_bytes -= len(old)
        if raw is not None:
            chunks[chunk] = raw
            self.raw_bytes += len(raw)
        self.chunk_set_changed = (old is None) != (raw is None)
        return raw

    def chunk_numbers(self) -> list[int]:
        if not self.open:
            return sorted(self.chunks)
        return sorted(self.chunks.keys() | self.open.keys())

    def chunk_members(self, chunk: int) -> tuple[dict[str, BitMap], dict[str, BitMap]]:
        """Read-only view of one chunk (open or stored): suffix -> ids."""
        got = self.open.get(chunk)
        if got is not None:
            return tuple(  # type: ignore[return-value]  # the open chunk holds four maps of this shape
                {
                    s: member_bitmap(m)
                    for s, m in chain(got[2 * side].items(), got[2 * side + 1].items())
                    if not member_empty(m)
                }
                for side in (0, 1)
            )
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
            opened = self.open.get(chunk)
            if opened is not None:
                m = find(opened, used, suffix)
                if m is not None and not member_empty(m):
                    parts.append(member_bitmap(m))
            else:
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
        """Estimated resident bytes, O(1): the stored chunks, about as much again for the
        product bitmaps rebuilt from them, and the decoded members of open chunks."""
        return _OVERHEAD + 2 * self.raw_bytes + _PER_OPEN_MEMBER * self.open_members


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
    return list(map(_OVERHEAD.__add__, map((2).__mul__, map(len, raws))))


def bitmap_bytes(bm: BitMap) -> int:
    """Rough resident size of a BitMap: arrays of 2-byte ids, 8 KiB per dense container."""
    n = len(bm)
    if n <= 4096:
        return 150 + 2 * n
    return 150 + min(2 * n, 8200 * (1 + (bm.max() >> 16)))
