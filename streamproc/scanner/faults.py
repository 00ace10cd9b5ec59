"""Faults the reference scanner simulates on demand: latency, 429s, 5xx, outages.

Counted faults ("the next 200 calls answer 429") make chaos tests deterministic; rates and
jitter make benchmarks realistic. An outage aborts the connection (a reset, not an HTTP
answer), which is what a crashed or partitioned backend looks like to a client.
"""

from __future__ import annotations

import random
import time

import msgspec


class FaultConfig(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    next_429: int = 0
    next_5xx: int = 0
    rate_429: float = 0.0
    rate_5xx: float = 0.0
    status_5xx: int = 503
    retry_after_s: float | None = None
    outage_s: float = 0.0
    """Abort every connection for this many seconds from now."""
    seed: int | None = None
    paths: list[str] = []
    """Path prefixes the faults apply to (``["/resolve", "/scans"]``: a throttling registry
    behind content refresh); empty, the whole scanner API."""

    def applies_to(self, path: str) -> bool:
        return not self.paths or any(path.startswith(p) for p in self.paths)


class Faults:
    def __init__(self, config: FaultConfig | None = None) -> None:
        self.config = FaultConfig()
        self.outage_until = 0.0
        self.rng = random.Random(0)
        self.injected: dict[str, int] = {"429": 0, "5xx": 0, "outage": 0}
        if config is not None:
            self.apply(config)

    def apply(self, config: FaultConfig) -> None:
        self.config = config
        self.outage_until = time.monotonic() + config.outage_s if config.outage_s > 0 else 0.0
        if config.seed is not None:
            self.rng = random.Random(config.seed)

    def delay_s(self) -> float:
        c = self.config
        if c.latency_ms <= 0 and c.jitter_ms <= 0:
            return 0.0
        return max(0.0, c.latency_ms + self.rng.uniform(-c.jitter_ms, c.jitter_ms)) / 1000.0

    def decide(self) -> str | None:
        """``"outage"``, ``"429"``, ``"5xx"`` or None for this request (counts it)."""
        c = self.config
        verdict: str | None = None
        if self.outage_until and time.monotonic() < self.outage_until:
            verdict = "outage"
        elif c.next_429 > 0:
            c.next_429 -= 1
            verdict = "429"
        elif c.next_5xx > 0:
            c.next_5xx -= 1
            verdict = "5xx"
        elif c.rate_429 and self.rng.random() < c.rate_429:
            verdict = "429"
        elif c.rate_5xx and self.rng.random() < c.rate_5xx:
            verdict = "5xx"
        if verdict is not None:
            self.injected[verdict] += 1
        return verdict

    def describe(self) -> dict[str, object]:
        left = max(0.0, self.outage_until - time.monotonic()) if self.outage_until else 0.0
        return {
            "config": msgspec.to_builtins(self.config),
            "outageLeftS": round(left, 3),
            "injected": dict(self.injected),
        }
