"""The backlog the read model tells from the log alone: a run that spills work over its
``maxJobs`` is backlog until the continuation the planner derives for it is requested; a
continuation that spills again continues the chain; a cancel drops the chain."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.ids import spill_run_id
from tests.readmodel.util import Log


def requested(run_id: str) -> p.RunRequested:
    return p.RunRequested(run_id=run_id, trigger="feedser")


def planned(run_id: str, queued: int, spilled: int) -> p.RunPlanned:
    return p.RunPlanned(
        run_id=run_id, trigger="feedser", stats=p.RunStats(queued=queued, spilled=spilled)
    )


def test_spilled_work_is_backlog_until_its_continuation_is_requested() -> None:
    log = Log()
    log.emit("run.requested", requested("r1"))
    log.emit("run.planned", planned("r1", queued=100, spilled=250))
    (b,) = log.rm.backlog("t1")
    c1 = spill_run_id("r1", 100)
    assert (b.run_id, b.root_run_id, b.continuation_id, b.spilled) == ("r1", "r1", c1, 250)
    assert log.rm.backlog("t2") == [], "per tenant"
    # The continuation is requested: no longer backlog; it spills again: the chain goes on.
    log.emit("run.requested", requested(c1))
    assert log.rm.backlog("t1") == []
    log.emit("run.planned", planned(c1, queued=100, spilled=150))
    (b,) = log.rm.backlog("t1")
    c2 = spill_run_id("r1", 200)
    assert (b.run_id, b.root_run_id, b.continuation_id, b.spilled) == (c1, "r1", c2, 150)
    log.emit("run.requested", requested(c2))
    log.emit("run.planned", planned(c2, queued=150, spilled=0))
    assert log.rm.backlog("t1") == []


def test_a_cancel_drops_the_rest_of_the_chain() -> None:
    log = Log()
    for run in ("r1", "r2"):
        log.emit("run.requested", requested(run))
        log.emit("run.planned", planned(run, queued=10, spilled=5))
    assert [b.run_id for b in log.rm.backlog("t1")] == ["r1", "r2"]
    log.emit("run.cancel_requested", p.RunCancelRequested(run_id="r1"))
    assert [b.run_id for b in log.rm.backlog("t1")] == ["r2"]
    # A run cancelled before it was planned leaves no backlog.
    log.emit("run.requested", requested("r3"))
    log.emit("run.cancel_requested", p.RunCancelRequested(run_id="r3"))
    log.emit("run.planned", planned("r3", queued=10, spilled=5))
    assert [b.run_id for b in log.rm.backlog("t1")] == ["r2"]
