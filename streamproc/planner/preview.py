"""Dry run: the same planning code, nothing emitted.

Answers what a run would do now — candidate count, a sample of digests in planning order
(KEV and critical first), the number of segments and how long it would take at the
configured rates — for change keys or vuln ids (an event-driven run) or a selection (a
manual or nightly one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from streamproc.events import payloads as p
from streamproc.planner import pacing
from streamproc.planner.changes import Changes
from streamproc.planner.model import Cause, ImpactSource, Target
from streamproc.planner.plan import build_plan, host_resolver
from streamproc.planner.records import ScheduleView
from streamproc.planner.select import select_images, targets_for
from streamproc.planner.settings import PlannerSettings

PREVIEW_RUN_ID = "preview"


@dataclass
class Preview:
    candidates: int
    deduped: int
    queued: int
    spilled: int
    segments: int
    estimated_seconds: float
    sample: list[str] = field(default_factory=list)
    schedule_ids: list[str] = field(default_factory=list)
    degraded: bool = False
    degraded_reason: str | None = None


def preview(
    tenant: str,
    *,
    schedules: Sequence[ScheduleView],
    source: ImpactSource,
    cfg: PlannerSettings,
    reports: Mapping[str, tuple[int, int]] | None = None,
    keys: Collection[str] = (),
    vulns: Collection[str] = (),
    kev: Collection[str] = (),
    selection: p.Selection | None = None,
    schedule_id: str | None = None,
    trigger: p.Trigger | None = None,
    at_ms: int = 0,
) -> Preview:
    """Plan without emitting. With ``keys``/``vulns`` it previews an event-driven run over
    the tenant's subscribed schedules (or ``selection``/``schedule_id`` if given); without,
    a run over ``selection`` or the schedule (nightly if ``schedule_id``, else manual)."""
    reports = reports or {}
    event_driven = bool(keys or vulns or kev)
    if trigger is None:
        trigger = "feedser" if event_driven else "cron" if schedule_id else "manual"
    changes = None
    if event_driven:
        index = source.index
        mapped = {k for v in vulns for k in index.vuln_keys(v)}
        changes = Changes(
            keys=frozenset(keys) | mapped,
            kev_keys=frozenset(),
            critical_keys=frozenset(),
            kev_vulns=frozenset(kev),
        )
    cause = Cause(
        run_id=PREVIEW_RUN_ID,
        tenant=tenant,
        trigger=trigger,
        at_ms=at_ms,
        schedule_id=schedule_id,
        selection=selection,
        changes=changes,
    )
    targets = _targets(cause, schedules, selection, schedule_id)
    selected = select_images(
        cause, targets, source, reports, cfg.usage_only, cfg.epss_high_percentile
    )
    plan = build_plan(cause, targets, selected, cfg, host_resolver(source, tenant))
    st = plan.stats
    refresh = plan.mode == "content-refresh"
    seconds = pacing.estimate_seconds(
        st.queued,
        plan.limits.rate,
        cfg.tenant_rate,
        plan.hosts if refresh else None,
        cfg.registry_rate if refresh else None,
    )
    return Preview(
        candidates=st.candidates,
        deduped=st.deduped,
        queued=st.queued,
        spilled=st.spilled,
        segments=len(plan.segments),
        estimated_seconds=round(seconds, 3),
        sample=selected.ordered[: cfg.preview_sample],
        schedule_ids=plan.schedule_ids,
        degraded=plan.degraded,
        degraded_reason=plan.degraded_reason,
    )


def _targets(
    cause: Cause,
    schedules: Sequence[ScheduleView],
    selection: p.Selection | None,
    schedule_id: str | None,
) -> list[Target]:
    """As a real run would, except an explicit selection or schedule narrows an
    event-driven preview to it."""
    if cause.event_driven and (selection is not None or schedule_id is not None):
        manual = Cause(
            run_id=cause.run_id,
            tenant=cause.tenant,
            trigger="manual",
            at_ms=cause.at_ms,
            schedule_id=schedule_id,
            selection=selection,
        )
        return targets_for(manual, schedules)
    return targets_for(cause, schedules)
