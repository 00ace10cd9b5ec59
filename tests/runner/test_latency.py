"""Run latency: from the cause's HLC time, as the runner's projection folds it, to the first
verdict's."""

from __future__ import annotations

from prometheus_client import REGISTRY

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.ids import export_run_id
from streamproc.runner.latency import RunLatency
from streamproc.runner.records import EXPORTS_CF, Reader, RunRec
from streamproc.runner.state import RunnerState
from streamproc.state.keys import Checkpoint
from tests.helpers import memory_fold

T0 = 1_790_000_000_000
TENANT = "t1"


def hlc(ms: int) -> str:
    return f"{ms}:0:n1"


def observed(trigger: str) -> float:
    name = "scheduler_run_latency_seconds_count"
    return REGISTRY.get_sample_value(name, {"trigger": trigger}) or 0.0


def request(
    run_id: str, at: int, trigger: str = "manual", exports: list[str] | None = None
) -> Envelope:
    reason = p.RunReason(feedser_export_ids=exports or [])
    payload = p.RunRequested(run_id=run_id, trigger=trigger, reason=reason)  # type: ignore[arg-type]
    return new_event("run.requested", TENANT, payload, hlc(at), event_id=f"req-{run_id}")


def test_latency_is_measured_from_the_earliest_export_of_the_run() -> None:
    exports = [
        new_event("export.feedser", TENANT, p.FeedserExport(export_id=x), hlc(T0 + d))
        for x, d in (("x2", 3_000), ("x1", 1_000))
    ]
    run_id = export_run_id(TENANT, ["x1", "x2"])
    spill = "spill-of-the-same-exports"
    evs = [
        *exports,
        request(spill, T0 + 60_000, "feedser", ["x2", "x1"]),  # not the exports' run
        request(run_id, T0 + 6_000, "feedser", ["x2", "x1"]),
        request("manual-1", T0 + 10_000),
    ]
    msgs = [(i + 1, f"s.events.{TENANT}.x.{i}", encode(e)) for i, e in enumerate(evs)]
    store = memory_fold([RunnerState()], msgs, Checkpoint("S", "e", len(msgs)))
    reader = Reader(store)
    lat = RunLatency()
    before = observed("feedser"), observed("manual")

    # From the first export (x1, at +1 s) to the verdict at +8.5 s.
    run = reader.run(TENANT, run_id)
    assert run is not None and run.cause_ms == T0 + 1_000
    assert lat.first_verdict(TENANT, run_id, run, T0 + 8_500) == 7.5
    assert lat.first_verdict(TENANT, run_id, run, T0 + 9_000) is None  # once
    # A spill continuation is not the exports' run: from its own request.
    assert lat.first_verdict(TENANT, spill, reader.run(TENANT, spill), T0 + 61_000) == 1.0
    manual = reader.run(TENANT, "manual-1")
    assert lat.first_verdict(TENANT, "manual-1", manual, T0 + 10_250) == 0.25
    assert (observed("feedser"), observed("manual")) == (before[0] + 2, before[1] + 1)
    # The run that claimed the exports took their times: nothing is left of them.
    assert list(store.scan(EXPORTS_CF)) == []

    # Not the run's first verdict (already folded), or a run not known here: nothing.
    folded = RunRec(tenant=TENANT, run_id="manual-2", verdicts={"s1": [0, 1]}, cause_ms=T0)
    assert lat.first_verdict(TENANT, "manual-2", folded, T0 + 1) is None
    assert lat.first_verdict(TENANT, "unknown-run", None, T0) is None
    assert observed("manual") == before[1] + 1
