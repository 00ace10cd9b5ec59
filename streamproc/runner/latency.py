"""``scheduler_run_latency_seconds``: from the event that caused a run to its first verdict.

Both ends are HLC times from the event log, never process clocks: the first verdict's stamp,
and the cause's, which the runner's projection folds into the run's record
(:attr:`~streamproc.runner.records.RunRec.cause_ms`) — the earliest of the exports an
export-driven run was coalesced from (so the debounce window and the planning delay count),
else the run's ``run.requested`` (a cron tick, a manual request, a spill continuation).

"First" is as this runner's projection saw it when the segment started: a runner observes a
run once, and only if no verdict of that run was folded yet, so a redelivered segment or a
later segment does not count again. Two runners starting segments of one run in the same
instant can both observe it (with near-equal values).
"""

from __future__ import annotations

from collections import OrderedDict

from streamproc import metrics
from streamproc.runner.records import RunRec

REMEMBERED = 10_000


class RunLatency:
    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def first_verdict(
        self, tenant: str, run_id: str, run: RunRec | None, verdict_ms: int
    ) -> float | None:
        """Observe the run's latency if this is its first verdict; returns the seconds."""
        key = (tenant, run_id)
        if key in self._seen:
            return None
        self._seen[key] = None
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        if run is None or not run.cause_ms:
            return None  # the run (or when it was caused) is not known here
        if run.done or any(sum(c) for c in run.verdicts.values()):
            return None  # verdicts of this run were recorded before this segment started
        seconds = max(0, verdict_ms - run.cause_ms) / 1000
        metrics.RUN_LATENCY.labels(run.trigger).observe(seconds)
        return seconds
