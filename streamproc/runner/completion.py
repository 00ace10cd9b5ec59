"""Finishing runs: once every segment of a run is accounted for, publish its Notify
``run.summary`` and then ``run.completed`` (or ``run.cancelled``), each exactly once.

Both ids are derived from the run (``derive_id(runId, "completed")`` …), so every runner
replica may try and JetStream keeps one. The summary goes first: the terminal event, once
folded, is the proof that the summary was stored, and a crash between the two re-sends the
summary with the same id. Stats and coverage are computed from the projection alone.
"""

from __future__ import annotations

import logging
import time

from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.ids import derive_id
from streamproc.notify import messages as nm
from streamproc.runner.delta import RANK
from streamproc.runner.records import Reader, RunRec, VulnAgg
from streamproc.runtime.reactor import RoleContext

log = logging.getLogger(__name__)
RETRY_S = 10.0
"""A terminal event not folded back within this long is published again (same id)."""


def final_stats(rec: RunRec) -> tuple[p.RunStats, p.Coverage]:
    completed = failed = cancelled = dead = 0
    for d in rec.done.values():
        completed += d.completed
        failed += d.failed
        cancelled += d.cancelled
    reasons: dict[str, int] = dict(rec.failure_reasons)
    lost = 0
    for sid, d in rec.done.items():
        if d.dead_lettered:
            ok, bad = rec.verdicts.get(sid, [0, 0])
            n = max(0, rec.segments.get(sid, 0) - ok - bad)
            if (d.reason or "").startswith(p.SEGMENT_UNRECOVERABLE):
                lost += n  # closed by the planner: its event was lost in a crash
            else:
                dead += n
    if dead:
        reasons["dead_lettered"] = dead
    if lost:
        reasons[p.SEGMENT_UNRECOVERABLE] = lost
    if cancelled:
        reasons["cancelled"] = cancelled
    if rec.plan.spilled:
        reasons["spilled_over_max_jobs"] = rec.plan.spilled
    stats = p.RunStats(
        candidates=rec.plan.candidates,
        deduped=rec.plan.deduped,
        queued=rec.plan.queued,
        spilled=rec.plan.spilled,
        completed=completed,
        failed=failed,
        cancelled=cancelled,
        deltas=rec.deltas,
        new_criticals=rec.new_criticals,
    )
    coverage = p.Coverage(
        evaluated=completed,
        not_evaluated=failed + cancelled + rec.plan.spilled,
        reasons={k: v for k, v in sorted(reasons.items()) if v},
    )
    return stats, coverage


def coverage_line(c: p.Coverage) -> str:
    """``evaluated 498, not re-evaluated 2 (timeout 1, dead_lettered 1)``"""
    why = ", ".join(f"{k} {v}" for k, v in c.reasons.items())
    return f"evaluated {c.evaluated}, not re-evaluated {c.not_evaluated}" + (
        f" ({why})" if why else ""
    )


def summary_vulns(aggs: dict[str, VulnAgg]) -> list[nm.VulnImages]:
    """KEV first, then by EPSS (none counts as 0), severity, images, id."""
    order = sorted(
        aggs.items(),
        key=lambda kv: (
            not kv[1].kev,
            -(kv[1].epss.score if isinstance(kv[1].epss, p.Epss) else 0.0),
            -RANK[kv[1].severity],
            -kv[1].count,
            kv[0],
        ),
    )
    return [
        nm.VulnImages(
            vuln_id=vid,
            severity=a.severity,  # type: ignore[arg-type]  # severity was validated against the Literal when the verdict was folded
            kev=a.kev,
            epss=nm.epss_of(a.epss or None),
            image_count=a.count,
            images=list(a.digests),
            truncated=a.count > len(a.digests),
        )
        for vid, a in order
    ]


class Completer:
    def __init__(self) -> None:
        self._sent: dict[tuple[str, str], float] = {}

    async def check(self, ctx: RoleContext) -> int:
        reader = Reader(ctx.store)
        finished = 0
        now = time.monotonic()
        still_open: set[tuple[str, str]] = set()
        for rec in reader.open_runs():
            k = (rec.tenant, rec.run_id)
            still_open.add(k)
            if rec.terminal is not None or not rec.accounted():
                continue
            if now - self._sent.get(k, -RETRY_S) < RETRY_S:
                continue
            self._sent[k] = now
            await self.finish(ctx, reader, rec)
            finished += 1
        for k in self._sent.keys() - still_open:  # completed: nothing more to send for it
            del self._sent[k]
        return finished

    async def finish(self, ctx: RoleContext, reader: Reader, rec: RunRec) -> None:
        stats, coverage = final_stats(rec)
        # A cancel ends the run ``cancelled`` when it stopped work, or when it came before
        # the plan (which is then empty).
        cancelled = rec.cancel_requested and (stats.cancelled > 0 or not rec.segments)
        stamp = ctx.clock.now()
        state = "cancelled" if cancelled else "completed"
        if not cancelled and stats.candidates and not stats.completed and stats.failed:
            state = "error"
        summary = nm.RunSummary(
            id=nm.summary_id(rec.run_id),
            tenant=rec.tenant,
            run_id=rec.run_id,
            ts=nm.iso(stamp.physical),
            state=state,  # type: ignore[arg-type]  # state is one of the Literal values by the branch above
            totals=nm.RunTotals(
                candidates=stats.candidates,
                completed=stats.completed,
                failed=stats.failed,
                cancelled=stats.cancelled,
                deltas=stats.deltas,
                new_criticals=stats.new_criticals,
                resolved=rec.resolved or 0,
            ),
            vulnerabilities=summary_vulns(reader.summary(rec.tenant, rec.run_id)),
        )
        await ctx.publisher.publish(
            nm.subject(ctx.settings.prefix, rec.tenant, "run.summary"),
            nm.encode(summary),
            summary.id,
        )
        if cancelled:
            kind, eid = "run.cancelled", derive_id(rec.run_id, "cancelled")
            payload: p.Payload = p.RunCancelled(
                run_id=rec.run_id, reason=rec.cancel_reason, stats=stats
            )
        else:
            kind, eid = "run.completed", derive_id(rec.run_id, "completed")
            payload = p.RunCompleted(
                run_id=rec.run_id,
                state=state,  # type: ignore[arg-type]  # state is one of the Literal values by the branch above
                stats=stats,
                coverage=coverage,
                error=None
                if state != "error"
                else f"no image evaluated: {coverage_line(coverage)}",
            )
        event = new_event(kind, rec.tenant, payload, stamp, event_id=eid, correlation_id=rec.run_id)
        await ctx.publisher.publish_event(event)
        log.info("run %s/%s %s: %s", rec.tenant, rec.run_id, state, coverage_line(coverage))
