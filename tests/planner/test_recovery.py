"""The restart check against a real nats-server: a run whose lost segment events cannot be
derived again (the index changed since the crash) is closed deterministically — each lost
segment gets a dead-lettered ``segment.failed`` (``unrecoverable_segment``) — so the run
finishes with a coverage that names them instead of staying open forever."""

from __future__ import annotations

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, decode, encode, new_event
from streamproc.hlc import HybridLogicalClock
from streamproc.ids import derive_id
from streamproc.planner.emit import planned_event_id, work_subject
from streamproc.planner.open_runs import PlannerOpenRuns
from streamproc.planner.recovery import requeue_lost
from streamproc.readmodel.runs import Runs
from streamproc.runner.completion import final_stats
from streamproc.runner.records import Reader
from streamproc.runner.state import RunnerState
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.planner.harness import events_of, read_stream

TENANT = "t1"
RUN = "r-lost"
SEGS = [f"{RUN}-s{i}" for i in range(3)]
HLC = "1767225600000:0:n1"


def ev(kind: str, payload: p.Payload, event_id: str) -> Envelope:
    return new_event(kind, TENANT, payload, HLC, event_id=event_id, correlation_id=RUN)


def enqueued(i: int) -> Envelope:
    seg = p.SegmentEnqueued(
        segment_id=SEGS[i], run_id=RUN, shard=i, digests=[f"sha256:{i:064x}"] * (i + 1)
    )
    return ev("segment.enqueued", seg, SEGS[i])


class LogFold:
    """Projections folded from the real event log, up to its head on request."""

    def __init__(self, nc: FastClient, stream: str, *projections: object) -> None:
        self.nc, self.stream = nc, stream
        self.store = MemoryStore()
        self.folder = Folder(self.store, projections)  # type: ignore[arg-type]
        self.applied = 0

    async def wait_for(self, seq: int, timeout: float) -> None:
        msgs = await read_stream(self.nc, self.stream)
        new = [(i, s, d) for i, (s, d, _) in enumerate(msgs, start=1) if i > self.applied]
        if new:
            self.folder.apply(new, keys.Checkpoint(self.stream, "e", new[-1][0]))
            self.applied = new[-1][0]
        assert self.applied >= seq


async def test_segments_no_plan_derives_again_are_closed_and_the_run_finishes(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str]
) -> None:
    events_stream = stream_names[0]
    refs = [p.SegmentRef(segment_id=s, shard=i, images=i + 1) for i, s in enumerate(SEGS)]
    log = [
        ev("run.requested", p.RunRequested(run_id=RUN, trigger="manual"), RUN),
        ev(
            "run.planned",
            p.RunPlanned(run_id=RUN, trigger="manual", segments=refs),
            planned_event_id(RUN),
        ),
        enqueued(0),
        enqueued(1),
        # a crash here: segment 2's event never reached the log, nor any later work item
    ]
    await publisher.publish_events(log)
    await publisher.publish(
        work_subject(publisher.prefix, TENANT, 5), encode(log[2]), log[2].id
    )  # only segment 0's work item was stored
    planner = LogFold(nc, events_stream, PlannerOpenRuns())
    clock = HybridLogicalClock("planner-t")

    out = await requeue_lost(
        publisher, planner.store, planner.wait_for, lambda tenant, run: None, clock
    )
    assert (out.requeued, out.republished, out.closed) == (1, 0, 1)
    assert out.unrecoverable == [f"{TENANT}/{RUN}"]
    (failed,) = await events_of(nc, events_stream, "segment.failed")
    assert failed.id == derive_id(SEGS[2], "unrecoverable")
    assert failed.causation_id == planned_event_id(RUN)
    f = failed.payload
    assert isinstance(f, p.SegmentFailed)
    assert (f.segment_id, f.run_id, f.dead_lettered) == (SEGS[2], RUN, True)
    assert f.reason.startswith(p.SEGMENT_UNRECOVERABLE + ": its 3 image(s)")
    work = [decode(d).id for _, d, _ in await read_stream(nc, stream_names[1])]
    assert sorted(work) == SEGS[:2]  # segment 1 re-queued from its own event

    # A second check (another restart) finds nothing to do: the closed segment is taken.
    again = await requeue_lost(
        publisher, planner.store, planner.wait_for, lambda tenant, run: None, clock
    )
    assert (again.requeued, again.closed, again.unrecoverable) == (0, 0, [])
    assert len(await events_of(nc, events_stream, "segment.failed")) == 1

    # The runner, once the other two segments ran, accounts for the run and finishes it.
    done = [
        ev("segment.completed", p.SegmentCompleted(segment_id=s, run_id=RUN, completed=i + 1),
           derive_id(s, "completed"))
        for i, s in enumerate(SEGS[:2])
    ]  # fmt: skip
    await publisher.publish_events(done)
    views = LogFold(nc, events_stream, RunnerState(), Runs(retention_days=0))
    await views.wait_for(len(log) + 2, 5)
    assert views.folder.rejections == {}
    rec = Reader(views.store).run(TENANT, RUN)
    assert rec is not None and rec.accounted()
    stats, coverage = final_stats(rec)
    assert (stats.completed, stats.failed) == (3, 3)
    assert coverage.reasons == {p.SEGMENT_UNRECOVERABLE: 3}
