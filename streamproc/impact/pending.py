"""Ids folded but not yet merged into the stored chunks, and their merging.

Merging a batch's ids costs per product the batch touched (a decode and an encode of the
product's chunk, and its write), not per image: 30 of the benchmark's images touch ~10,000
products, 1,000 of them ~130,000. So with ``defer`` a batch does not merge its own ids.
They are kept regrouped by product (``_pend``) and stored image-major in the batch's
WriteBatch: one entry per image (its purls, used flags and group ids, under ``q`` + the
image id in the names family), which is what a restart reads back. Merging proceeds in
*rounds*: a round takes everything pending when it starts, and each batch merges a
time-bounded slice of it (``budget_s``), whatever the batch folded. The batch that merges a
round's last ids deletes the round's images' entries, in the same WriteBatch as those ids'
chunks. The longer a round takes, the more images the next one merges at a time, so
popular products are merged once per round rather than once per batch. Merging is a set
union, so applying an entry again after a restart (some of its ids already merged) changes
nothing.

Readers never see a chunk without its pending ids: a query first merges the groups of the
keys it reads (:meth:`Pending._settle_keys`); a strip, the diagnostics and a flush without
a budget merge everything (:meth:`Pending._settle`). Without ``defer`` every flush merges
everything, as it did before. The stored bytes depend only on the events once nothing is
pending; while something is, the state directory also holds the pending entries.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import filterfalse, islice

import msgspec

from streamproc.impact import keys as K
from streamproc.impact.columns import (
    NewIds,
    OpenChunk,
    merge_chunk,
)
from streamproc.impact.groups import Group
from streamproc.impact.state import IndexState

__all__ = ["MERGE_SLICE", "Pending", "decode_delta", "delta_key", "encode_delta"]

MERGE_SLICE = 256
"""Groups merged between two looks at the clock (a cold slice is one multi-get)."""

_Delta = tuple[list[str], list[bool], list[int]]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Delta)


def encode_delta(purls: list[str], used: list[bool], gids: list[int]) -> bytes:
    """An image's stored pending entry: its purls, used flags and the group of each."""
    return _encoder.encode((purls, used, gids))


def decode_delta(raw: bytes) -> _Delta:
    return _decoder.decode(raw)


def delta_key(iid: int) -> bytes:
    return K.PENDING + K.u32(iid)


