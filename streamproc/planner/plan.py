"""Planning: a pure function of folded state, the impact index and the triggering cause.

    change keys ─► subscribed schedules ─► resolve (usage_only, selector) per schedule
      ─► de-duplicate by digest ─► onlyIf ─► order KEV, critical, rest ─► cap at maxJobs
      (at most max_jobs_per_run; the surplus spills to a continuation run)
      ─► shard by digest hash ─► segments

No clock, no I/O: "now" is the cause's own HLC time, ids derive from the run id, and the
same state and cause always give the same plan — which is what makes a crash and redo emit
the same ids for JetStream to de-duplicate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from streamproc.events import payloads as p
from streamproc.planner import pacing
from streamproc.planner.model import (
    Cause,
    ImpactSource,
    Plan,
    SegmentPlan,
    Target,
    segment_id,
)
from streamproc.planner.records import ScheduleView
from streamproc.planner.select import Selected, hash32, select_images, targets_for
from streamproc.planner.settings import PlannerSettings


def shard_of(digest_hash: int, shards: int) -> int:
    """The hash prefix scaled to ``shards``: uniform, and stable for a digest."""
    return (digest_hash * shards) >> 32


def build_plan(
    cause: Cause,
    targets: Sequence[Target],
    selected: Selected,
    cfg: PlannerSettings,
    host_of: Callable[[str], str] | None = None,
) -> Plan:
    """Cap, shard and cut into segments. ``host_of`` gives a digest's registry host (only
    used for content-refresh, whose segments each stay on one host)."""
    limits = pacing.run_limits(
        [t.limits for t in targets],
        max_jobs=cfg.max_jobs_per_run,
        rate=cfg.default_rate,
        parallelism=cfg.default_parallelism,
    )
    degraded = selected.degraded_reason is not None
    # The ceiling holds for schedules recorded before it was lowered too (the gateway
    # refuses a larger limits.maxJobs; the surplus spills to continuation runs).
    max_jobs = min(limits.max_jobs, cfg.max_jobs_per_run)
    if degraded and cause.event_driven:
        max_jobs = min(max_jobs, cfg.degraded_max_jobs)
    total = len(selected.ordered)
    start = min(cause.offset, total)
    end = min(total, start + max_jobs)
    mode = _run_mode(cause, targets)
    refresh = mode == "content-refresh" and host_of is not None
    groups: dict[tuple[int, str, int], list[str]] = {}
    hosts: dict[str, int] = {}
    for i in range(start, end):
        d = selected.ordered[i]
        host = host_of(d) if refresh and host_of is not None else ""
        if refresh:
            hosts[host] = hosts.get(host, 0) + 1
        groups.setdefault(
            (selected.tiers[i], host, shard_of(hash32(d), limits.parallelism)), []
        ).append(d)
    segments: list[SegmentPlan] = []
    size = cfg.segment_size
    for (tier, host, shard), digests in sorted(groups.items()):
        for j in range(0, len(digests), size):
            n = len(segments)
            segments.append(
                SegmentPlan(
                    segment_id=segment_id(cause.run_id, n),
                    shard=shard,
                    digests=digests[j : j + size],
                    priority=pacing.priority_digit(cause.trigger, tier),
                    rate_per_second=limits.rate,
                    mode=mode,
                    tier=tier,
                    host=host,
                )
            )
    stats = p.RunStats(
        candidates=selected.candidates,
        deduped=selected.deduped,
        queued=end - start,
        spilled=total - end,
    )
    return Plan(
        run_id=cause.run_id,
        tenant=cause.tenant,
        trigger=cause.trigger,
        schedule_ids=sorted({t.schedule_id for t in targets if t.schedule_id}),
        stats=stats,
        segments=segments,
        limits=pacing.RunLimits(max_jobs, limits.rate, limits.parallelism),
        mode=mode,
        degraded=degraded,
        degraded_reason=selected.degraded_reason,
        keys=selected.keys,
        hosts=hosts,
        buckets=pacing.Buckets(cfg.tenant_rate, cfg.registry_rate, cfg.burst_s),
        policy_revision=_policy_revision(targets),
    )


def _policy_revision(targets: Sequence[Target]) -> str | None:
    """The ``onlyIf.policyRevision`` the run's schedules name, if they name one; schedules
    that name different ones get the scanner's current policy (None)."""
    named = {t.only_if.policy_revision for t in targets if t.only_if.policy_revision}
    return named.pop() if len(named) == 1 else None


def _run_mode(cause: Cause, targets: Sequence[Target]) -> p.Mode:
    """Event-driven runs re-evaluate stored SBOMs (analysis-only); the others take the
    request's mode, or their schedule's."""
    if cause.event_driven:
        return "analysis-only"
    if cause.trigger == "cron" and targets:
        return targets[0].mode
    return cause.mode


def plan_run(
    cause: Cause,
    schedules: Sequence[ScheduleView],
    source: ImpactSource,
    reports: Mapping[str, tuple[int, int]],
    cfg: PlannerSettings,
) -> Plan:
    """The whole plan of one cause (what the reactor publishes and the preview shows)."""
    targets = targets_for(cause, schedules)
    selected = select_images(
        cause, targets, source, reports, cfg.usage_only, cfg.epss_high_percentile
    )
    return build_plan(cause, targets, selected, cfg, host_resolver(source, cause.tenant))


def host_resolver(source: ImpactSource, tenant: str) -> Callable[[str], str]:
    index = source.index

    def host_of(digest: str) -> str:
        img = index.image(tenant, digest)
        return img.registry if img is not None and img.registry else "unknown"

    return host_of
