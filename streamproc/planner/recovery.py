"""Restart check: re-queue the work items a crashed planner left unpublished — exactly once.

A planner publishes ``run.planned``, then the segment events, then the work items. If it
dies in between, the folded ``run.planned`` marker stops any replan, so those segments would
never run. Once after each start (when caught up), the planner:

1. reads which segments of unfinished runs are not yet taken by a runner, from its own
   ``pl_open`` projection (:mod:`.open_runs`) — never by guessing from the log's last
   message on a subject, which is a later ``segment.completed`` once a segment has run;
2. lists the work items the work queue holds for those tenants (batched direct get; each
   item's ``Nats-Msg-Id`` is its segment id);
3. reads the event log's head *after* that listing and waits until its projections have
   folded it; a runner publishes ``segment.started`` / ``.completed`` / ``.failed`` before it
   acknowledges or removes a work item, so a segment still not taken is one whose work item
   is in the queue (seen in step 2) or was never stored;
4. publishes the work items of the segments whose item is absent: from the segment's own
   event (fetched by its stream sequence), or — for a segment whose event never reached the
   log — from the same plan derived again. If the index changed since, so the plan no longer
   matches, those segments are not guessed at: each is closed with a ``segment.failed``
   (dead-lettered, reason ``unrecoverable_segment``, id ``derive_id(segmentId,
   "unrecoverable")``), so the run finishes like any other — its coverage names them — and
   never stays open.

Exactly once does not rest on JetStream's duplicate window (1 h): an item consumed long ago
left a ``segment.*`` event in the log, and an item still queued was seen in the listing. The
re-sent item still carries its segment id as ``Nats-Msg-Id``, so a repeat inside the window
is dropped by JetStream as well. An item that aged out of the work queue (7 days) unrun is
queued again: its segment never ran.

A check that fails (NATS unavailable, a timeout) is retried with exponential backoff
(:class:`RestartCheck`) a bounded number of times; while it fails the planner reports itself
not ready (``/readyz``, ``streamproc status``) and ``scheduler_planner_recovery_failing`` is 1.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from streamproc import metrics
from streamproc.bus import direct, jsapi
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.hlc import HybridLogicalClock
from streamproc.ids import derive_id
from streamproc.names import stream_names, work_subject
from streamproc.planner.emit import PlanEvents, planned_event_id
from streamproc.planner.model import Plan
from streamproc.planner.open_runs import OpenRunView, open_runs
from streamproc.state.store import Store

log = logging.getLogger(__name__)
Replan = Callable[[str, str], "tuple[Plan, PlanEvents] | None"]
"""``replan(tenant, run_id)``: the run's plan derived again from its request, if known."""
MAX_ATTEMPTS = 8
BACKOFF_S = 1.0
BACKOFF_CAP_S = 60.0
FOLD_TIMEOUT_S = 30.0


@dataclass
class Outcome:
    requeued: int = 0
    """Work items published again (their segment's item was absent from the queue)."""
    republished: int = 0
    """Segment events that never reached the log, published from the plan derived again."""
    unrecoverable: list[str] = field(default_factory=list)
    """Runs that lost segment events and whose plan no longer matches."""
    closed: int = 0
    """Segments of those runs closed with ``segment.failed`` (``unrecoverable_segment``)."""


