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


TRIM_SHARE = 0.05
"""At most this share of the time goes to trimming: a trim that took ``d`` seconds is
followed by none for ``d / TRIM_SHARE``, if that is longer than the interval. On the
impact index's 200,000-image benchmark heap one trim took 3.9 s (it walks every free
chunk), held the event loop that long, and every 5 s would have been ~40 % of the time."""


class Trimmer:
    """Trims after a batch at most once per ``interval_s`` (0: never), and less often when
    trims are slow (:data:`TRIM_SHARE`)."""

    def __init__(
        self, interval_s: float = DEFAULT_TRIM_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last = -float("inf")
        self._gap = interval_s
        self.trims = 0

    def after_batch(self) -> bool:
        """Trim if the gap has passed since the last trim ended; True if it trimmed."""
        if self.interval_s <= 0 or _MALLOC_TRIM is None:
            return False
        start = self._clock()
        if start - self._last < self._gap:
            return False
        trim()
        self.trims += 1
        self._last = self._clock()
        self._gap = max(self.interval_s, (self._last - start) / TRIM_SHARE)
        return True
