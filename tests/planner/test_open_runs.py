"""``pl_open``, pure: which segments of unfinished runs are in the log and which a runner took;
and the restart check's retry schedule."""

from __future__ import annotations

import pytest

from streamproc import metrics
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode
from streamproc.planner.open_runs import PlannerOpenRuns, open_runs
from streamproc.planner.recovery import MAX_ATTEMPTS, RestartCheck
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore
from tests.planner.util import T0, event


def planned(run_id: str, n: int) -> p.RunPlanned:
    refs = [p.SegmentRef(segment_id=f"{run_id}-s{i}", shard=i, images=i + 1) for i in range(n)]
    return p.RunPlanned(run_id=run_id, trigger="feedser", segments=refs)


def enqueued(run_id: str, i: int, priority: int = 4) -> p.SegmentEnqueued:
    return p.SegmentEnqueued(
        segment_id=f"{run_id}-s{i}", run_id=run_id, shard=i,
        digests=[f"sha256:{k:064x}" for k in range(i + 1)], priority=priority,
    )  # fmt: skip


def fold(events: list[Envelope]) -> MemoryStore:
    store = MemoryStore()
    folder = Folder(store, [PlannerOpenRuns()], "test")
    msgs = [(seq, "x", encode(e)) for seq, e in enumerate(events, start=1)]
    folder.apply(msgs, keys.Checkpoint("S", "epoch", len(msgs)))
    return store


def test_segments_of_unfinished_runs_and_where_each_stands() -> None:
    log = [
        event("run.planned", planned("r1", 3), ms=T0),
        event("segment.enqueued", enqueued("r1", 0), ms=T0 + 1),  # seq 2
        event("segment.enqueued", enqueued("r1", 1, priority=0), ms=T0 + 2),  # seq 3
        event("segment.started", p.SegmentStarted(segment_id="r1-s1", run_id="r1", runner="x")),
        event("run.planned", planned("r2", 1), ms=T0 + 5),
        event("segment.enqueued", enqueued("r2", 0), ms=T0 + 6),
        event("segment.completed", p.SegmentCompleted(segment_id="r2-s0", run_id="r2")),
        event("run.completed", p.RunCompleted(run_id="r2")),
        event("segment.enqueued", enqueued("r2", 0), ms=T0 + 7),  # after its run: ignored
        event("segment.failed", p.SegmentFailed(segment_id="zz", run_id="r9", reason="x")),
        event("run.planned", planned("r3", 1), tenant="t2"),
        event("run.cancelled", p.RunCancelled(run_id="r3"), tenant="t2"),
    ]
    views = list(open_runs(fold(log)))
    assert [(v.run.tenant, v.run.run_id) for v in views] == [("t1", "r1")]
    r1 = views[0]
    assert r1.run.segments == ["r1-s0", "r1-s1", "r1-s2"] and r1.run.images == [1, 2, 3]
    assert r1.run.planned_ms == T0
    got = {k: (s.state, s.seq, s.ms, s.priority) for k, s in r1.segments.items()}
    assert got == {
        "r1-s0": ("enqueued", 2, T0 + 1, 4),
        "r1-s1": ("taken", 3, T0 + 2, 0),
        "r1-s2": ("planned", 0, 0, 5),  # its event never reached the log
    }


def test_a_repeated_enqueue_keeps_the_first_and_taken_stays_taken() -> None:
    log = [
        event("run.planned", planned("r1", 1)),
        event("segment.enqueued", enqueued("r1", 0)),
        event("segment.started", p.SegmentStarted(segment_id="r1-s0", run_id="r1", runner="x")),
        event("segment.enqueued", enqueued("r1", 0, priority=1)),
    ]
    (view,) = open_runs(fold(log))
    s = view.segments["r1-s0"]
    assert (s.state, s.seq, s.priority) == ("taken", 2, 4)
    assert state_digest(fold(log)) == state_digest(fold(log)), "a pure fold"


def test_the_check_backs_off_then_gives_up() -> None:
    now = [100.0]
    check = RestartCheck(clock=lambda: now[0])
    assert check.due()
    pauses = []
    for _ in range(MAX_ATTEMPTS - 1):
        check.failed(TimeoutError("nats"))
        assert not check.due() and check.problem and "attempt" in check.problem
        pauses.append(check.next_at - now[0])
        now[0] = check.next_at
        assert check.due()
    assert pauses == [1, 2, 4, 8, 16, 32, 60]
    assert metrics.PLANNER_RECOVERY_FAILING._value.get() == 1
    check.failed(TimeoutError("nats"))
    assert check.gave_up and not check.due() and "gave up" in (check.problem or "")
    now[0] += 3600
    assert not check.due()
    fresh = RestartCheck()
    fresh.succeeded()
    assert fresh.problem is None and metrics.PLANNER_RECOVERY_FAILING._value.get() == 0


@pytest.mark.parametrize("kind", ["segment.started", "segment.completed", "segment.failed"])
def test_any_runner_event_means_taken(kind: str) -> None:
    payload: p.Payload = {
        "segment.started": p.SegmentStarted(segment_id="r1-s0", run_id="r1", runner="x"),
        "segment.completed": p.SegmentCompleted(segment_id="r1-s0", run_id="r1"),
        "segment.failed": p.SegmentFailed(segment_id="r1-s0", run_id="r1", reason="boom"),
    }[kind]
    log = [event("run.planned", planned("r1", 1)), event(kind, payload)]
    (view,) = open_runs(fold(log))
    assert view.segments["r1-s0"].state == "taken"