async def fetch_event(pub: Publisher, stream: str, seq: int) -> bytes:
    doc = await jsapi.request(pub.nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
    return base64.b64decode(doc["message"].get("data") or b"")


async def queued_ids(pub: Publisher, work_stream: str, tenant: str) -> set[str]:
    """Segment ids of every work item the queue holds for ``tenant`` (any priority)."""
    msgs = await direct.scan(pub.nc, work_stream, work_subject(pub.prefix, tenant, "*"))
    return {m.headers.get("Nats-Msg-Id", "") for m in msgs}


def unrecoverable_events(
    view: OpenRunView, missing: Iterable[str], clock: HybridLogicalClock
) -> list[Envelope]:
    """A dead-lettered ``segment.failed`` for each segment whose event a crash lost and that
    no plan derives any more: the run's completion then accounts for them (pure but for the
    clock; ids from the segment, so a repeated check emits nothing new)."""
    run = view.run
    images = dict(zip(run.segments, run.images, strict=False))
    return [
        new_event(
            "segment.failed",
            run.tenant,
            p.SegmentFailed(
                segment_id=sid,
                run_id=run.run_id,
                reason=f"{p.SEGMENT_UNRECOVERABLE}: its {images.get(sid, 0)} image(s) were "
                "planned, the event was lost in a planner crash and the index changed since",
                dead_lettered=True,
            ),
            clock.now(),
            event_id=derive_id(sid, "unrecoverable"),
            causation_id=planned_event_id(run.run_id),
            correlation_id=run.run_id,
        )
        for sid in sorted(missing)
    ]


async def requeue_lost(
    pub: Publisher,
    store: Store,
    wait_for: Callable[[int, float], Awaitable[None]],
    replan: Replan,
    clock: HybridLogicalClock,
    *,
    stream: str = "",
    head: Callable[[], Awaitable[int]] | None = None,
) -> Outcome:
    """One restart check (steps 1 to 4 above); raises on any NATS error (nothing half-done
    matters: a retry redoes it and JetStream drops repeats by id). ``stream`` and ``head``:
    the stream ``store`` folds and where it must reach, when it is not the event log (a
    planner partition)."""
    events_stream, work_stream, _ = stream_names(pub.prefix)
    events_stream = stream or events_stream
    out = Outcome()
    queued: dict[str, set[str]] = {}
    for n in range(3):  # a run folded only now (published before this start) adds a tenant
        tenants = {v.run.tenant for v in open_runs(store) if _waiting(v)} - queued.keys()
        if n and not tenants:
            break
        for t in sorted(tenants):
            queued[t] = await queued_ids(pub, work_stream, t)
        if head is not None:
            await wait_for(await head(), FOLD_TIMEOUT_S)
            continue
        info = await jsapi.stream_info(pub.nc, events_stream)
        if info is not None:
            await wait_for(info.state.last_seq, FOLD_TIMEOUT_S)
    items: list[tuple[str, bytes, str]] = []
    for view in open_runs(store):
        tenant, run_id = view.run.tenant, view.run.run_id
        if tenant not in queued:
            if _waiting(view):
                log.warning("planner: restart check skipped run %s of %s (still arriving)",
                            run_id, tenant)  # fmt: skip
            continue
        missing = {sid for sid, s in view.segments.items() if s.state == "planned"}
        for sid, s in view.segments.items():
            if s.state == "enqueued" and sid not in queued[tenant]:
                raw = await fetch_event(pub, events_stream, s.seq)
                items.append((work_subject(pub.prefix, tenant, s.priority), raw, sid))
        if missing:
            again = replan(tenant, run_id)
            want = list(zip(view.run.segments, view.run.images, strict=False))
            got = [(s.segment_id, len(s.digests)) for s in again[0].segments] if again else None
            if got != want:
                log.error(
                    "planner: run %s of %s lost %d segment(s) in a crash and its plan has "
                    "changed since; closing them as failed (%s), so the run finishes without "
                    "them — request it again to evaluate their images",
                    run_id,
                    tenant,
                    len(missing),
                    p.SEGMENT_UNRECOVERABLE,
                )
                metrics.PLANNER_ERRORS.labels("unrecoverable_segments").inc()
                out.unrecoverable.append(f"{tenant}/{run_id}")
                closed = unrecoverable_events(view, missing, clock)
                await pub.publish_events(closed)
                out.closed += len(closed)
                continue
            assert again is not None
            lost = [e for e in again[1].segments if e.id in missing]
            await pub.publish_events(lost)
            out.republished += len(lost)
            items.extend(
                (work_subject(pub.prefix, e.tenant, e.payload.priority), encode(e), e.id)
                for e in lost
            )
    await pub.publish_many(items)
    out.requeued = len(items)
    return out


def _waiting(view: OpenRunView) -> bool:
    return any(s.state != "taken" for s in view.segments.values())


class RestartCheck:
    """When to run the check again after a failure: exponential backoff, a bounded number of
    attempts; what to tell ``/readyz`` and ``status`` meanwhile."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.attempts = 0
        self.done = False
        self.gave_up = False
        self.next_at = 0.0
        self.problem: str | None = None

    def due(self) -> bool:
        return not (self.done or self.gave_up) and self.clock() >= self.next_at

    def succeeded(self) -> None:
        self.done = True
        self.problem = None
        metrics.PLANNER_RECOVERY_FAILING.set(0)

    def failed(self, exc: BaseException) -> None:
        self.attempts += 1
        metrics.PLANNER_ERRORS.labels("recovery").inc()
        metrics.PLANNER_RECOVERY_FAILING.set(1)
        reason = f"{type(exc).__name__}: {exc}"[:400]
        if self.attempts >= MAX_ATTEMPTS:
            self.gave_up = True
            self.problem = (
                f"restart check failed {self.attempts} times, gave up: {reason}; work items "
                f"a crash left unpublished are not re-queued until the planner restarts"
            )
            log.error("planner: %s", self.problem)
            return
        pause = min(BACKOFF_CAP_S, BACKOFF_S * 2 ** (self.attempts - 1))
        self.next_at = self.clock() + pause
        self.problem = (
            f"restart check failed (attempt {self.attempts} of {MAX_ATTEMPTS}, next in "
            f"{pause:.0f} s): {reason}"
        )
        log.warning("planner: %s", self.problem)
