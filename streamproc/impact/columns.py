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
- the batch's *pending* ids, per purl (contains, and used), appended by C-level calls: a
  list per purl the batch touched, taken at the flush (:meth:`OpenChunk.take`).

The stored form stays the only form of a member: the pending ids are regrouped (purl -> ids
into group -> suffix -> ids), kept by group until merged (:mod:`streamproc.impact.pending`:
over later batches, or before a query, a strip reads the group) and merged into each
group's stored chunk bytes by :func:`merge_chunk`; the bytes depend
only on the ids, as before (small lists sorted and unique, roaring bitmaps never
run-optimised), so a store written by the previous representation reads the same and is
written the same.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import getitem
from sys import intern

from pyroaring import BitMap

from streamproc.impact import keys as K

__all__ = [
    "FLAT_ENTRY_BYTES",
    "PENDING_PAIR_BYTES",
    "PENDING_PURL_BYTES",
    "NewIds",
    "OpenChunk",
    "absorb",
    "merge_chunk",
    "strip_chunk",
]

FLAT_ENTRY_BYTES = 130
"""Estimated bytes of one ``flat`` entry (the purl string, ~85 B for the benchmark's purls,
and a dict slot, 30-60 B with the dict's spare room): measured with tracemalloc by
``tests/impact/test_columns.py``, which also checks that this stays an upper bound."""
PENDING_PURL_BYTES = 220
"""A purl with pending ids: its list (~90 B), its slot in the batch's map and the event's
purl string that keys it (at the flush its list moves, by group, to the ids pending
merging, charged the same)."""
PENDING_PAIR_BYTES = 8
"""A pending id: one list slot (the image's id object is shared by all its purls)."""

NewIds = dict[int, tuple[dict[str, list[int]], dict[str, list[int]]]]
"""Group id -> (contains, used): exact-purl suffix -> the ids a batch added (unsorted)."""

_deserialize = BitMap.deserialize
_append = list.append


def consume(it: Iterable[object]) -> None:
    """Run an iterator of C calls to the end without a Python-level loop."""
    deque(it, maxlen=0)


class OpenChunk:
    __slots__ = ("c", "flat", "pairs", "u")

    def __init__(self) -> None:
        self.flat: dict[str, int] = {}
        self.c: defaultdict[str, list[int]] = defaultdict(list)
        self.u: defaultdict[str, list[int]] = defaultdict(list)
        """The batch's pending ids per purl, contains and used (a ``defaultdict``: its
        ``__getitem__`` creates a missing list in C, so ``add`` stays C-level)."""
        self.pairs = 0

    def add(self, iid: int, purls: Sequence[str], used: Sequence[bool]) -> None:
        """Record one image's purls (and the used ones): C-level calls only."""
        consume(map(_append, map(self.c.__getitem__, purls), repeat(iid)))
        self.pairs += len(purls)
        if True in used:
            up = list(compress(purls, used))
            consume(map(_append, map(self.u.__getitem__, up), repeat(iid)))
            self.pairs += len(up)

    def pending(self) -> int:
        return self.pairs

    def held_bytes(self) -> int:
        """Estimated bytes: the checked purls and the pending ids."""
        return (
            FLAT_ENTRY_BYTES * len(self.flat)
            + PENDING_PURL_BYTES * (len(self.c) + len(self.u))
            + PENDING_PAIR_BYTES * self.pairs
        )

    def take(self, pk_by_gid: list[str | None]) -> NewIds:
        """The pending ids as group -> suffix -> ids (each purl's group from ``flat``:
        every pending purl was checked there), and forget them."""
        out: NewIds = {}
        flat = self.flat
        for side, by in enumerate((self.c, self.u)):
            if not by:
                continue
            gids = list(map(flat.__getitem__, by))
            lens = map(len, map(pk_by_gid.__getitem__, gids))  # type: ignore[arg-type]  # a pending gid is live
            suffixes = map(intern, map(getitem, by, map(slice, lens, repeat(None))))  # type: ignore[arg-type]  # str[slice] -> str
            get = out.get
            for gid, s, ids in zip(gids, suffixes, by.values(), strict=True):
                per = get(gid)
                if per is None:
                    per = out[gid] = ({}, {})
                per[side][s] = ids
        self.c, self.u, self.pairs = defaultdict(list), defaultdict(list), 0
        return out


def absorb(into: NewIds, new: NewIds) -> None:
    """Add one batch's regrouped pending ids (``OpenChunk.take``) to the ids still pending
    from earlier batches of the same chunk, in place (``new``'s lists are taken over)."""
    get = into.get
    for gid, sides in new.items():
        have = get(gid)
        if have is None:
            into[gid] = sides
            continue
        for old, add in zip(have, sides, strict=True):
            for s, ids in add.items():
                got = old.get(s)
                if got is None:
                    old[s] = ids
                else:
                    got += ids


def _merge_side(
    small: dict[str, list[int]], big: dict[str, bytes], new: dict[str, list[int]], gid: int
) -> None:
    """Add ``new`` (suffix -> ids, in fold order) to one side of a decoded chunk, in place.
    The common cases take no sort: a member new to the chunk with one id (the catalog's
    tail), one id above a small member's last (appended to the decoded list)."""
    get = small.get
    for s, ids in new.items():
        m = get(s)
        if m is None:
            raw = big.get(s)
            if raw is not None:  # a bitmap only grows here
                bm = _deserialize(raw)
                bm.update(ids)
                big[s] = bm.serialize()
                continue
            if len(ids) == 1:
                small[s] = [gid, *ids]
                continue
            ids = sorted(set(ids))
        elif len(ids) == 1 and ids[0] > m[-1]:
            if len(m) <= K.BIG:
                m += ids
                continue
            ids = m[1:] + ids
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
