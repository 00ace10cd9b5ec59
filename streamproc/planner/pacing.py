"""Pacing: priority digits, the rates recorded on segments, and leaky buckets.

The planner does not hold work back; it decides *how fast* each segment may be worked and
*how urgent* it is, and records both on the segment. Runners pace their scanner calls with
the buckets below (one per tenant, one per registry host for content-refresh) and take
segments by the priority digit of the work subject: manual 0-2 < event-driven 3-5 < nightly
6-8, and within a class KEV 0, critical 1, the rest 2.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from streamproc import metrics
from streamproc.events import payloads as p

PRIORITY_BASE: dict[str, int] = {"manual": 0, "feedser": 3, "vexer": 3, "cron": 6}
TIER_KEV, TIER_CRITICAL, TIER_REST = 0, 1, 2


def priority_digit(trigger: str, tier: int) -> int:
    """The work-subject digit: class base by trigger plus the tier (0 is most urgent)."""
    return PRIORITY_BASE[trigger] + min(max(tier, TIER_KEV), TIER_REST)


def mode_of(trigger: str) -> str:
    """Metric label for a trigger: manual, event or nightly."""
    return {"manual": "manual", "cron": "nightly"}.get(trigger, "event")


@dataclass(frozen=True)
class RunLimits:
    max_jobs: int
    rate: int
    parallelism: int


def run_limits(
    limits: Iterable[p.Limits], *, max_jobs: int, rate: int, parallelism: int
) -> RunLimits:
    """One run serving several schedules takes the most conservative limit each sets;
    a limit no schedule sets takes the configured default."""
    ls = list(limits)
    jobs = [x.max_jobs for x in ls if x.max_jobs is not None]
    rates = [x.rate_per_second for x in ls if x.rate_per_second is not None]
    pars = [x.parallelism for x in ls if x.parallelism is not None]
    return RunLimits(
        min(jobs) if jobs else max_jobs,
        min(rates) if rates else rate,
        min(pars) if pars else parallelism,
    )


def segment_rate(run_rate: int, shards: int, host_rate: int | None = None) -> int:
    """Images/s for one segment: its shard's share of the run's rate (shards run side by
    side), and for content-refresh no more than its registry host's budget."""
    share = max(1, math.ceil(run_rate / max(1, shards)))
    return min(share, host_rate) if host_rate is not None else share


def estimate_seconds(
    images: int,
    run_rate: int,
    tenant_rate: int,
    host_counts: Mapping[str, int] | None = None,
    host_rate: int | None = None,
) -> float:
    """How long ``images`` take at the run's rate within the tenant's bucket; with
    content-refresh, the busiest registry host at its own budget may take longer."""
    if images <= 0:
        return 0.0
    seconds = images / max(1, min(run_rate, tenant_rate))
    if host_counts and host_rate:
        seconds = max(seconds, max(host_counts.values()) / host_rate)
    return seconds


class LeakyBucket:
    """A leaky bucket as a meter (GCRA): ``rate`` units/s with a burst of ``burst`` units.

    ``reserve(n)`` always admits and returns how long to wait first, so callers queue in
    arrival order without polling. The clock is injected (tests use a fake one).
    """

    def __init__(self, rate: float, burst: float = 1.0, now: Callable[[], float] | None = None):
        if rate <= 0 or burst < 1:
            raise ValueError(f"leaky bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._now = now or time.monotonic
        self._tat = 0.0
        self._tolerance = (self.burst - 1) / self.rate

    def reserve(self, n: float = 1.0) -> float:
        now = self._now()
        tat = max(self._tat, now)
        wait = max(0.0, tat - self._tolerance - now)
        self._tat = tat + n / self.rate
        return wait


class Pacer:
    """Buckets per tenant and per registry host; the slower of the two sets the pace."""

    def __init__(
        self,
        tenant_rate: int,
        registry_rate: int,
        burst_s: float = 1.0,
        now: Callable[[], float] | None = None,
    ) -> None:
        self.tenant_rate = tenant_rate
        self.registry_rate = registry_rate
        self.burst_s = burst_s
        self._now = now
        self._tenants: dict[str, LeakyBucket] = {}
        self._hosts: dict[str, LeakyBucket] = {}

    def _bucket(self, pool: dict[str, LeakyBucket], name: str, rate: int) -> LeakyBucket:
        b = pool.get(name)
        if b is None:
            b = LeakyBucket(rate, max(1.0, rate * self.burst_s), self._now)
            pool[name] = b
        return b

    def delay(self, tenant: str, host: str | None = None, n: int = 1) -> float:
        """Reserve ``n`` images for ``tenant`` (and ``host``); seconds to wait first."""
        wait = self._bucket(self._tenants, tenant, self.tenant_rate).reserve(n)
        reason = "tenant"
        if host:
            host_wait = self._bucket(self._hosts, host, self.registry_rate).reserve(n)
            if host_wait > wait:
                wait, reason = host_wait, "registry"
        if wait > 0:
            metrics.RATE_LIMITED.labels(f"{reason}_bucket").inc()
        return wait

    async def acquire(self, tenant: str, host: str | None = None, n: int = 1) -> None:
        wait = self.delay(tenant, host, n)
        if wait > 0:
            await asyncio.sleep(wait)
