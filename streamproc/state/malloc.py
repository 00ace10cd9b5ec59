"""Handing memory the C allocator keeps back to the operating system (glibc's ``malloc_trim``).

A batch's writes (chunk values above pymalloc's 512 bytes), RocksDB's memtables (allocated
by the writing thread, freed after their flush) and decoded chunks are freed into glibc's
heap, which returns only its top to the OS: the freed holes under live blocks stay in the
RSS. ``malloc_trim(0)`` gives back every whole free page of every arena. It walks the free
lists, so it is rate-limited (:class:`Trimmer`). Elsewhere (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

DEFAULT_TRIM_S = 5.0
"""``projector.malloc_trim_s``'s default (read by :mod:`streamproc.state.settings`)."""


def _load() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_MALLOC_TRIM = _load()


def available() -> bool:
    return _MALLOC_TRIM is not None


def trim() -> bool:
    """Return free memory of every malloc arena to the OS; True if some was returned."""
    return _MALLOC_TRIM is not None and bool(_MALLOC_TRIM(0))


class Trimmer:
    """Trims after a batch at most once per ``interval_s`` (0: never)."""

    def __init__(
        self, interval_s: float = DEFAULT_TRIM_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last = -float("inf")
        self.trims = 0

    def after_batch(self) -> bool:
        """Trim if the interval has passed since the last trim ended; True if it trimmed."""
        if self.interval_s <= 0 or _MALLOC_TRIM is None:
            return False
        if self._clock() - self._last < self.interval_s:
            return False
        trim()
        self.trims += 1
        self._last = self._clock()
        return True
