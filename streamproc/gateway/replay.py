"""A bounded set of recently seen ids (DPoP ``jti``, webhook delivery ids) that forget each
id once it can no longer pass the time-window check anyway."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable


class ReplayCacheFull(RuntimeError):
    """More live ids than the configured bound: refuse (fail closed) rather than forget."""


class ReplayCache:
    def __init__(self, max_entries: int, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        heap, expiry = self._heap, self._expiry
        while heap and heap[0][0] <= now:
            t, k = heapq.heappop(heap)
            if expiry.get(k) == t:
                del expiry[k]

    def add(self, key: str, expires_at: float) -> bool:
        """Record ``key`` until ``expires_at``; False if it is already recorded (a replay)."""
        now = self._clock()
        t = self._expiry.get(key)
        if t is not None and t > now:
            return False
        self._purge(now)
        if len(self._expiry) >= self.max_entries:
            raise ReplayCacheFull(f"{len(self._expiry)} ids are live (bound {self.max_entries})")
        self._expiry[key] = expires_at
        heapq.heappush(self._heap, (expires_at, key))
        return True

    def discard(self, key: str) -> None:
        """Forget a reservation whose request failed, so the sender's retry is not a replay."""
        self._expiry.pop(key, None)
