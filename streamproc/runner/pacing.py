"""The buckets one segment's scanner calls are paced by, as the planner recorded them.

A report call (``POST /reports``, each attempt, retries after a 429 or a 5xx included)
takes a token of the run's bucket (``ratePerSecond`` over all the run's segments) and of
the tenant's. A registry call of a content refresh (``GET /resolve``, ``POST /scans``) takes
one of its registry host's bucket, which every tenant's refreshes on that host share.
"""

from __future__ import annotations

import asyncio

from streamproc.events import payloads as p
from streamproc.runner.limiter import BucketSpec, Limiter
from streamproc.runner.ratebucket import key_of

DEFAULT_BURST_S = 1.0
"""Of a segment planned without ``burstS`` (schema 1): ``STREAMPROC_PLANNER_BURST_S``'s default."""


def report_buckets(tenant: str, seg: p.SegmentEnqueued) -> list[BucketSpec]:
    burst = seg.burst_s or DEFAULT_BURST_S
    out = []
    if seg.rate_per_second:
        key = key_of("run", tenant, seg.run_id)
        out.append(BucketSpec(key, seg.rate_per_second, burst, "run_rate"))
    if seg.tenant_rate:
        out.append(BucketSpec(key_of("tenant", tenant), seg.tenant_rate, burst, "tenant_bucket"))
    return out


def registry_buckets(seg: p.SegmentEnqueued) -> list[BucketSpec]:
    if seg.mode != "content-refresh" or not seg.registry_host or not seg.registry_rate:
        return []
    key = key_of("host", seg.registry_host)
    return [BucketSpec(key, seg.registry_rate, seg.burst_s or DEFAULT_BURST_S, "registry_bucket")]


class SegmentPace:
    """What a segment's lanes await before each scanner call; :class:`~.limiter.Stopped`
    once ``stop`` is set (the run was cancelled)."""

    def __init__(
        self, limiter: Limiter, tenant: str, seg: p.SegmentEnqueued, stop: asyncio.Event
    ) -> None:
        self.limiter = limiter
        self.stop = stop
        self._report = report_buckets(tenant, seg)
        self._registry = registry_buckets(seg)

    async def report(self) -> None:
        await self.limiter.acquire(self._report, self.stop)

    async def registry(self) -> None:
        await self.limiter.acquire(self._registry, self.stop)
