"""The buckets one segment's scanner calls are paced by, as the planner recorded them.

Evaluating an image — a report call (``POST /reports``), or a run of the configured tool on
the stored SBOM; each attempt, retries after a 429 or a 5xx included — takes a token of the
run's bucket (``ratePerSecond`` over all the run's segments) and of the tenant's. A registry
call of a content refresh (``GET /resolve``, ``POST /scans``) takes one of its registry
host's bucket, which every tenant's refreshes on that host share.
"""

from __future__ import annotations

import asyncio

from msgspec import UnsetType

from streamproc.events import payloads as p
from streamproc.runner.limiter import BucketSpec, Limiter
from streamproc.runner.ratebucket import key_of

DEFAULT_BURST_S = 1.0
"""Of a segment planned without ``burstS`` (schema 1): ``STREAMPROC_PLANNER_BURST_S``'s default."""


def _burst(seg: p.SegmentEnqueued) -> float:
    return DEFAULT_BURST_S if isinstance(seg.burst_s, UnsetType) else seg.burst_s


def report_buckets(tenant: str, seg: p.SegmentEnqueued) -> list[BucketSpec]:
    out = []
    if seg.rate_per_second:
        key = key_of("run", tenant, seg.run_id)
        out.append(BucketSpec(key, seg.rate_per_second, _burst(seg), "run_rate"))
    if not isinstance(seg.tenant_rate, UnsetType):
        key = key_of("tenant", tenant)
        out.append(BucketSpec(key, seg.tenant_rate, _burst(seg), "tenant_bucket"))
    return out


def registry_buckets(seg: p.SegmentEnqueued) -> list[BucketSpec]:
    host, rate = seg.registry_host, seg.registry_rate
    if seg.mode != "content-refresh" or isinstance(host, UnsetType) or isinstance(rate, UnsetType):
        return []
    return [BucketSpec(key_of("host", host), rate, _burst(seg), "registry_bucket")]


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
