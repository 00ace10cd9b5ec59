"""What a projector's consumer delivered, read against the position: which messages to fold,
which sequences it passed over, whether a delivery went missing — and whether the stream
still holds what was passed over.

A consumer numbers its deliveries one by one (a redelivery takes the next number too; its
stream sequence tells it apart) and says in each how many messages of its filter it has not
delivered yet. Without a filter it delivers
every sequence, so a skipped one was removed from the stream; with one (the kinds the role
folds, :mod:`streamproc.events.filters`) skipping sequences is the point, a missing delivery
number is a message lost in flight, and only the stream can say whether what was skipped is
still there.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamproc.bus import jsapi
from streamproc.bus.ack import delivery
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import REPLY, SEQ, RawMessage
from streamproc.events.filters import filter_subjects
from streamproc.runtime.projection import Projection, folded_kinds


def role_filter(prefix: str, projections: Sequence[Projection]) -> list[str] | None:
    """The consumer filter of a projector hosting ``projections``: the subjects of the kinds
    their folds handle. None (the whole log) for a projector that hosts none."""
    kinds = folded_kinds(projections)
    return filter_subjects(prefix, kinds) if kinds else None


@dataclass
class Scan:
    """One batch read against the position (pure: :func:`scan`)."""

    items: list[RawMessage] = field(default_factory=list)
    """The messages to fold, in order."""
    skips: list[tuple[int, int, int]] = field(default_factory=list)
    """(index into ``items``, first and last sequence passed over before that item)."""
    lost: str = ""
    """Why the batch stopped early: a delivery that never arrived (read again from the
    stream), or one out of order."""
    dseq: int = 0
    pending: int = 0
    """The consumer's number and pending count of the last delivery accounted for."""


def scan(msgs: list[RawMessage], position: int, dseq: int, pending: int, consumer: str) -> Scan:
    """Sort ``msgs`` into what to fold, what was passed over and what went missing: a
    redelivery of a committed message is dropped; a delivery number that skips ahead means
    deliveries never arrived (our server died, the consumer's leader moved), and the batch
    stops there."""
    out = Scan(dseq=dseq, pending=pending)
    for m in msgs:
        seq = m[SEQ]
        d, left = delivery(m[REPLY])
        if d <= out.dseq and seq <= position:
            continue  # a redelivery of something already committed
        if d != out.dseq + 1:
            out.lost = (
                f"deliveries {out.dseq + 1}..{d - 1} of consumer {consumer} did not arrive"
                if d > out.dseq
                else f"consumer {consumer} delivered sequence {seq} out of order"
            )
            break
        out.dseq, out.pending = d, left
        if seq <= position:
            continue
        if seq != position + 1:
            out.skips.append((len(out.items), position + 1, seq - 1))
        out.items.append(m)
        position = seq
    return out


def removed_from(
    info: jsapi.StreamInfo | None, epoch: str, ranges: list[tuple[int, int]]
) -> tuple[int, str] | None:
    """The first of ``ranges`` (sequences never delivered) the stream no longer fully holds,
    and what is gone, as far as its first sequence tells (pure); None otherwise."""
    if info is None or info.created != epoch:
        return 0, "the stream was deleted or recreated"
    first = info.state.first_seq
    for i, (lo, hi) in enumerate(ranges):
        if lo < first:
            return i, f"events {lo}..{min(hi, first - 1)} were removed"
    deleted = sorted(info.state.deleted or ())
    for i, (lo, hi) in enumerate(ranges):
        at = bisect.bisect_left(deleted, lo)
        if at < len(deleted) and deleted[at] <= hi:
            return i, f"event {deleted[at]} was removed"
    return None


async def removed(
    nc: FastClient,
    stream: str,
    epoch: str,
    info: jsapi.StreamInfo | None,
    ranges: list[tuple[int, int]],
) -> tuple[int, str] | None:
    """:func:`removed_from`, asking the stream for the sequences removed between its first
    and last when it has any (a message deleted, or a per-subject limit)."""
    if info is not None and info.state.num_deleted and info.state.deleted is None:
        full = await jsapi.with_retries(lambda: jsapi.stream_info(nc, stream, deleted=True))
        if full is not None:
            info = full
    return removed_from(info, epoch, ranges)


def gap_message(stream: str, why: str, applied: int) -> str:
    return (
        f"gap on stream {stream}: {why} before this projector's consumer reached them (it "
        f"had applied up to {applied}); of which kinds, the stream no longer says, so it "
        f"stops. Rebuild with `streamproc replay`"
    )


async def passed_over_gap(
    nc: FastClient,
    stream: str,
    epoch: str,
    applied: int,
    skips: list[tuple[int, int, int]],
    *,
    filtered: bool,
) -> tuple[int, str] | None:
    """Whether sequences a consumer passed over (:attr:`Scan.skips`) were removed before it
    reached them: where to cut the batch, and why. Without a filter every sequence is
    delivered, so a skipped one was removed; with one, skipping is the point, and the stream
    says whether any of them was removed (what it was, it no longer says: any is a gap)."""
    if not filtered:
        cut, lo, hi = skips[0]
        return cut, (
            f"gap on stream {stream}: expected sequence {lo}, received {hi + 1}; "
            f"events {lo}..{hi} were removed before this projector applied them"
        )
    info = await jsapi.with_retries(lambda: jsapi.stream_info(nc, stream))
    lost = await removed(nc, stream, epoch, info, [(lo, hi) for _, lo, hi in skips])
    return None if lost is None else (skips[lost[0]][0], gap_message(stream, lost[1], applied))
