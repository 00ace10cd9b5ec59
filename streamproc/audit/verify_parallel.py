"""Verifying one long chain on several cores: segments in worker processes.

Hashing a million entries is CPU-bound Python, so threads would not help. Each worker opens
the state directory read-only and checks its segment (starting at a snapshot boundary, from
the stored link before it); meanwhile the parent hashes the HLC log view. The segment before
proves the link a segment starts from, so the combined result is exactly the serial one.
Workers are spawned (not forked): the parent may hold threads, sockets and RocksDB handles.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec
from nacl.signing import VerifyKey

from streamproc.audit.dsse import Keyring
from streamproc.audit.layout import Readable, SnapshotRecord, entry_at
from streamproc.audit.logview import log_view_rows
from streamproc.audit.segment import SegmentResult, verify_segment
from streamproc.state.store import RocksStore, StoreSizes


def verify_segments(
    path: Path,
    store: Readable,
    tenant: str,
    bounds: list[int],
    snaps: list[SnapshotRecord],
    keyring: Keyring,
    stop: threading.Event | None,
    log_view: bool = True,
) -> tuple[list[SegmentResult], tuple[int, int] | None]:
    """Results of segments ``bounds[i] .. bounds[i+1]-1`` in order, and the log view's rows."""
    prevs: list[str | None] = [None]
    for b in bounds[1:-1]:
        e = entry_at(store, tenant, b - 1)
        prevs.append(e.chain_link if e is not None else None)  # else the segment before breaks
    keys = [(key_id, bytes(key)) for key_id, key in keyring.items()]
    snaps_raw = msgspec.json.encode(snaps)
    sizes = getattr(store, "sizes", StoreSizes())  # the parent's view's, as configured
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(bounds) - 1, mp_context=ctx) as pool:
        futures = [
            pool.submit(_worker, str(path), sizes, tenant, a, b, prev, snaps_raw, keys, log_view)
            for a, b, prev in zip(bounds, bounds[1:], prevs, strict=False)
        ]
        rows = log_view_rows(store, tenant, bounds[-1], stop) if log_view else None
        results = [msgspec.json.decode(f.result(), type=SegmentResult) for f in futures]
    return results, rows


def _worker(
    path: str,
    sizes: StoreSizes,
    tenant: str,
    start: int,
    end: int,
    prev: str | None,
    snaps_raw: bytes,
    keys: list[tuple[str, bytes]],
    log_view: bool,
) -> bytes:
    store = RocksStore(path, read_only=True, sizes=sizes)
    try:
        snaps = msgspec.json.decode(snaps_raw, type=list[SnapshotRecord])
        ring = Keyring({key_id: VerifyKey(raw) for key_id, raw in keys})
        result = verify_segment(store, tenant, start, end, prev, snaps, ring, None, log_view)
        return msgspec.json.encode(result)
    finally:
        store.close()
