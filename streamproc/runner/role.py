"""The ``runner`` role: the runner projection, segment workers and run completion.

Register it in :mod:`streamproc.roles` as ``"runner": RUNNER``. The workers are the role's
long-running service (``RoleSpec.background``): they start with the role and stop with the
process; they consume the work queue and the max-deliveries advisory (dead letters of
segments whose last runner died) and call the scanner. The reactor finishes runs whose
segments are all accounted for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine
from typing import Any, ClassVar

import msgspec

from streamproc import metrics
from streamproc.backends.model import ToolError
from streamproc.backends.tools import Tool
from streamproc.bus import jsapi, objects
from streamproc.bus.jsapi import JsApiError
from streamproc.bus.workqueue import (
    MaxDeliveries,
    QueueConfig,
    WorkQueueConsumer,
    delete_message,
    get_message,
    max_deliveries_subject,
)
from streamproc.cancellation import checkpoint
from streamproc.events import payloads as p
from streamproc.events.envelope import EventError, decode, new_event
from streamproc.ids import derive_id
from streamproc.names import sbom_bucket, stream_names
from streamproc.runner.backend import Backend, StellaBackend, ToolBackend, settings_policy
from streamproc.runner.claims_state import VexClaims
from streamproc.runner.completion import Completer
from streamproc.runner.limiter import Limiter
from streamproc.runner.ratebucket import RateStore
from streamproc.runner.sboms import RunnerSboms, sbom_reader
from streamproc.runner.scanner_client import ScannerClient, ScannerUnavailable
from streamproc.runner.segment import SegmentRunner
from streamproc.runner.settings import RunnerSettings
from streamproc.runner.settings import configured as configured_runner
from streamproc.runner.state import RunnerState
from streamproc.runtime.reactor import Reactor, RoleContext, RoleSpec

log = logging.getLogger(__name__)


class Workers:
    """The running part of a runner: work queue, worker tasks, dead-letter listener."""

    def __init__(self, ctx: RoleContext, settings: RunnerSettings) -> None:
        self.ctx = ctx
        self.s = settings
        nc = ctx.publisher.nc
        self.work_stream = stream_names(ctx.settings.prefix)[1]
        config = QueueConfig(
            ack_wait_s=settings.ack_wait_s,
            max_deliver=settings.max_deliver,
            discovery_s=settings.discovery_s,
            idle_poll_s=settings.idle_poll_s,
        )
        self.queue = WorkQueueConsumer(nc, ctx.settings.prefix, self.work_stream, config)
        self.backend = make_backend(ctx, settings)
        runner_id = f"{ctx.settings.node_id}-{os.getpid()}"
        self.rates = RateStore(ctx.publisher, ctx.settings.prefix, runner_id)
        self.limiter = Limiter(self.rates)
        kev, policy = settings_policy(settings.scanner)
        self.segments = SegmentRunner(
            ctx, settings, self.backend, self.queue, runner_id, self.limiter, kev=kev, policy=policy
        )
        self.tasks: list[asyncio.Task[None]] = []
        self._advisories: Any = None

    async def run(self) -> None:
        """Work until cancelled (then stop cleanly); a worker's failure ends it."""
        try:
            await self.start()
            await asyncio.gather(*self.tasks)
        finally:
            await self.close()

    async def start(self) -> None:
        nc = self.ctx.publisher.nc
        await self.rates.open(await jsapi.stream_replicas(nc, self.ctx.settings.events_stream))
        self.limiter.start()
        await self.queue.start()
        self._advisories = await nc.subscribe(
            max_deliveries_subject(self.work_stream), cb=self._on_max_deliveries
        )
        for i in range(self.s.workers):
            self.tasks.append(asyncio.create_task(self._work(), name=f"runner-worker-{i}"))

    async def _work(self) -> None:
        while True:
            checkpoint()
            item = await self.queue.next()
            try:
                await self.segments.handle(item)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Not acked: the segment is redelivered after ack_wait (and dead-lettered
                # after max_deliver); this worker goes on with the next one.
                log.exception("segment %s (seq %d) failed", item.subject, item.stream_seq)

    async def _on_max_deliveries(self, msg: Any) -> None:
        """A segment whose last delivery was never answered (its runner died): record it
        as dead-lettered, then drop the work item (its content stays in the event log)."""
        try:
            adv = msgspec.json.decode(msg.data, type=MaxDeliveries)
            got = await get_message(self.ctx.publisher.nc, self.work_stream, adv.stream_seq)
            if got is None:
                return
            env = decode(got[1])
            seg = env.payload
            if not isinstance(seg, p.SegmentEnqueued):
                return
            failed = p.SegmentFailed(
                segment_id=seg.segment_id,
                run_id=seg.run_id,
                reason=f"max deliveries ({adv.deliveries}) exhausted without an answer",
                deliveries=adv.deliveries,
                dead_lettered=True,
            )
            event = new_event(
                "segment.failed", env.tenant, failed, self.ctx.clock.now(),
                event_id=derive_id(env.id, "dead-lettered"), causation_id=env.id,
                correlation_id=seg.run_id,
            )  # fmt: skip
            await self.ctx.publisher.publish_event(event)
            metrics.SEGMENTS.labels("dead_lettered").inc()
            metrics.SEGMENTS_DEAD_LETTERED.labels(env.tenant).inc()
            await delete_message(self.ctx.publisher.nc, self.work_stream, adv.stream_seq)
        except (msgspec.DecodeError, EventError) as exc:
            log.error("max-deliveries advisory not handled: %s", exc)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await self.segments.close()  # publishes in flight end: no segment waits on them
        for t in self.tasks:
            with contextlib.suppress(BaseException):
                await t
        self.tasks.clear()
        if self._advisories is not None:
            with contextlib.suppress(Exception):
                await self._advisories.unsubscribe()
            self._advisories = None
        await self.queue.close()
        await self.limiter.close()


def make_backend(ctx: RoleContext, settings: RunnerSettings) -> Backend:
    """The backend ``scanner.kind`` names."""
    scanner = settings.scanner
    if scanner.kind == "stella" or scanner.tool is None:
        return StellaBackend(
            ScannerClient(
                settings.scanner_url,
                timeout_s=settings.call_timeout_s,
                attempts=settings.call_attempts,
                backoff_base_s=settings.backoff_base_s,
                backoff_cap_s=settings.backoff_cap_s,
                budget_s=settings.call_budget_s,
                connections=settings.workers * settings.inflight + 8,
            )
        )
    nc = ctx.publisher.nc
    bucket = sbom_bucket(ctx.settings.prefix)

    async def fetch(name: str) -> bytes:
        try:
            return await objects.get(nc, bucket, name)
        except objects.Missing:
            raise ToolError("sbom_missing", f"the SBOM store has no {name}") from None
        except objects.ObjectError as exc:
            raise ToolError("sbom_missing", str(exc)) from None
        except JsApiError as exc:  # NATS itself: the attempt fails, the segment is retried
            raise ScannerUnavailable(f"sbom_store: {exc}") from None

    return ToolBackend(
        Tool(scanner.kind, scanner.tool, fetch),
        sbom_reader(ctx.store),
        ctx.problems,
        attempts=settings.call_attempts,
        budget_s=settings.call_budget_s,
        backoff_base_s=settings.backoff_base_s,
        backoff_cap_s=settings.backoff_cap_s,
    )


class RunnerReactor(Reactor):
    """Finishes runs whose segments are all accounted for."""

    interval: ClassVar[float | None] = 0.2

    def __init__(self) -> None:
        self.completer = Completer()

    async def react(self, ctx: RoleContext) -> None:
        await self.completer.check(ctx)


def make_runner(runner: RunnerSettings | None = None) -> RoleSpec:
    """A runner role with the given settings (``streamproc runner``'s options, tests,
    benches); without, the environment's, read when the role starts."""

    def workers(ctx: RoleContext) -> Coroutine[Any, Any, None]:
        return Workers(ctx, runner or configured_runner(ctx.settings.configuration)).run()

    return RoleSpec(
        [RunnerState, RunnerSboms, VexClaims], [lambda _s: RunnerReactor()], background=[workers]
    )


RUNNER = make_runner()
