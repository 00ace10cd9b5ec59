"""Updates never create (docs/conformance.md, "Every message kind handled"), checked for
every registered projection: each kind a projection folds that is not one of its creating
kinds, for an unknown run, segment, schedule or image, is a rejection with a named reason
that changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest

from streamproc.config import Configuration
from streamproc.events import payloads as p
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.readmodel import retention
from streamproc.roles import ROLES
from streamproc.runtime.projection import Folded, Folder, Projection
from streamproc.runtime.reactor import build
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.samples import digest, sample_payload

TENANT = "acme"
RUN, SEGMENT, SCHEDULE = "run-unknown", "seg-unknown", "sched-unknown"
KNOWN_SEGMENT = "seg-known"


def payload(kind: str, run: str = RUN, segment: str = SEGMENT) -> p.Payload:
    """A payload of ``kind`` that names every entity it can: all of them unknown."""
    return {
        "schedule.created": lambda: p.ScheduleCreated(
            schedule_id=SCHEDULE, name="n", cron="0 2 * * *", timezone="UTC"
        ),
        "schedule.updated": lambda: p.ScheduleUpdated(schedule_id=SCHEDULE, cron="0 3 * * *"),
        "schedule.paused": lambda: p.ScheduleStateChange(schedule_id=SCHEDULE),
        "schedule.resumed": lambda: p.ScheduleStateChange(schedule_id=SCHEDULE),
        "schedule.deleted": lambda: p.ScheduleStateChange(schedule_id=SCHEDULE),
        "export.feedser": lambda: p.FeedserExport(export_id="fx-1"),
        "export.vexer": lambda: p.VexerExport(export_id="vx-1"),
        "image.indexed": lambda: p.ImageIndexed(
            digest=digest(1), registry="r.local", repository="team/app"
        ),
        "image.removed": lambda: p.ImageRemoved(digest=digest(1)),
        "sbom.deleted": lambda: p.SbomDeleted(sbom=digest(1), released_by="e0"),
        "run.requested": lambda: p.RunRequested(
            run_id=run,
            trigger="cron",
            schedule_id=SCHEDULE,
            reason=p.RunReason(
                scheduled_for="2026-01-01T02:00:00+00:00", feedser_export_ids=["fx-1"]
            ),
        ),
        "run.planned": lambda: p.RunPlanned(
            run_id=run,
            trigger="manual",
            schedule_ids=[SCHEDULE],
            segments=[p.SegmentRef(segment_id=KNOWN_SEGMENT, shard=0, images=1)],
        ),
        "run.cancel_requested": lambda: p.RunCancelRequested(run_id=run),
        "run.cancelled": lambda: p.RunCancelled(run_id=run),
        "run.completed": lambda: p.RunCompleted(run_id=run),
        "segment.enqueued": lambda: p.SegmentEnqueued(
            segment_id=segment, run_id=run, shard=0, digests=[digest(1)]
        ),
        "segment.started": lambda: p.SegmentStarted(segment_id=segment, run_id=run, runner="r"),
        "segment.completed": lambda: p.SegmentCompleted(segment_id=segment, run_id=run),
        "segment.failed": lambda: p.SegmentFailed(
            segment_id=segment, run_id=run, reason="lost", dead_lettered=True
        ),
        "verdict.recorded": lambda: p.VerdictRecorded(
            run_id=run, segment_id=segment, digest=digest(1)
        ),
        "delta.acknowledged": lambda: p.DeltaAcknowledged(run_id=run, digest=digest(1)),
        "audit.snapshot": lambda: sample_payload("audit.snapshot", 0),  # on no entry
    }[kind]()


def event(seq: int, kind: str, **ids: str) -> tuple[int, str, bytes]:
    e: Envelope = new_event(
        kind, TENANT, payload(kind, **ids), f"{1_767_225_600_000 + seq}:0:n1", event_id=f"e{seq}"
    )
    return seq, f"scheduler.events.{TENANT}.x.{seq}", encode(e)


def registered() -> dict[str, Callable[[], Projection]]:
    """Every projection a role folds, by name (the factory the role uses)."""
    seen: dict[str, Callable[[], Projection]] = {}
    for spec in ROLES.values():
        for make in spec.projections:
            made: Callable[[], Projection] = partial(build, make, Configuration())
            seen.setdefault(made().name, made)
    return dict(sorted(seen.items()))


FACTORIES = registered()
PROJECTIONS = [type(make()) for make in FACTORIES.values()]

UNKNOWN_REASON = {
    **{k: "unknown_schedule" for k in KINDS if k.startswith("schedule.")},
    **{k: "unknown_run" for k in KINDS if k.split(".")[0] in ("run", "segment", "verdict")},
    "image.removed": "image_not_indexed",
    "sbom.deleted": "sbom_not_released",
    "audit.snapshot": "snapshot_beyond_head",
    "delta.acknowledged": "unknown_delta",
}
"""The reason an update of an unknown entity is rejected with, by kind."""
OVERRIDES = {("pl_schedules", "run.requested"): "unknown_schedule"}
"""A cron run's request updates its schedule's last tick in the planner."""
BOOKKEEPING = {"rm_runs": {(retention.EXPIRY_CF, retention.CLOCK_KEY)}}
"""What an observed kind may change: the read model's retention clock."""