class Pending(IndexState):
    def has_pending(self) -> bool:
        """Ids folded and not yet merged, or stored entries of merged ones not yet deleted
        (a later flush does both)."""
        return bool(
            self._round
            or self._pend
            or self._round_iids
            or self._pend_iids
            or any(oc.pairs for oc in self._open.values())
        )

    @property
    def pending_images(self) -> int:
        """Images whose stored pending entries remain (their ids not all merged yet)."""
        return len(self._round_iids) + len(self._pend_iids)

    def _add_delta(self, iid: int, purls: list[str], used: list[bool], gids: list[int]) -> None:
        """Store a deferred image's pending entry in this batch."""
        self._deltas[iid] = encode_delta(purls, used, gids)
        self._pend_iids.append(iid)

    def _merged(self, iids: list[int]) -> None:
        """These images' ids are all merged: their stored entries go in this batch."""
        if iids and self.source is not None:
            self._deltas.update(dict.fromkeys(iids))

    # -- merging ---------------------------------------------------------------------------
    def _settle(self) -> None:
        """Merge every pending id: before a strip, the diagnostics, a flush without budget."""
        self._take_open()
        for src in (self._round, self._pend):
            for chunk, new in src.items():
                if new:
                    self._merge_new(chunk, new)
        self._round, self._pend = {}, {}
        self._merged(self._round_iids)
        self._merged(self._pend_iids)
        self._round_iids, self._pend_iids = [], []
        self._round_cost = self._pend_cost = 0

    def _settle_gids(self, gids: Iterable[int]) -> None:
        """Merge the pending ids of these groups only (the round's entries stay stored until
        the round ends: applying them again changes nothing)."""
        want = set(gids)
        for src in (self._round, self._pend):
            for chunk in list(src):
                new = src[chunk]
                hit = [gid for gid in want if gid in new]
                if hit:
                    self._merge_new(chunk, {gid: new.pop(gid) for gid in hit})
                if not new:
                    del src[chunk]

    def _settle_keys(self, keys: Iterable[str]) -> None:
        """Merge the pending ids of the groups that these query keys read: product keys
        and exact purls as spelled (other spellings are normalised on the query's slow path,
        which merges with :meth:`_settled_group`)."""
        self._take_open()
        if not self._round and not self._pend:
            return
        gids = self._gids.get
        want: list[int] = []
        for key in keys:
            gid = gids(key)
            if gid is None:
                pk = K.product_part(key)
                gid = gids(pk) if pk != key else None
            if gid is not None:  # other spellings: _settled_group, on the slow path
                want.append(gid)
        self._settle_gids(want)

    def _settled_group(self, pk: str) -> Group | None:
        """``_group``, with the group's pending ids merged first."""
        if self._round or self._pend:
            gid = self._gids.get(pk)
            if gid is not None:
                self._settle_gids((gid,))
        return self._group(pk)

    def _merge_budgeted(self, budget_s: float) -> None:
        """Merge for about ``budget_s`` (at least one slice): the round's groups, a slice at
        a time; a round that ends frees its images' stored entries, and the next one starts
        with everything pending then."""
        self._take_open()
        deadline = time.perf_counter() + budget_s
        while True:
            if not self._round:
                self._end_round()
                if not self._pend:  # (queries may have merged it: only entries are left)
                    self._merged(self._pend_iids)
                    self._pend_iids, self._pend_cost = [], 0
                    return
                self._round, self._pend = self._pend, {}
                self._round_iids, self._pend_iids = self._pend_iids, []
                self._round_cost, self._pend_cost = self._pend_cost, 0
            chunk = next(iter(self._round))
            new = self._round[chunk]
            part = {gid: new.pop(gid) for gid in list(islice(new, MERGE_SLICE))}
            if not new:
                del self._round[chunk]
            self._merge_new(chunk, part)
            if time.perf_counter() >= deadline:
                if not self._round:  # the last slice ended the round
                    self._end_round()
                return

    def _end_round(self) -> None:
        """The round's ids are all merged: its images' stored entries go in this batch."""
        self._merged(self._round_iids)
        self._round_iids, self._round_cost = [], 0

    def _merge_new(self, chunk: int, new: NewIds) -> None:
        """Merge regrouped pending ids into their groups' stored chunks (loading the groups
        not in memory), mark the chunks dirty and the product bitmaps stale."""
        if not new:
            return
        pks: list[str] = list(map(self._pk_by_gid.__getitem__, new))  # type: ignore[arg-type]  # pending gids are live
        groups = self._groups
        if self.source is not None:
            cold = list(filterfalse(groups.__contains__, pks))
            if cold:
                self._load_groups(cold)
        touched: list[Group] = list(map(groups.__getitem__, pks))
        for g, (c, u) in zip(touched, new.values(), strict=True):
            g.set_chunk(chunk, merge_chunk(g.chunks.get(chunk), g.gid, c, u))
            self._stale(g)
        self._mark_dirty(chunk, list(new))
        if self._lru is not None:
            self._lru.set_many(pks, list(map(Group.size, touched)))  # type: ignore[arg-type]  # pks are str product keys (the LRU also holds owner bytes)

    # -- restoring -------------------------------------------------------------------------
    def _restore_pending(self, entries: list[tuple[int, bytes]]) -> None:
        """Pending entries read back at opening: all of them are the first round."""
        for iid, raw in sorted(entries):
            purls, used, gids = decode_delta(raw)
            oc = self._open.get(iid >> K.CHUNK_BITS)
            if oc is None:
                oc = self._open[iid >> K.CHUNK_BITS] = OpenChunk()
            oc.flat.update(zip(purls, gids, strict=True))
            oc.add(iid, purls, used)
        self._take_open()
        self._round, self._pend = self._pend, {}
        self._round_iids = sorted(iid for iid, _ in entries)
