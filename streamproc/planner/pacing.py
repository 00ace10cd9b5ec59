"""Pacing: priority digits, run limits, and the buckets recorded on segments.

The planner does not hold work back; it decides *how fast* a run may be worked and *how
urgent* each segment is, and records both on the segment: the run's rate, the tenant's
bucket and, for content refresh, the registry host's. Runners share those buckets across
processes (:mod:`streamproc.runner.limiter`) and take segments by the priority digit of the
work subject: manual 0-2 < event-driven 3-5 < nightly 6-8, and within a class KEV 0,
critical 1, the rest 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Buckets:
    """The tenant and registry-host buckets a plan records on its segments (the settings
    ``STREAMPROC_PLANNER_TENANT_RATE``, ``_REGISTRY_RATE`` and ``_BURST_S`` when planned)."""

    tenant_rate: int
    registry_rate: int
    burst_s: float


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
