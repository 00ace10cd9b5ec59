"""The planner reactor: after each commit (and on a timer) it plans what is due and
publishes ``run.planned``, its ``segment.enqueued`` events and the work items, in that order.

What is due, all read from the committed projections:

- ``run.requested`` events not yet planned (manual, cron, replans after a crash);
- export groups that are due (:func:`~streamproc.planner.changes.coalesce`, by the
  exports' HLC times): the first export of a quiet tenant and source at once, the exports
  that arrive within the debounce window after a run together when it closes — the planner
  originates their ``run.requested`` (id ``derive_id("run", tenant, *export ids)``);
- spill backlogs whose next window has come — a continuation run from the next image on.

The planner acts on its own groups and backlogs only when it has caught up with the stream
(``lag() == 0``), so a restart never plans from a half-folded picture. A crash anywhere
between publishing and folding back is harmless: the redo derives the same ids, JetStream
de-duplicates them, and the ``run.planned`` marker, once folded, stops further redos.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import msgspec
from msgspec import UNSET

from streamproc import metrics, tracing
from streamproc.config import Settings
from streamproc.crashpoints import crash_point
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.hlc import wall_ms
from streamproc.impact.projection import impact_projection
from streamproc.names import IMPACT
from streamproc.planner import pacing
from streamproc.planner.changes import Changes, ExportGroup, coalesce
from streamproc.planner.emit import PlanEvents, plan_events, request_event
from streamproc.planner.exports import PlannerExports
from streamproc.planner.model import Cause, ImpactSource, Plan
from streamproc.planner.plan import build_plan, host_resolver
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.records import Backlog, RunRecord
from streamproc.planner.recovery import RestartCheck, requeue_lost
from streamproc.planner.select import Selected, select_images, targets_for
from streamproc.planner.settings import PlannerSettings
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.runtime.reactor import Reactor, RoleContext

log = logging.getLogger(__name__)
RECOVERY_PROBLEM = "recovery"
"""The name under which a failing restart check is reported (``RoleContext.problems``)."""
INFLIGHT_RETRY_S = 60.0
"""A published plan whose ``run.planned`` has not folded back after this long is redone
(with the same ids: harmless if the original lands after all)."""


@dataclass
class Due:
    """One run to plan now."""

    tenant: str
    run_id: str
    rank: int
    ms: int
    record: RunRecord | None = None
    group: ExportGroup | None = None
    backlog: Backlog | None = None


@dataclass
class PlannerState:
    schedules: PlannerSchedules
    exports: PlannerExports
    runs: PlannerRuns
    reports: LastReports

    @classmethod
    def of(cls, shared: Mapping[str, object]) -> PlannerState | None:
        parts = [shared.get(c.name) for c in (PlannerSchedules, PlannerExports, PlannerRuns)]
        reports = shared.get(LastReports.name)
        s, e, r = parts
        if not (
            isinstance(s, PlannerSchedules)
            and isinstance(e, PlannerExports)
            and isinstance(r, PlannerRuns)
            and isinstance(reports, LastReports)
        ):
            return None
        return cls(s, e, r, reports)


def fair_order(items: list[Due]) -> list[Due]:
    """Most urgent first within a tenant (manual, event, nightly; then oldest), and one
    tenant at a time round-robin, so one tenant's pile never delays another's first run."""
    per: dict[str, list[Due]] = {}
    for d in sorted(items, key=lambda d: (d.rank, d.ms, d.run_id)):
        per.setdefault(d.tenant, []).append(d)
    queues = sorted(per.values(), key=lambda q: (q[0].rank, q[0].ms, q[0].tenant))
    out: list[Due] = []
    depth = 0
    while len(out) < len(items):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


class PlannerReactor(Reactor):
    interval: ClassVar[float | None] = 0.5

    def __init__(
        self,
        settings: Settings,
        planner: PlannerSettings | None = None,
        *,
        source: ImpactSource | None = None,
        wall: Callable[[], int] = wall_ms,
    ) -> None:
        self.settings = settings
        self.cfg = planner or settings.configuration.built(planner_from_sections)
        self.source = source
        self.wall = wall
        self.inflight: dict[tuple[str, str], float] = {}
        """Runs published but whose ``run.planned`` has not folded back yet."""
        self._inflight_exports: dict[tuple[str, str], set[str]] = {}
        self._inflight_windows: dict[tuple[str, str], tuple[str, int]] = {}
        """Per in-flight group run, its source and HLC ms: the window it opens, until its
        ``run.requested`` is folded and the cursor says so."""
        self._warned = False
        self.planned = 0
        self.passes = 0
        """Completed passes (tests wait on it to know the planner has looked)."""
        self._backlog_tenants: set[str] = set()
        self.recovered = False
        """Whether the restart check (:mod:`.recovery`) has succeeded in this term."""
        self.check = RestartCheck()

    # ------------------------------------------------------------------ the pass

    async def react(self, ctx: RoleContext) -> None:
        state = PlannerState.of(ctx.shared)
        source = self.source
        if source is None and IMPACT in ctx.shared:
            source = impact_projection(ctx.shared)
        if state is None or source is None:
            if not self._warned:
                log.warning("planner: no %s projection in this process; not planning", IMPACT)
                self._warned = True
            return
        if not self.recovered and ctx.lag() == 0:
            await self._recover(ctx, state, source)
        self._settle(state)
        due = self._due(state, ctx)
        for d in fair_order(due)[: self.cfg.max_runs_per_pass]:
            with tracing.span("plan", tenant=d.tenant, run_id=d.run_id):
                await self._plan(ctx, state, source, d)
        self._gauge(state)
        self.passes += 1

    def end_term(self) -> None:
        """A standby runs no restart check: a failing one of the ended term is not ours."""
        if self.check.problem is not None:
            metrics.PLANNER_RECOVERY_FAILING.set(0)

    async def _recover(self, ctx: RoleContext, state: PlannerState, source: ImpactSource) -> None:
        """The restart check (:mod:`.recovery`), retried with backoff while it fails."""
        check = self.check
        if not check.due():
            return

        def replan(tenant: str, run_id: str) -> tuple[Plan, PlanEvents] | None:
            rec = state.runs.record(tenant, run_id)
            if rec is None or rec.request is None:
                return None
            cause = self._cause_of(
                state, rec.tenant, rec.request, rec.cause_ms or rec.ms, rec.offset
            )
            targets = targets_for(cause, state.schedules.for_tenant(rec.tenant))
            selected = select_images(
                cause,
                targets,
                source,
                state.reports.get(rec.tenant),
                self.cfg.usage_only,
                self.cfg.epss_high_percentile,
            )
            plan = build_plan(cause, targets, selected, self.cfg, host_resolver(source, rec.tenant))
            return plan, plan_events(
                plan, ctx.clock, cause_event_id=rec.event_id, cause_hlc=rec.hlc
            )

        try:
            out = await requeue_lost(
                ctx.publisher,
                ctx.store,
                ctx.wait_for,
                replan,
                ctx.clock,
                stream=ctx.folded_stream,
                head=ctx.folded_head,
            )
        except Exception as exc:  # retried after a backoff, a bounded number of times
            check.failed(exc)
            ctx.problems[RECOVERY_PROBLEM] = check.problem or str(exc)
            return
        check.succeeded()
        ctx.problems.pop(RECOVERY_PROBLEM, None)
        metrics.PLANNER_REQUEUED.inc(out.requeued)
        log.log(
            logging.WARNING if out.requeued else logging.INFO,
            "planner: restart check done: %d work item(s) a crash left unpublished re-queued",
            out.requeued,
        )
        self.recovered = True

    def _settle(self, state: PlannerState) -> None:
        now = time.monotonic()
        for k, since in list(self.inflight.items()):
            if state.runs.is_settled(*k) or now - since > INFLIGHT_RETRY_S:
                del self.inflight[k]
                self._forget(k)

    def _forget(self, key: tuple[str, str]) -> None:
        self._inflight_exports.pop(key, None)
        self._inflight_windows.pop(key, None)

    def _due(self, state: PlannerState, ctx: RoleContext) -> list[Due]:
        now = self.wall()
        out: list[Due] = []
        for (tenant, run_id), rec in state.runs.pending.items():
            if (tenant, run_id) not in self.inflight and rec.request is not None:
                rank = pacing.PRIORITY_BASE[rec.request.trigger]
                out.append(Due(tenant, run_id, rank, rec.ms, record=rec))
        if ctx.lag() > 0:
            return out  # our own groups and backlogs wait until we have caught up
        claimed = {
            x for k, ids in self._inflight_exports.items() for x in ids if k in self.inflight
        }
        opened: dict[tuple[str, str], int] = {}
        for (tenant, _), (source, at) in self._inflight_windows.items():
            opened[(tenant, source)] = max(at, opened.get((tenant, source), at))
        for (tenant, source), pending in state.exports.pending.items():
            waiting = [e for e in pending.values() if f"{source}/{e.export_id}" not in claimed]
            windows = (state.exports.cursor(tenant).window_ms(source), opened.get((tenant, source)))
            window = max((w for w in windows if w is not None), default=None)
            for g in coalesce(waiting, self.cfg.debounce_ms, window):
                if g.due_ms <= now and (tenant, g.run_id) not in self.inflight:
                    out.append(
                        Due(tenant, g.run_id, pacing.PRIORITY_BASE[source], g.start_ms, group=g)
                    )
        for (tenant, run_id), b in state.runs.backlog.items():
            if (
                b.planned_ms + self.cfg.spill_delay_ms <= now
                and (tenant, run_id) not in self.inflight
            ):
                rank = pacing.PRIORITY_BASE[b.request.trigger]
                out.append(Due(tenant, run_id, rank, b.planned_ms, backlog=b))
        return out

    # ------------------------------------------------------------------ one run

    def _cause(
        self, ctx: RoleContext, state: PlannerState, d: Due
    ) -> tuple[Cause, Envelope | None, str | None, str | None]:
        """The cause to plan, the ``run.requested`` we originate (if any), and the id and
        HLC of the event that caused it."""
        if d.record is not None:
            rec = d.record
            req = rec.request
            assert req is not None
            return (
                self._cause_of(state, d.tenant, req, rec.cause_ms or rec.ms, rec.offset),
                None,
                rec.event_id,
                rec.hlc,
            )
        if d.group is not None:
            g = d.group
            ids = g.export_ids
            revisions = g.revisions
            text = f"{len(ids)} {g.source} export(s) coalesced"
            if revisions:
                text += f", {len(revisions)} at a later revision (keep last)"
            req = p.RunRequested(
                run_id=g.run_id,
                trigger=g.source,
                reason=p.RunReason(
                    feedser_export_ids=ids if g.source == "feedser" else [],
                    vexer_export_ids=ids if g.source == "vexer" else [],
                    revisions=revisions or UNSET,
                    text=text,
                ),
                requested_by="planner",
            )
            latest = g.latest
            ev = request_event(req, d.tenant, ctx.clock, latest.event_id, latest.hlc)
            at = ev.timestamp.physical
            cause = Cause(
                run_id=g.run_id,
                tenant=d.tenant,
                trigger=g.source,
                at_ms=at,
                changes=Changes.of(state.exports.to_plan(e) for e in g.exports),
            )
            return cause, ev, None, None
        b = d.backlog
        assert b is not None
        req = msgspec.structs.replace(
            b.request,
            run_id=b.run_id,
            reason=msgspec.structs.replace(
                b.request.reason,
                text=f"spill-over of run {b.root_run_id} from image {b.offset}",
            ),
            requested_by="planner",
        )
        ev = request_event(req, d.tenant, ctx.clock, None, None)
        return self._cause_of(state, d.tenant, req, b.cause_ms, b.offset), ev, None, None

    def _cause_of(
        self, state: PlannerState, tenant: str, req: p.RunRequested, at_ms: int, offset: int
    ) -> Cause:
        changes = None
        if req.trigger in ("feedser", "vexer"):
            changes = Changes.of(state.exports.exports_of(tenant, req))
        return Cause(
            run_id=req.run_id,
            tenant=tenant,
            trigger=req.trigger,
            at_ms=at_ms,
            mode=req.mode,
            schedule_id=req.schedule_id,
            selection=req.selection,
            changes=changes,
            offset=offset,
        )

    async def _plan(
        self, ctx: RoleContext, state: PlannerState, source: ImpactSource, d: Due
    ) -> None:
        t0 = time.perf_counter()
        cause, originated, cause_id, cause_hlc = self._cause(ctx, state, d)
        mode = pacing.mode_of(cause.trigger)
        with tracing.span("resolve", tenant=d.tenant, run_id=d.run_id, trigger=cause.trigger):
            targets = targets_for(cause, state.schedules.for_tenant(d.tenant))
            if d.record is not None and d.record.state == "cancelled":
                # Cancelled before it was planned: an empty plan, which the runner ends
                # ``cancelled`` (without a plan the run would stay ``planning``).
                selected = Selected([], [], 0, 0, 0, None)
            else:
                selected = select_images(
                    cause,
                    targets,
                    source,
                    state.reports.get(d.tenant),
                    self.cfg.usage_only,
                    self.cfg.epss_high_percentile,
                )
        metrics.IMPACT_RESOLVE_SECONDS.labels(mode).observe(time.perf_counter() - t0)
        plan = build_plan(cause, targets, selected, self.cfg, host_resolver(source, d.tenant))
        events = plan_events(
            plan,
            ctx.clock,
            originated,
            cause_event_id=cause_id,
            cause_hlc=cause_hlc,
            originated=originated is not None,
        )
        key = (d.tenant, d.run_id)
        self.inflight[key] = time.monotonic()
        if d.group is not None and originated is not None:
            self._inflight_exports[key] = {f"{d.group.source}/{x}" for x in d.group.export_ids}
            self._inflight_windows[key] = (d.group.source, originated.timestamp.physical)
        try:
            with tracing.span(
                "enqueue", tenant=d.tenant, run_id=d.run_id, segments=len(events.segments)
            ):
                await ctx.publisher.publish_events(events.log_events())
                crash_point("planner.after_log_events")  # a test hook (STREAMPROC_CRASH_AT)
                await ctx.publisher.publish_many(events.work_items(ctx.publisher.prefix))
        except Exception as exc:  # the next pass redoes it with the same ids
            log.warning("planner: run %s of %s not published: %s", d.run_id, d.tenant, exc)
            metrics.PLANNER_ERRORS.labels("publish").inc()
            self.inflight.pop(key, None)
            self._forget(key)
            return
        self.planned += 1
        metrics.RUNS_PLANNED.labels(cause.trigger, str(plan.degraded).lower()).inc()
        metrics.IMAGES_SELECTED.labels(mode).inc(plan.stats.deduped)
        metrics.JOBS_ENQUEUED.labels(mode).inc(plan.stats.queued)
        metrics.PLAN_SECONDS.labels(mode).observe(time.perf_counter() - t0)
        if plan.degraded:
            log.info("planner: run %s of %s degraded: %s", d.run_id, d.tenant, plan.degraded_reason)

    def _gauge(self, state: PlannerState) -> None:
        now = state.runs.backlog_images()
        for tenant in self._backlog_tenants - now.keys():
            metrics.PLANNER_BACKLOG.labels(tenant).set(0)
        for tenant, n in now.items():
            metrics.PLANNER_BACKLOG.labels(tenant).set(n)
        self._backlog_tenants = set(now)
