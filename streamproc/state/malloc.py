"""Handing memory the C allocator keeps back to the operating system (glibc's ``malloc_trim``).

A batch's writes (chunk values above pymalloc's 512 bytes), RocksDB's memtables (allocated
by the writing thread, freed after their flush) and decoded chunks are freed into glibc's
heap, which returns only its top to the OS: the freed holes under live blocks stay in the
RSS. ``malloc_trim(0)`` gives back every whole free page of every arena. It walks the free
lists, so it is rate-limited (:class:`Trimmer`). Elsewhere (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Mapping

from streamproc.config import ConfigError, environment

TRIM_ENV = "STREAMPROC_MALLOC_TRIM_S"
DEFAULT_TRIM_S = 5.0


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


def trim_interval_s(env: Mapping[str, str] | None = None) -> float:
    """``STREAMPROC_MALLOC_TRIM_S`` (``projector.malloc_trim_s``), validated: default 5 s,
    0: never trim."""
    raw = ((environment() if env is None else env).get(TRIM_ENV) or "").strip()
    if not raw:
        return DEFAULT_TRIM_S
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{TRIM_ENV}={raw!r}: not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{TRIM_ENV}={raw}: seconds, 0 or more (0: never trim)")
    return value


class Trimmer:
    """Trims after a batch at most once per ``interval_s`` (0: never)."""

    def __init__(
        self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = trim_interval_s() if interval_s is None else interval_s
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
