"""A product group in memory: one product key, all its exact purls, chunked by image id.

A *member* is one exact purl's ids in one chunk, as a plain list that is also its stored
form: ``[gid, id, id, ...]`` (sorted, unique) while small, ``[gid, BitMap, pending...]``
once it holds more than ``SMALL`` ids. The fold only ever appends an id to a member (one
``list.append``); a chunk is encoded by msgspec straight from its members, and the
product's contains/used bitmaps (``cp``/``up``) are rebuilt from the members when a query
needs them after a change. On this class of machine every random memory access costs
~1 µs, so per purl and per touched chunk, the fewer objects touched the better.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyroaring import BitMap

from streamproc.impact import keys as K

__all__ = ["Group", "Member", "Opened", "bitmap_bytes", "member_bitmap"]

Member = list[Any]
Members = dict[str, Member]
Opened = tuple[Members, Members]
"""(contains, used): exact-purl suffix -> member."""

_OVERHEAD = 600
_PER_OPEN_MEMBER = 160
_BIG = K.SMALL + 1


def member_bitmap(m: Member) -> BitMap:
    """The member's ids, pending ones included (a fresh bitmap)."""
    if len(m) > 1 and type(m[1]) is BitMap:
        return m[1] | BitMap(m[2:]) if len(m) > 2 else m[1].copy()
    return BitMap(m[1:])


def member_empty(m: Member) -> bool:
    return len(m) == 1 or (len(m) == 2 and type(m[1]) is BitMap and not m[1])


def _canonical(m: Member) -> K.Ids | None:
    """Stored form of a member, normalising it in place (None when empty)."""
    n = len(m)
    if n > 1 and type(m[1]) is BitMap:
        bm = m[1]
        if n > 2:
            bm.update(m[2:])
            del m[2:]
        if len(bm) > K.SMALL:
            bm.run_optimize()
            return bm.serialize()
        m[1:] = sorted(bm)
        return m if len(m) > 1 else None
    if n > _BIG:
        bm = BitMap(m[1:])
        del m[1:]
        m.append(bm)
        bm.run_optimize()
        return bm.serialize()
    return m if n > 1 else None


class Group:
    __slots__ = ("chunks", "cp", "gid", "open", "open_members", "pk", "raw_bytes", "up")

    def __init__(self, gid: int, pk: str) -> None:
        self.gid = gid
        self.pk = pk
        self.cp: BitMap | None = BitMap()
        self.up: BitMap | None = BitMap()
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

    def set_chunk(self, chunk: int, raw: bytes | None) -> None:
        """Record a chunk's new stored form (None: the chunk is gone)."""
        old = self.chunks.pop(chunk, None)
        if old is not None:
            self.raw_bytes -= len(old)
        if raw is not None:
            self.chunks[chunk] = raw
            self.raw_bytes += len(raw)

    def products(self) -> tuple[BitMap, BitMap]:
        """(contains, used) of the product, rebuilt from the members if stale."""
        return self.product(0), self.product(1)

    def product(self, side: int) -> BitMap:
        """Contains (0) or used (1) over all chunks, rebuilt from the members if stale."""
        got = self.up if side else self.cp
        if got is not None:
            return got
        small: list[int] = []
        big: list[BitMap] = []
        for raw in self.chunks.values() if not self.open else ():  # all stored (cold load)
            for v in K.decode_chunk(raw)[side].values():
                if type(v) is bytes:
                    big.append(BitMap.deserialize(v))
                else:
                    small += v[1:]
        for chunk in self.chunk_numbers() if self.open else ():
            opened = self.open.get(chunk)
            if opened is not None:
                for m in opened[side].values():
                    if len(m) > 1 and type(m[1]) is BitMap:
                        big.append(m[1])
                        small += m[2:]
                    else:
                        small += m[1:]
            else:
                for v in K.decode_chunk(self.chunks[chunk])[side].values():
                    if type(v) is bytes:
                        big.append(BitMap.deserialize(v))
                    else:
                        small += v[1:]
        bm = BitMap(small)
        if big:
            bm = BitMap.union(bm, *big)
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
            opened: Opened = ({}, {})
        else:
            gid = self.gid
            opened = tuple(  # type: ignore[assignment]
                {s: ([gid, BitMap.deserialize(v)] if type(v) is bytes else v) for s, v in m.items()}
                for m in K.decode_chunk(raw)
            )
        self.open[chunk] = opened
        self.open_members += len(opened[0]) + len(opened[1])
        return opened, True

    def encode_chunk(self, chunk: int) -> bytes | None:
        """Stored form of an open chunk (None once empty); normalises members in place."""
        enc: list[dict[str, K.Ids]] = [{}, {}]
        for members, out in zip(self.open[chunk], enc, strict=True):
            for suffix, m in members.items():
                v = _canonical(m)
                if v is not None:
                    out[suffix] = v
        return K.encode_chunk(enc[0], enc[1]) if enc[0] else None

    def chunk_numbers(self) -> list[int]:
        return sorted(self.chunks.keys() | self.open.keys())

    def chunk_members(self, chunk: int) -> tuple[dict[str, BitMap], dict[str, BitMap]]:
        """Read-only view of one chunk (open or stored): suffix -> ids."""
        got = self.open.get(chunk)
        if got is not None:
            return (
                {s: member_bitmap(m) for s, m in got[0].items() if not member_empty(m)},
                {s: member_bitmap(m) for s, m in got[1].items() if not member_empty(m)},
            )
        raw = self.chunks.get(chunk)
        if raw is None:
            return {}, {}
        cmap, umap = K.decode_chunk(raw)
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
                m = opened[used].get(suffix)
                if m is not None and not member_empty(m):
                    parts.append(member_bitmap(m))
            else:
                v = K.decode_chunk(self.chunks[chunk])[used].get(suffix)
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
            yield suffix, BitMap.union(BitMap(), *c), BitMap.union(BitMap(), *u)

    def size(self) -> int:
        """Estimated resident bytes, O(1): the stored chunks, about as much again for the
        product bitmaps rebuilt from them, and the decoded members of open chunks."""
        return _OVERHEAD + 2 * self.raw_bytes + _PER_OPEN_MEMBER * self.open_members


def bitmap_bytes(bm: BitMap) -> int:
    """Rough resident size of a BitMap: arrays of 2-byte ids, 8 KiB per dense container."""
    n = len(bm)
    if n <= 4096:
        return 150 + 2 * n
    return 150 + min(2 * n, 8200 * (1 + (bm.max() >> 16)))
