"""Where a process's memory is, as ``/metrics`` shows it (docs/operations.md, "Memory"):
its resident size, glibc's heap (in use, and freed but kept), RocksDB's memtables (every open
state directory) and its block cache (one per process, index and filter blocks included).
Read when metrics are scraped, never on a hot path."""

from __future__ import annotations

import ctypes
import os

from streamproc import metrics
from streamproc.state.store import open_stores


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
            *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
        )
    ]


def _load_mallinfo2() -> object | None:
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _load_mallinfo2()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def malloc_bytes() -> tuple[int, int] | None:
    """glibc's heap, every arena: bytes in use (mmapped chunks included) and bytes freed but
    kept; None where glibc does not say."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()  # type: ignore[operator]  # the C function, loaded above
    return int(m.uordblks + m.hblkhd), int(m.fordblks)


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def parts() -> dict[str, int]:
    """Every figure there is on this system, by ``part``."""
    out: dict[str, int] = {}
    rss = rss_bytes()
    if rss is not None:
        out["rss"] = rss
    heap = malloc_bytes()
    if heap is not None:
        out["malloc_in_use"], out["malloc_free"] = heap
    stores = open_stores()
    if stores:
        out["rocksdb_memtables"] = sum(s.memtable_bytes() for s in stores)
        caches = {id(s.block_cache): s.block_cache for s in stores}.values()
        out["rocksdb_block_cache"] = sum(int(c.get_usage()) for c in caches)
        out["rocksdb_block_cache_pinned"] = sum(int(c.get_pinned_usage()) for c in caches)
    return out


def refresh() -> None:
    """Set ``streamproc_memory_bytes{part}`` to what the process holds now."""
    for part, value in parts().items():
        metrics.MEMORY.labels(part).set(value)
