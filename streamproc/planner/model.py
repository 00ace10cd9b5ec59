"""The planner's vocabulary: the cause of a run, the schedules it serves, and the plan.

Plain data; planning itself is in :mod:`.select` (which images) and :mod:`.plan` (how they
are capped, sharded and cut into segments).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from streamproc.events import payloads as p
from streamproc.ids import derive_id
from streamproc.impact.index import ImpactIndex
from streamproc.planner import pacing
from streamproc.planner.changes import Changes

DAY_MS = 86_400_000
EVENT_TRIGGERS = frozenset({"feedser", "vexer"})


class ImpactSource(Protocol):
    """What the planner needs of the ``impact`` projection: its index and whether it is warm."""

    @property
    def index(self) -> ImpactIndex: ...

    @property
    def warm(self) -> bool: ...


@dataclass
class StaticSource:
    """An index handed over directly (tests, benchmarks, a process without the projection)."""

    index: ImpactIndex
    warm: bool = True


@dataclass(frozen=True)
class Cause:
    """What triggered a run, reduced to what planning reads."""

    run_id: str
    tenant: str
    trigger: p.Trigger
    at_ms: int
    """The cause's own time (HLC physical ms): the "now" of ``lastReportOlderThanDays``."""
    mode: p.Mode = "analysis-only"
    schedule_id: str | None = None
    selection: p.Selection | None = None
    changes: Changes | None = None
    offset: int = 0
    """Images of this cause already queued by earlier runs of its spill chain."""

    @property
    def event_driven(self) -> bool:
        return self.trigger in EVENT_TRIGGERS


@dataclass(frozen=True)
class Target:
    """One schedule (or an ad-hoc selection) the run serves."""

    schedule_id: str | None
    selection: p.Selection
    only_if: p.OnlyIf
    limits: p.Limits
    mode: p.Mode


@dataclass
class SegmentPlan:
    segment_id: str
    shard: int
    digests: list[str]
    priority: int
    rate_per_second: int
    mode: p.Mode
    tier: int
    host: str = ""


@dataclass
class Plan:
    run_id: str
    tenant: str
    trigger: p.Trigger
    schedule_ids: list[str]
    stats: p.RunStats
    segments: list[SegmentPlan]
    limits: pacing.RunLimits
    mode: p.Mode = "analysis-only"
    degraded: bool = False
    degraded_reason: str | None = None
    keys: int = 0
    hosts: dict[str, int] = field(default_factory=dict)
    buckets: pacing.Buckets = field(kw_only=True)
    policy_revision: str | None = None

    def run_planned(self) -> p.RunPlanned:
        return p.RunPlanned(
            run_id=self.run_id,
            trigger=self.trigger,
            schedule_ids=self.schedule_ids,
            stats=self.stats,
            segments=[
                p.SegmentRef(segment_id=s.segment_id, shard=s.shard, images=len(s.digests))
                for s in self.segments
            ],
            degraded=self.degraded,
            degraded_reason=self.degraded_reason,
        )

    def segment_payloads(self) -> list[p.SegmentEnqueued]:
        return [
            p.SegmentEnqueued(
                segment_id=s.segment_id,
                run_id=self.run_id,
                shard=s.shard,
                digests=s.digests,
                rate_per_second=s.rate_per_second,
                mode=s.mode,
                priority=s.priority,
                tenant_rate=self.buckets.tenant_rate,
                registry_host=s.host or msgspec.UNSET,
                registry_rate=self.buckets.registry_rate if s.host else msgspec.UNSET,
                burst_s=self.buckets.burst_s,
                policy_revision=self.policy_revision or msgspec.UNSET,
            )
            for s in self.segments
        ]


def segment_id(run_id: str, n: int) -> str:
    return derive_id(run_id, "segment", n)