def state(store: MemoryStore) -> dict[tuple[str, bytes], bytes]:
    return {(cf, k): v for cf in store.families() if cf != keys.META_CF for k, v in store.scan(cf)}


def fold(store: MemoryStore, proj: Projection, *msgs: tuple[int, str, bytes]) -> Folded:
    return Folder(store, [proj]).apply(list(msgs), keys.Checkpoint("S", "e", msgs[-1][0]))


def over(cases: list[tuple[type[Projection], str]]) -> pytest.MarkDecorator:
    """Parametrize over (projection, kind) cases, named ``<projection>-<kind>``."""
    return pytest.mark.parametrize(
        ("cls", "kind"), cases, ids=lambda x: x if isinstance(x, str) else x.name
    )


@over([(c, k) for c in PROJECTIONS for k in sorted(c.updates())])
def test_an_update_of_an_unknown_entity_is_rejected_and_changes_nothing(
    cls: type[Projection], kind: str
) -> None:
    store = MemoryStore()
    proj = FACTORIES[cls.name]()
    folded = fold(store, proj, event(1, kind))
    want = OVERRIDES.get((cls.name, kind), UNKNOWN_REASON[kind])
    assert [(r.projection, r.reason) for r in folded.rejected] == [(cls.name, want)]
    assert folded.applied == 0
    assert state(store) == {}
    again = Folder(store, [FACTORIES[cls.name]()])  # the counts are committed state
    assert again.rejections == {cls.name: {want: 1}}


@over([(c, k) for c in PROJECTIONS for k in sorted(c.observes)])
def test_an_observed_kind_creates_nothing(cls: type[Projection], kind: str) -> None:
    store = MemoryStore()
    proj = FACTORIES[cls.name]()
    folded = fold(store, proj, event(1, kind))
    assert folded.rejected == [] and folded.applied == 1
    assert set(state(store)) <= BOOKKEEPING.get(cls.name, set())


SEGMENT_KINDS = ("segment.started", "segment.completed", "segment.failed", "verdict.recorded")


@over([(c, k) for c in PROJECTIONS for k in SEGMENT_KINDS if k in c.updates()])
def test_an_event_of_a_segment_the_plan_does_not_list_is_rejected(
    cls: type[Projection], kind: str
) -> None:
    """A known run, planned with ``seg-known``: its other segments are unknown."""
    store = MemoryStore()
    proj = FACTORIES[cls.name]()
    prelude = [event(1, "run.requested"), event(2, "run.planned")]
    assert fold(store, proj, *prelude).rejected == []
    before = state(store)
    folded = fold(store, proj, event(3, kind))
    assert [(r.projection, r.reason) for r in folded.rejected] == [(cls.name, "unknown_segment")]
    assert state(store) == before
    # ... while the planned segment takes the same event
    assert fold(store, proj, event(4, kind, segment=KNOWN_SEGMENT)).rejected == []


def test_every_projection_says_which_kinds_create() -> None:
    """A projection that folds a kind must classify it; the defaults (nothing creates)
    are strict, so a new projection that forgets fails the test above instead."""
    assert {c.name for c in PROJECTIONS} >= {"rm_runs", "runner", "pl_runs", "pl_open"}
    for c in PROJECTIONS:
        assert c.creates | c.observes | c.updates() == c.kinds
        assert c.kinds <= set(KINDS)
    runner = next(c for c in PROJECTIONS if c.name == "runner")
    assert "run.planned" not in runner.creates  # the runner learns of a run at its request
