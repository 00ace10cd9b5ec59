"""``scheduler_run_latency_seconds``: from the event that caused a run to its first verdict.

Both ends are HLC times read from the event log, never process clocks: the first verdict's
stamp, and the cause's — the earliest of the exports an export-driven run was coalesced from
(so the debounce window and the planning delay count), else the run's ``run.requested``
(a cron tick, a manual request, a spill continuation). The cause is looked up once per run,
after that run's first verdict is published, with one ``STREAM.MSG.GET`` per event on the
run's and the exports' own subjects.

"First" is as this runner's projection saw it when the segment started: a runner observes a
run once, and only if no verdict of that run was folded yet, so a redelivered segment or a
later segment does not count again. Two runners starting segments of one run in the same
instant can both observe it (with near-equal values).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.events.catalog import aggregate_subject
from streamproc.events.envelope import Envelope, EventError, decode
from streamproc.planner.changes import export_run_id
from streamproc.runner.state import RunRec

log = logging.getLogger(__name__)
NO_MESSAGE = 10037
"""JetStream API error code: no message found."""
MAX_EXPORTS = 100
"""Exports of one run whose times are looked up (the earliest among them is the cause)."""
REMEMBERED = 10_000
LOOKUP_TIMEOUT_S = 2.0


def physical_ms(hlc: str) -> int:
    return int(hlc.split(":", 1)[0])


class RunLatency:
    def __init__(self, nc: FastClient, stream: str, prefix: str) -> None:
        self.nc = nc
        self.stream = stream
        self.prefix = prefix
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def first_verdict(
        self, tenant: str, run_id: str, run: RunRec | None, verdict_hlc: str
    ) -> float | None:
        """Observe the run's latency if this is its first verdict; returns the seconds."""
        key = (tenant, run_id)
        if key in self._seen:
            return None
        self._seen[key] = None
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        if run is not None and (run.done or any(sum(c) for c in run.verdicts.values())):
            return None  # verdicts of this run were recorded before this segment started
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                cause = await self.cause(tenant, run_id)
        except Exception as exc:  # a metric is never worth failing a segment for
            log.debug("run latency of %s/%s not measured: %s", tenant, run_id, exc)
            return None
        if cause is None:
            return None
        trigger, cause_ms = cause
        seconds = max(0, physical_ms(verdict_hlc) - cause_ms) / 1000
        metrics.RUN_LATENCY.labels(trigger).observe(seconds)
        return seconds

    async def cause(self, tenant: str, run_id: str) -> tuple[str, int] | None:
        """The run's trigger and its cause's HLC time (ms), from the log."""
        req = await self.first_event(aggregate_subject(self.prefix, tenant, "run", run_id))
        if req is None or req.kind != "run.requested":
            return None
        r = req.payload
        ms = physical_ms(req.hlc)
        feedser, vexer = r.reason.feedser_export_ids, r.reason.vexer_export_ids
        if r.trigger in ("feedser", "vexer") and export_run_id(tenant, feedser + vexer) == run_id:
            times = []
            for source, ids in (("feedser", feedser), ("vexer", vexer)):
                for export_id in ids[:MAX_EXPORTS]:
                    subject = aggregate_subject(self.prefix, tenant, source, export_id)
                    ev = await self.first_event(subject)
                    if ev is not None:
                        times.append(physical_ms(ev.hlc))
            ms = min([ms, *times])
        return r.trigger, ms

    async def first_event(self, subject: str) -> Envelope | None:
        try:
            doc = await jsapi.request(
                self.nc, f"STREAM.MSG.GET.{self.stream}", {"seq": 1, "next_by_subj": subject}
            )
        except jsapi.JsApiError as exc:
            if exc.err_code == NO_MESSAGE:
                return None
            raise
        try:
            return decode(base64.b64decode(doc["message"]["data"]))
        except EventError:
            return None
