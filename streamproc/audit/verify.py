"""Full verification of a tenant's audit chain from the stored entries.

In chain order, for every entry: its key and stored position are the next position, its
``prev_chain_link`` is the previous link, its action fits its kind, the recomputed payload
digest equals the stored one and the recomputed link equals the stored one. Then the head,
the HLC-ordered log view (one row per entry at its HLC: a multiset comparison, located on
mismatch), and every recorded snapshot: contiguous from position 0, its unsigned fields equal
to the signed body, the DSSE signature valid under the keyring, the Merkle root equal to the
root recomputed over its range. The report names the first broken position and what differs.

The chain is checked in segments that start at snapshot boundaries: one in-process, or
several in worker processes for long chains (:mod:`streamproc.audit.verify_parallel`); a
segment starts from the stored link before it, which the previous segment proves.

Reads go head → snapshots → chain, and the chain is append-only, so verifying beside a
running fold never reports entries that were appended after the head was read.
"""

from __future__ import annotations

import threading
from pathlib import Path

from streamproc import metrics
from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import Head, Readable, SnapshotRecord, read_head, snapshots, tenants
from streamproc.audit.logview import check_log_view
from streamproc.audit.segment import (
    MASK,
    Broken,
    BrokenAt,
    Cancelled,
    SegmentResult,
    verify_segment,
)
from streamproc.audit.verify_parallel import verify_segments
from streamproc.queries import ChainReport

__all__ = ["Broken", "Cancelled", "UnknownTenant", "verify_all", "verify_tenant"]

PARALLEL_MIN_ENTRIES = 200_000
"""Chains shorter than this are verified in-process even when workers are allowed."""


class UnknownTenant(LookupError):
    """No chain exists for the tenant in this state directory."""


# ---------------------------------------------------------------------- whole tenant


def verify_tenant(
    store: Readable,
    tenant: str,
    keyring: Keyring,
    *,
    stop: threading.Event | None = None,
    count_metrics: bool = True,
    workers: int = 1,
    path: Path | None = None,
    log_view: bool = True,
) -> ChainReport:
    """Verify one tenant's chain, snapshots and (``log_view``) HLC log view; never raises for
    a broken chain.

    With ``workers`` > 1 and ``path`` (the RocksDB directory ``store`` reads), a long chain is
    split over that many worker processes. The log view is a derived index, not part of what
    snapshots attest; checking it costs about a third more."""
    head = read_head(store, tenant)
    if head is None:
        raise UnknownTenant(f"no audit chain for tenant {tenant!r}")
    snaps = snapshots(store, tenant)
    n = head.entries
    result = SegmentResult(last_link=None, last_hlc=None, snapshots=0, log_acc=0)
    try:
        _check_tiling(snaps, n, head.snapshotted)
        bounds = split_points(n, snaps, workers if path is not None else 1)
        if len(bounds) > 2 and path is not None:
            results, rows = verify_segments(
                path, store, tenant, bounds, snaps, keyring, stop, log_view
            )
        else:
            results = [verify_segment(store, tenant, 0, n, None, snaps, keyring, stop, log_view)]
            rows = None
        for r in results:
            result.snapshots += r.snapshots
            result.log_acc = (result.log_acc + r.log_acc) & MASK
            if r.broken is not None:
                result.broken = r.broken
                break
            result.last_link, result.last_hlc = r.last_link, r.last_hlc
        if result.broken is None:
            _check_head(head, n, result)
            if log_view:
                check_log_view(store, tenant, n, result.log_acc, stop, rows)
    except BrokenAt as b:
        result.broken = b.broken
    report = _report(tenant, head, result)
    if count_metrics:
        metrics.CHAIN_VERIFICATIONS.labels(tenant).inc()
        if not report.ok:
            metrics.CHAIN_VERIFICATION_FAILURES.labels(tenant).inc()
    return report


def verify_all(
    store: Readable,
    keyring: Keyring,
    *,
    stop: threading.Event | None = None,
    workers: int = 1,
    path: Path | None = None,
    log_view: bool = True,
) -> list[ChainReport]:
    return [
        verify_tenant(store, t, keyring, stop=stop, workers=workers, path=path, log_view=log_view)
        for t in tenants(store)
    ]


def _report(tenant: str, head: Head, result: SegmentResult) -> ChainReport:
    b = result.broken
    return ChainReport(
        tenant=tenant,
        ok=b is None,
        entries=head.entries if b is None else min(b.position, head.entries),
        head_chain_link=head.head_chain_link,
        head_hlc=head.head_hlc,
        snapshots=result.snapshots,
        snapshotted=head.snapshotted,
        broken_position=None if b is None else b.position,
        field=None if b is None else b.field,
        expected=None if b is None else b.expected,
        found=None if b is None else b.found,
        reason="" if b is None else f"position {b.position}: {b.why}",
    )


def split_points(n: int, snaps: list[SnapshotRecord], workers: int) -> list[int]:
    """Segment boundaries ``[0, …, n]`` at snapshot starts, so no snapshot spans two."""
    if workers <= 1 or n < PARALLEL_MIN_ENTRIES:
        return [0, n]
    starts = [r.snapshot.from_position for r in snaps] + [snaps[-1].snapshot.to_position + 1]
    starts = [s for s in starts if 0 < s < n] if snaps else list(range(1, n))
    bounds = [0]
    for i in range(1, workers):
        target = n * i // workers
        best = min(starts, key=lambda s: abs(s - target), default=None)
        if best is not None and best > bounds[-1]:
            bounds.append(best)
    return [*bounds, n]


def _check_tiling(snaps: list[SnapshotRecord], n: int, snapshotted: int) -> None:
    """Snapshots must tile 0..snapshotted-1 without gaps or overlaps, inside the chain."""
    expect_from = 0
    for r in snaps:
        s = r.snapshot
        if s.from_position != expect_from:
            raise BrokenAt(
                expect_from,
                "snapshot",
                expect_from,
                s.from_position,
                f"snapshots are not contiguous: the next one should start at {expect_from}, "
                f"found one starting at {s.from_position}",
            )
        if s.to_position >= n or s.to_position < s.from_position:
            raise BrokenAt(
                s.from_position,
                "snapshot",
                f"to_position < {n}",
                s.to_position,
                f"snapshot {s.from_position}..{s.to_position} reaches beyond the chain of {n}",
            )
        expect_from = s.to_position + 1
    if expect_from != snapshotted:
        raise BrokenAt(
            expect_from,
            "snapshot",
            snapshotted,
            expect_from,
            "the head's snapshot frontier does not match the recorded snapshots",
        )


def _check_head(head: Head, n: int, result: SegmentResult) -> None:
    if result.last_link != head.head_chain_link:
        raise BrokenAt(
            n,
            "head",
            head.head_chain_link,
            result.last_link,
            "the chain does not end at the stored head",
        )
    if result.last_hlc != head.head_hlc:
        raise BrokenAt(
            n, "head_hlc", head.head_hlc, result.last_hlc, "head_hlc is not the last HLC"
        )
