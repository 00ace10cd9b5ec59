"""Running one segment: ``segment.started`` → per image a verdict (and its Notify message)
→ ``segment.completed``, or a failed attempt that is redelivered, or a dead letter.

Exactly one ``verdict.recorded`` per (run, image), even across crashes: before starting, the
runner waits until its projection has folded the event log up to its head, then skips the
images that already have a verdict in this run; every id it emits is derived from its cause
(``derive_id(run, digest, "verdict")`` …), so whatever a killed runner had in flight is
de-duplicated by JetStream when the redelivered segment emits it again; and the scanner is
called with ``Idempotency-Key = derive_id(run, digest, "scan")``. An image's Notify message
is stored *before* its verdict is published: the verdict's presence then proves the message
was stored; and every verdict of a segment is stored before its ``segment.completed``.

The images of a segment are evaluated ``min(inflight, the schedules' limits.parallelism)``
at a time, each scanner call paced by the buckets every runner shares
(:mod:`streamproc.runner.pacing`); what each one decided (:mod:`streamproc.runner.verdict`)
goes to the :class:`~streamproc.runner.outbox.Outbox`, which publishes many images'
messages and verdicts together while the lanes go on with their next scanner calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from streamproc import metrics, tracing
from streamproc.backends.findings import KevCatalog, Policy
from streamproc.bus import jsapi
from streamproc.bus.workqueue import WorkItem, WorkQueueConsumer
from streamproc.cancellation import checkpoint
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, EventError, decode, encode, new_event
from streamproc.hlc import ClockSkewError, Timestamp
from streamproc.ids import derive_id
from streamproc.notify import messages as nm
from streamproc.runner.backend import Backend, settled
from streamproc.runner.claims import ClaimView
from streamproc.runner.claims_state import ClaimsReader
from streamproc.runner.delta import FindingKey, combine_rules
from streamproc.runner.latency import RunLatency
from streamproc.runner.limiter import Limiter, Stopped
from streamproc.runner.outbox import Outbox, Record, Tally
from streamproc.runner.pacing import SegmentPace
from streamproc.runner.records import Reader, RunRec
from streamproc.runner.scanner_client import ImageFailed, ScannerUnavailable
from streamproc.runner.settings import RunnerSettings
from streamproc.runner.verdict import Decision, ImageJob, decide, decide_failed, scan_key
from streamproc.runtime.reactor import RoleContext

log = logging.getLogger(__name__)


def lanes(inflight: int, parallelism: int | None) -> int:
    """Scanner calls in flight for a segment: the runner's limit, capped by the schedules'
    ``limits.parallelism`` when they set one (a cap never raises the limit)."""
    return min(inflight, parallelism) if parallelism else inflight


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


@dataclass
class Outcome:
    ok: int = 0
    failed: int = 0
    retries: int = 0
    latencies: list[float] = field(default_factory=list)


class SegmentRunner:
    """Processes segments for one runner process (shared by its worker tasks)."""

    def __init__(
        self,
        ctx: RoleContext,
        settings: RunnerSettings,
        backend: Backend,
        queue: WorkQueueConsumer,
        runner_id: str,
        limiter: Limiter,
        kev: KevCatalog | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.ctx = ctx
        self.s = settings
        self.backend = backend
        self.kev = kev or KevCatalog(None)
        self.policy = policy or Policy()
        self.queue = queue
        self.limiter = limiter
        self.runner_id = runner_id
        self.reader = Reader(ctx.store)
        self.claims = ClaimsReader(ctx.store)
        self.prefix = ctx.settings.prefix
        self.latency = RunLatency()
        self.outbox = Outbox(ctx.publisher, self._stored)
        self.recent: OrderedDict[tuple[str, str], list[FindingKey]] = OrderedDict()
        """Findings this process recorded last per image: the projection may not have
        folded them yet when the same image comes up again in the next run."""

    # ------------------------------------------------------------------ helpers

    def _stamp(self) -> Timestamp:
        return self.ctx.clock.now()

    async def _emit(
        self, kind: str, tenant: str, payload: p.Payload, eid: str, cause: str
    ) -> Envelope:
        event = new_event(
            kind, tenant, payload, self._stamp(), event_id=eid, causation_id=cause,
            correlation_id=getattr(payload, "run_id", None),
        )  # fmt: skip
        await self.ctx.publisher.publish_event(event)
        return event

    async def _sync(self) -> None:
        """Wait until the projection reflects the event log's current head."""
        info = await jsapi.stream_info(self.ctx.publisher.nc, self.ctx.settings.events_stream)
        if info is not None and info.state.last_seq > self.ctx.applied():
            await self.ctx.wait_for(info.state.last_seq, self.s.sync_timeout_s)

    def _previous(self, tenant: str, digest: str) -> list[FindingKey] | None:
        hit = self.recent.get((tenant, digest))
        return hit if hit is not None else self.reader.previous(tenant, digest)

    def _stored(self, record: Record) -> None:
        """An image's verdict is on the log: its findings are the next delta's baseline."""
        k = (record.tenant, record.digest)
        self.recent[k] = record.findings
        self.recent.move_to_end(k)
        while len(self.recent) > 100_000:
            self.recent.popitem(last=False)

    def _rule(self, tenant: str, run: RunRec | None) -> tuple[p.NotifyRule, int | None]:
        rules, caps = [], []
        for sid in run.schedule_ids if run else ():
            r = self.reader.rule(tenant, sid)
            if r is not None:
                rules.append(r.notify.rule())
                if r.limits.parallelism:
                    caps.append(r.limits.parallelism)
        return combine_rules(rules), min(caps) if caps else None

    async def close(self) -> None:
        await self.outbox.close()
        await self.backend.close()

    # ------------------------------------------------------------------ one segment

    async def handle(self, item: WorkItem) -> None:
        try:
            env = decode(item.data)
            if env.kind != "segment.enqueued" or env.tenant != item.tenant:
                raise EventError("not_a_segment", f"{env.kind} for {env.tenant} on {item.subject}")
        except EventError as exc:
            log.error(
                "work item %s (seq %d) is not a segment: %s", item.subject, item.stream_seq, exc
            )
            metrics.SEGMENTS.labels("invalid").inc()
            await self.queue.term(item)
            return
        with contextlib.suppress(ClockSkewError):
            self.ctx.clock.receive(env.hlc)
        seg = env.payload
        run = self.reader.run(env.tenant, seg.run_id)
        if item.deliveries > 1 or run is None or not run.planned:
            # A redelivery must see every verdict already recorded (to skip them), and a
            # segment needs its run's plan and rules: wait until the projection has the head.
            try:
                await self._sync()
            except TimeoutError:
                await self.queue.nak(item, 1.0)  # our projection is behind: try shortly
                return
        await self._run_segment(item, env, seg)

    async def _run_segment(self, item: WorkItem, env: Envelope, seg: p.SegmentEnqueued) -> None:
        tenant, run_id, sid = env.tenant, seg.run_id, seg.segment_id
        run = self.reader.run(tenant, run_id)
        if run is not None and (run.terminal or sid in run.done):
            await self.queue.ack(item)  # already accounted for: a late redelivery
            return
        prior = Outcome()
        todo: list[str] = []
        for d in seg.digests:
            v = self.reader.verdict(tenant, run_id, d)
            if v is None:
                todo.append(d)
            elif v.status == "ok":
                prior.ok += 1
            else:
                prior.failed += 1
        if run is not None and run.cancel_requested:
            await self._finish(item, env, seg, prior, Outcome(), len(todo), 0.0)
            metrics.SEGMENTS.labels("cancelled").inc()
            return
        t0 = time.perf_counter()
        started = p.SegmentStarted(
            segment_id=sid, run_id=run_id, runner=self.runner_id, attempt=item.deliveries
        )
        await self._emit("segment.started", tenant, started, derive_id(env.id, "started",
                         item.deliveries), env.id)  # fmt: skip
        rule, cap = self._rule(tenant, run)
        cancelled = asyncio.Event()
        heart = asyncio.create_task(self._heartbeat(item, tenant, run_id, cancelled))
        out = Outcome()
        tally = Tally()
        claims = ClaimView(
            lambda vuln: self.claims.entries(tenant, vuln), self.claims.as_of(tenant, run_id)
        )
        job = ImageJob(tenant, run_id, sid, "", env.id,
                       tuple(run.schedule_ids) if run else (), rule, claims)  # fmt: skip
        try:
            try:
                left = await self._images(
                    job, seg, todo, run, lanes(self.s.inflight, cap), cancelled, out, tally
                )
            finally:
                await tally.settled()  # every verdict stored (raises the first failure)
        except ScannerUnavailable as exc:
            await self._attempt_failed(item, env, seg, str(exc))
            return
        finally:
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heart
        await self._finish(item, env, seg, prior, out, left, time.perf_counter() - t0)
        metrics.SEGMENTS.labels("cancelled" if left else "completed").inc()

    async def _heartbeat(
        self, item: WorkItem, tenant: str, run_id: str, cancelled: asyncio.Event
    ) -> None:
        """``progress`` keeps the segment ours; the run's cancel request is checked meanwhile."""
        beat = self.s.heartbeat_s
        last = time.monotonic()
        while True:
            checkpoint()
            await asyncio.sleep(min(0.25, beat))
            run = self.reader.run(tenant, run_id)
            if run is not None and run.cancel_requested:
                cancelled.set()
            if time.monotonic() - last >= beat:
                await self.queue.progress(item)
                last = time.monotonic()

    async def _images(
        self,
        job: ImageJob,
        seg: p.SegmentEnqueued,
        todo: list[str],
        run: RunRec | None,
        width: int,
        cancelled: asyncio.Event,
        out: Outcome,
        tally: Tally,
    ) -> int:
        """Evaluate ``todo`` with ``width`` calls in flight, paced by the run's, the tenant's
        and (content refresh) the registry host's shared buckets; returns the images left
        undone because the run was cancelled. Raises ScannerUnavailable to fail the attempt
        (and stops early when a publish failed: :meth:`Tally.settled` raises it)."""
        pace = SegmentPace(self.limiter, job.tenant, seg, cancelled)
        queue = iter(todo)
        left = len(todo)
        failure: list[BaseException] = []
        refresh = seg.mode == "content-refresh"
        policy = seg.policy_revision or None  # unset: the scanner's current policy

        async def lane() -> None:
            nonlocal left
            for digest in queue:
                if cancelled.is_set() or failure or tally.error is not None:
                    return
                try:
                    decision = await self._evaluate(job.of(digest), refresh, out, pace, policy)
                except Stopped:
                    return  # the run was cancelled while this call waited for its turn
                except ScannerUnavailable as exc:
                    failure.append(exc)
                    return
                self._hand_over(decision, run, tally)
                left -= 1

        await asyncio.gather(*(lane() for _ in range(min(width, max(1, len(todo))))))
        if failure:
            raise failure[0]
        return left

    async def _evaluate(
        self,
        job: ImageJob,
        refresh: bool,
        out: Outcome,
        pace: SegmentPace,
        policy_revision: str | None = None,
    ) -> Decision:
        """Ask the scanner about one image and decide what its verdict and message say."""
        key = scan_key(job.run_id, job.digest)
        kind = self.backend.kind
        try:
            with tracing.span(
                "report_call", tenant=job.tenant, run_id=job.run_id, digest=job.digest
            ):
                got = await self.backend.answer(
                    job.tenant, job.digest, key, refresh, pace, policy_revision
                )
        except ImageFailed as exc:
            out.failed += 1
            return decide_failed(job, str(exc), self._stamp(), kind)
        out.retries += got.retries
        out.latencies.append(got.elapsed * 1000)
        out.ok += 1
        report = settled(got.report, self.kev, self.policy, job.claims)
        previous = self._previous(job.tenant, job.digest)
        return decide(job, report, previous, self._stamp(), kind)

    def _hand_over(self, d: Decision, run: RunRec | None, tally: Tally) -> None:
        """Encode the image's message and verdict and give them to the outbox."""
        v = d.verdict
        notify = kind = None
        if d.message is not None:
            kind = nm.kind_of(d.message)
            notify = (nm.subject(self.prefix, v.tenant, kind), nm.encode(d.message), d.message.id)
        verdict = (self.ctx.publisher.subject_of(v), encode(v), v.id)
        run_id, digest = v.payload.run_id, v.payload.digest
        record = Record(v.tenant, run_id, digest, verdict, notify, kind, d.findings, d.worse)
        self.outbox.put(record, tally)
        self.latency.first_verdict(v.tenant, run_id, run, int(v.hlc.split(":", 1)[0]))

    # ------------------------------------------------------------------ endings

    async def _finish(
        self,
        item: WorkItem,
        env: Envelope,
        seg: p.SegmentEnqueued,
        prior: Outcome,
        out: Outcome,
        cancelled: int,
        wall_s: float,
    ) -> None:
        done = p.SegmentCompleted(
            segment_id=seg.segment_id,
            run_id=seg.run_id,
            completed=prior.ok + out.ok,
            failed=prior.failed + out.failed,
            cancelled=cancelled,
            usage=p.SegmentUsage(
                wall_ms=int(wall_s * 1000),
                scanner_p50_ms=percentile(out.latencies, 0.50),
                scanner_p95_ms=percentile(out.latencies, 0.95),
                scanner_p99_ms=percentile(out.latencies, 0.99),
                retries=out.retries,
            ),
        )
        await self._emit(
            "segment.completed", env.tenant, done, derive_id(env.id, "completed"), env.id
        )
        await self.queue.ack(item)

    async def _attempt_failed(
        self, item: WorkItem, env: Envelope, seg: p.SegmentEnqueued, reason: str
    ) -> None:
        last = item.deliveries >= self.s.max_deliver
        failed = p.SegmentFailed(
            segment_id=seg.segment_id,
            run_id=seg.run_id,
            reason=reason[:2000] or "scanner unavailable",
            deliveries=item.deliveries,
            dead_lettered=last,
        )
        eid = (
            derive_id(env.id, "dead-lettered")
            if last
            else derive_id(env.id, "failed", item.deliveries)
        )
        await self._emit("segment.failed", env.tenant, failed, eid, env.id)
        if last:
            metrics.SEGMENTS.labels("dead_lettered").inc()
            metrics.SEGMENTS_DEAD_LETTERED.labels(env.tenant).inc()
            log.error("segment %s of run %s dead-lettered after %d deliveries: %s",
                      seg.segment_id, seg.run_id, item.deliveries, reason)  # fmt: skip
            await self.queue.term(item)
            return
        metrics.SEGMENTS.labels("retried").inc()
        backoff = self.s.retry_backoff_s
        delay = backoff[min(item.deliveries - 1, len(backoff) - 1)] if backoff else 1.0
        await self.queue.nak(item, delay)
