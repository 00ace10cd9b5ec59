"""A plan as events: ``run.requested`` (when the planner originates the run), ``run.planned``
and one ``segment.enqueued`` per segment, plus the work items for the work queue.

Every id derives from the run id (``derive_id(run_id, "planned")``, ``derive_id(run_id,
"segment", n)``), and the work item is the segment's very envelope bytes published with
``Nats-Msg-Id`` = its event id, so a redo after a crash is absorbed by JetStream.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.hlc import ClockSkewError, HybridLogicalClock, Timestamp
from streamproc.ids import derive_id
from streamproc.names import work_subject
from streamproc.planner.model import Plan


def planned_event_id(run_id: str) -> str:
    return derive_id(run_id, "planned")


@dataclass
class PlanEvents:
    requested: Envelope | None
    planned: Envelope
    segments: list[Envelope]

    def log_events(self) -> list[Envelope]:
        """In publishing order: the request (if ours), the plan, then its segments."""
        head = [self.requested] if self.requested is not None else []
        return [*head, self.planned, *self.segments]

    def work_items(self, prefix: str) -> list[tuple[str, bytes, str]]:
        return [
            (work_subject(prefix, e.tenant, e.payload.priority), encode(e), e.id)
            for e in self.segments
        ]


def stamp_after(clock: HybridLogicalClock, cause_hlc: str | None) -> Timestamp:
    """A stamp later than the cause (HLC receive), or a plain one if the cause is refused
    as too far ahead of our clock."""
    if cause_hlc:
        try:
            return clock.receive(cause_hlc)
        except ClockSkewError:
            pass
    return clock.now()


def request_event(
    request: p.RunRequested,
    tenant: str,
    clock: HybridLogicalClock,
    cause_event_id: str | None,
    cause_hlc: str | None,
) -> Envelope:
    """The ``run.requested`` the planner originates (export groups, spill continuations):
    its id is the run id, and its HLC time is the "now" its plan uses."""
    return new_event(
        "run.requested",
        tenant,
        request,
        stamp_after(clock, cause_hlc),
        event_id=request.run_id,
        causation_id=cause_event_id,
        correlation_id=request.run_id,
    )


def plan_events(
    plan: Plan,
    clock: HybridLogicalClock,
    cause: Envelope | None = None,
    *,
    cause_event_id: str | None = None,
    cause_hlc: str | None = None,
    originated: bool = False,
) -> PlanEvents:
    """Envelopes for a plan. ``cause`` is the run's ``run.requested``; with ``originated``
    the planner made it and publishes it first."""
    run_id = plan.run_id
    if cause is not None:
        cause_event_id, cause_hlc = cause.id, cause.hlc
    planned = new_event(
        "run.planned",
        plan.tenant,
        plan.run_planned(),
        stamp_after(clock, cause_hlc),
        event_id=planned_event_id(run_id),
        causation_id=cause_event_id,
        correlation_id=run_id,
    )
    segments = [
        new_event(
            "segment.enqueued",
            plan.tenant,
            seg,
            clock.now(),
            event_id=seg.segment_id,
            causation_id=planned.id,
            correlation_id=run_id,
        )
        for seg in plan.segment_payloads()
    ]
    return PlanEvents(cause if originated else None, planned, segments)
