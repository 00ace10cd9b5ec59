"""The open chunk, columnar: what the fold holds of the chunk new images go to.

Before, every exact purl of an open chunk was a decoded member: a Python list of ids in one
of the group's four suffix maps, pointed at by a flat purl -> member map (~315 B of objects
per member, measured with ``sys.getsizeof``, against 200 B charged to the bound; 1.7 million
of them at 65,000 images of the benchmark catalog, more than the default 640 MB bound, so
the bound evicted and re-decoded groups every batch). Now an open chunk holds only:

- ``flat``: purl -> group id, for the purls already checked in this chunk (the event's purl
  string as key, the group's own id object as value: one dict slot and one string a
  member, no list, no suffix map). It is a cache: dropping it loses nothing but the next
  images' look-ups (their purls are checked again and their group ids looked up by product
  key), so it is what gives way when it alone would take a large part of the bound.
- the batch's *pending* pairs, appended by C-level ``extend`` calls: the purls (references to
  the event's strings), their group ids and the image ids (``array('I')``), once for the
  contains side and once for the used side.

The stored form stays the only form of a member: before anything reads a chunk (a flush, a
query, a strip) the pending pairs are inverted (purl -> ids, then group -> suffix -> ids) and
merged into each touched group's stored chunk bytes by :func:`merge_chunk`; the bytes depend
only on the ids, as before (small lists sorted and unique, roaring bitmaps never
run-optimised), so a store written by the previous representation reads the same and is
written the same.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress, repeat
from sys import intern

from pyroaring import BitMap

from streamproc.impact import keys as K

__all__ = [
    "FLAT_ENTRY_BYTES",
    "PENDING_PAIR_BYTES",
    "NewIds",
    "OpenChunk",
    "merge_chunk",
    "strip_chunk",
]

FLAT_ENTRY_BYTES = 130
"""Estimated bytes of one ``flat`` entry (the purl string, ~85 B for the benchmark's purls,
and a dict slot, 30-60 B with the dict's spare room): measured with tracemalloc by
``tests/impact/test_columns.py``, which also checks that this stays an upper bound."""
PENDING_PAIR_BYTES = 12
"""One pending pair: a reference to the event's purl string (8 B) and an id (4 B)."""

NewIds = dict[int, tuple[dict[str, list[int]], dict[str, list[int]]]]
"""Group id -> (contains, used): exact-purl suffix -> the ids a batch added (unsorted)."""

_deserialize = BitMap.deserialize


class OpenChunk:
    __slots__ = ("flat", "gids", "ids", "purls", "ugids", "uids", "upurls")

    def __init__(self) -> None:
        self.flat: dict[str, int] = {}
        self.purls: list[str] = []
        self.gids = array("I")
        self.ids = array("I")
        self.upurls: list[str] = []
        self.ugids = array("I")
        self.uids = array("I")

    def add(self, iid: int, purls: Sequence[str], gids: list[int], used: Sequence[bool]) -> None:
        """Record one image's purls (and the used ones): C-level appends only."""
        n = len(purls)
        self.purls += purls
        self.gids.extend(gids)
        self.ids.extend(repeat(iid, n))
        k = used.count(True)
        if k:
            self.upurls += compress(purls, used)
            self.ugids.extend(compress(gids, used))
            self.uids.extend(repeat(iid, k))

    def pending(self) -> int:
        return len(self.ids) + len(self.uids)

    def take(self, pk_by_gid: list[str | None]) -> NewIds:
        """Invert the pending pairs into group -> suffix -> ids, and forget them."""
        out: NewIds = {}
        for side, (purls, gids, ids) in enumerate(
            ((self.purls, self.gids, self.ids), (self.upurls, self.ugids, self.uids))
        ):
            if not ids:
                continue
            by: dict[str, list[int]] = {}
            get = by.get
            for p, i in zip(purls, ids, strict=True):
                got = get(p)
                if got is None:
                    by[p] = [i]
                else:
                    got.append(i)
            gid_of = dict(zip(purls, gids, strict=True))
            for p, got in by.items():
                gid = gid_of[p]
                pk: str = pk_by_gid[gid]  # type: ignore[assignment]  # a pending gid is live
                per = out.get(gid)
                if per is None:
                    per = out[gid] = ({}, {})
                per[side][intern(p[len(pk) :])] = got
        self.purls, self.gids, self.ids = [], array("I"), array("I")
        self.upurls, self.ugids, self.uids = [], array("I"), array("I")
        return out


def _merge_side(
    small: dict[str, list[int]], big: dict[str, bytes], new: dict[str, list[int]], gid: int
) -> None:
    for s, ids in new.items():
        m = small.get(s)
        if m is None:
            raw = big.get(s)
            if raw is not None:  # a bitmap only grows here
                bm = _deserialize(raw)
                bm.update(ids)
                big[s] = bm.serialize()
                continue
            ids = sorted(set(ids)) if len(ids) > 1 else ids
        elif len(ids) == 1 and ids[0] > m[-1] and len(m) > 1:
            ids = m[1:] + ids  # the common case: a new, higher id
        else:
            ids = sorted(set(m[1:]).union(ids))
        if len(ids) > K.BIG:
            small.pop(s, None)
            big[s] = K.bitmap(ids).serialize()
        else:
            small[s] = [gid, *ids]


def merge_chunk(
    raw: bytes | None, gid: int, contains: dict[str, list[int]], used: dict[str, list[int]]
) -> bytes | None:
    """A stored chunk (None: none yet) with new ids added: the bytes a decoded member would
    have been encoded to (small members up to ``BIG`` ids as ``[gid, id...]``, sorted and
    unique; larger ones as roaring bytes)."""
    if raw is None:
        cs: dict[str, list[int]] = {}
        cb: dict[str, bytes] = {}
        us: dict[str, list[int]] = {}
        ub: dict[str, bytes] = {}
    else:
        cs, cb, us, ub = K.decode_chunk(raw)
    if contains:
        _merge_side(cs, cb, contains, gid)
    if used:
        _merge_side(us, ub, used, gid)
    if not cs and not cb:
        return None
    return K.encode_chunk(cs, cb, us, ub)


def _strip_side(
    small: dict[str, list[int]], big: dict[str, bytes], iid: int, gid: int
) -> tuple[bool, list[str]]:
    """Take ``iid`` out of one side; (whether anything changed, the suffixes left empty)."""
    changed = False
    emptied: list[str] = []
    for s, m in small.items():
        i = bisect_left(m, iid, 1)
        if i < len(m) and m[i] == iid:
            del m[i]
            changed = True
            if len(m) == 1:
                emptied.append(s)
    for s in emptied:
        del small[s]
    for s, raw in list(big.items()):
        bm = _deserialize(raw)
        if iid in bm:
            bm.discard(iid)
            changed = True
            if len(bm) > K.BIG:
                big[s] = bm.serialize()
            else:  # back to a plain list (a big member never empties in one step)
                del big[s]
                small[s] = [gid, *bm]
    return changed, emptied


def strip_chunk(raw: bytes, gid: int, iid: int) -> tuple[bytes | None, bool, list[str]]:
    """A stored chunk without ``iid``: (its new bytes or None once empty, whether it
    changed, the contains suffixes left empty)."""
    cs, cb, us, ub = K.decode_chunk(raw)
    changed, emptied = _strip_side(cs, cb, iid, gid)
    uchanged, _ = _strip_side(us, ub, iid, gid)
    if not (changed or uchanged):
        return raw, False, []
    if not cs and not cb:
        return None, True, emptied
    return K.encode_chunk(cs, cb, us, ub), True, emptied
