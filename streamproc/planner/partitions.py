"""Planners partitioned by tenant (``planner.partitions`` = N > 1).

NATS does the partitioning. The stream ``<EVENTS>_PLAN<N>`` sources the event log with the
subject transform ``<prefix>.events.*.> → <prefix>.plan.{{partition(N,1)}}.{{wildcard(1)}}.>``:
every event again, its subject now carrying its tenant's partition (FNV-1a of the tenant
token modulo N, :func:`streamproc.ids.partition_of`). Partition k is everything on
``<prefix>.plan.<k>.>``.

Every planner process leases partitions in the lease bucket (:mod:`streamproc.runtime.lease`, key
``planner-p<k>-of-<N>``), at most ceil(N / live planners) of them, where the live planners
are those whose membership key (``planner-member-…``, rewritten every TTL/3) has not expired.
For each partition it holds it opens the partition's own state directory, folds the
partition with a filtered consumer, and — once caught up with the partition's last message
as it was when the lease was taken — plans (the planner and cron reactors) and answers the
partition's previews (``preview-p<k>``). It holds nothing of the other partitions. A lease
lost or handed on (a planner joined, so the share shrank) stops all of that again.

A planner killed outright keeps its leases until they expire (the TTL); then the others
take them, fold the partition from their own checkpoint of it (or from its start) and plan
what is due. Planning again what the dead one planned emits the same event ids (derived
from the cause), which JetStream de-duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import re
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from streamproc import names
from streamproc.bus import jsapi, streams
from streamproc.bus.services import Served
from streamproc.cancellation import checkpoint
from streamproc.config import Settings
from streamproc.impact.settings import configured_projection
from streamproc.impact.warming import warm_hosted
from streamproc.planner.cron import CronReactor
from streamproc.planner.exports import PlannerExports
from streamproc.planner.open_runs import PlannerOpenRuns
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.service import start as start_service
from streamproc.planner.settings import from_sections as planner_from_sections
from streamproc.queries import partition_endpoint
from streamproc.runtime.batching import batch_time_from
from streamproc.runtime.lease import Lease, NatsFailure, entries, holder_id, open_bucket, ttl_from
from streamproc.runtime.projection import Projection
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import Configured, Reactor, RoleContext, build
from streamproc.state.settings import sizes_from, trim_from
from streamproc.state.store import RocksStore

log = logging.getLogger(__name__)

PROJECTIONS: list[Callable[[], Projection] | Configured] = [
    Configured(configured_projection),
    PlannerSchedules,
    PlannerExports,
    PlannerRuns,
    LastReports,
    PlannerOpenRuns,
]
"""What each partition folds: the planner's state, for its tenants only."""
REACTORS: list[Callable[[Settings], Reactor]] = [PlannerReactor, CronReactor]
"""What acts for a partition its holder has caught up with."""
PROBLEM_PREFIX = "partition "
"""Problems of a held partition are the role's, named ``partition <k>/<N> <problem>``."""


def transform(prefix: str, partitions: int) -> dict[str, str]:
    """The subject transform of the partitioned stream's source."""
    return {
        "src": f"{prefix}.{names.EVENTS}.*.>",
        "dest": f"{prefix}.{names.PLAN}.{{{{partition({partitions},1)}}}}.{{{{wildcard(1)}}}}.>",
    }


def stream_config(
    prefix: str,
    events_stream: str,
    partitions: int,
    replicas: int,
    retention: streams.EventsRetention,
) -> dict[str, Any]:
    """``<EVENTS>_PLAN<N>``: sources the event log, each subject mapped to its partition. It
    copies the log, so it keeps what the log keeps: the log's age and byte limits."""
    return {
        "name": names.plan_stream(events_stream, partitions),
        "description": f"the event log by tenant partition ({partitions}) for the planners",
        "storage": "file",
        "retention": "limits",
        "num_replicas": replicas,
        **retention.config(),
        "sources": [{"name": events_stream, "subject_transforms": [transform(prefix, partitions)]}],
    }


LIMITS = ("max_age", "max_bytes", "discard")
"""What :func:`ensure_stream` brings an existing partitioned stream in line with."""


async def ensure_stream(
    nc: Any, settings: Settings, partitions: int, retention: streams.EventsRetention
) -> str:
    """Create the partitioned stream if it is missing (every planner may try: the first
    creates it, the others find it), or give it the log's limits if they changed; its name."""
    name = names.plan_stream(settings.events_stream, partitions)
    info = await jsapi.with_retries(lambda: jsapi.stream_info(nc, name), 20.0)
    replicas = await jsapi.stream_replicas(nc, settings.events_stream)
    config = stream_config(settings.prefix, settings.events_stream, partitions, replicas, retention)
    if info is None:
        try:
            await jsapi.with_retries(
                lambda: jsapi.request(nc, f"STREAM.CREATE.{name}", config), 20.0
            )
            return name
        except jsapi.JsApiError as exc:
            if exc.err_code != jsapi.STREAM_NAME_IN_USE:
                raise
            # Another planner has just created it: bring it in line like any stream that exists.
            info = await jsapi.with_retries(lambda: jsapi.stream_info(nc, name), 20.0)
            if info is None:
                raise
    changed, _ = streams.diff(info.config, {k: config[k] for k in LIMITS})
    if changed:
        update = {**info.config, **{k: v for k, (_, v) in changed.items()}}
        await jsapi.with_retries(lambda: jsapi.request(nc, f"STREAM.UPDATE.{name}", update), 20.0)
        log.info("%s: limits now %s", name, {k: v for k, (_, v) in changed.items()})
    return name


def filter_subject(prefix: str, partition: int) -> str:
    return f"{names.plan_subjects(prefix, partition)}>"


async def partition_head(nc: Any, stream: str, prefix: str, partition: int) -> int:
    """The stream sequence of the partition's last message (0: none yet)."""
    seq, _ = await jsapi.last_on_subject(nc, stream, filter_subject(prefix, partition))
    return seq


class Partition:
    """One partition this process holds: its state, projector, reactors and previews."""

    def __init__(
        self, base: RoleContext, stream: str, partition: int, partitions: int, lease: Lease
    ):
        self.base = base
        self.stream = stream
        self.k = partition
        self.n = partitions
        self.lease = lease
        self.store: RocksStore | None = None
        self.proj: Projector | None = None
        self.served: Served | None = None
        self.reactors: list[Reactor] = []
        self.active = False
        """Caught up and acting (planning, answering previews)."""
        self.problems: dict[str, str] = {}
        """What the partition's reactors report (the restart check failing)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._acting: asyncio.Task[None] | None = None
        """The reactors' task (one of ``_tasks``): it returns only once the lease ran out."""

    @property
    def ctx_name(self) -> str:
        return f"planner p{self.k}/{self.n}"

    async def head(self) -> int:
        return await partition_head(
            self.base.publisher.nc, self.stream, self.base.settings.prefix, self.k
        )

    async def start(self) -> None:
        s = self.base.settings
        nc = self.base.publisher.nc
        path = s.state_dir(names.partition_state(self.k, self.n))
        conf = s.configuration
        self.store = RocksStore(path, sizes=conf.built(sizes_from))
        projections = [build(make, conf) for make in PROJECTIONS]
        where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
        proj = Projector(
            nc,
            self.store,
            projections,
            stream=self.stream,
            role="planner",
            batch=s.batch,
            consumer=names.projector_consumer("planner", f"p{self.k}of{self.n}", s.node_id, where),
            subjects=names.plan_subjects(s.prefix, self.k),
            filter_subjects=[filter_subject(s.prefix, self.k)],
            trim_interval_s=conf.built(trim_from),
            batch_max_s=conf.built(batch_time_from),
        )
        self.proj = proj
        await proj.start()
        shared: dict[str, Projection] = {p.name: p for p in projections}
        warm_hosted(shared)
        ctx = RoleContext(
            role="planner",
            settings=s,
            store=self.store,
            publisher=self.base.publisher,
            clock=self.base.clock,
            applied=lambda: proj.applied,
            wait_for=proj.wait_for,
            lag=proj.lag,
            shared=shared,
            problems=self.problems,
            folded_stream=self.stream,
            folded_head=self.head,
        )
        self._acting = asyncio.create_task(self._act(ctx), name=f"reactors-planner-p{self.k}")
        self._tasks = [
            asyncio.create_task(proj.run(), name=f"projector-planner-p{self.k}"),
            self._acting,
        ]

    async def _act(self, ctx: RoleContext) -> None:
        """Once caught up with the partition's head as it was when the lease was taken,
        answer its previews and run its reactors while the lease holds."""
        proj = self.proj
        assert proj is not None
        target = await jsapi.with_retries(self.head, 20.0)
        # The stream's head counts the other partitions too: ours is this (lag() is what we
        # still have to apply; each batch then sets it from the consumer's pending count).
        proj.head = max(proj.applied, target)
        while proj.applied < target:
            checkpoint()
            with contextlib.suppress(TimeoutError):
                await proj.wait_for(target, 1.0)
        self.served = await start_service(ctx, partition_endpoint(self.k))
        self.active = True
        log.info("%s: active (caught up to %d)", self.ctx_name, target)
        self.reactors = [make(ctx.settings) for make in REACTORS]
        tick = min(r.interval for r in self.reactors if r.interval)
        while self.lease.held():
            checkpoint()
            await proj.next_commit(tick)
            for r in self.reactors:
                if not self.lease.held():
                    break
                await r.react(ctx)
        self.active = False
        log.warning("%s: the lease ran out; stopped acting", self.ctx_name)

    async def stop(self) -> None:
        """Stop answering, acting and folding, and close the state (the lease is lost or
        handed on)."""
        self.active = False
        if self.served is not None:
            with contextlib.suppress(Exception):
                await self.served.stop()
            self.served = None
        if self.proj is not None:
            self.proj.stop()
        for t in self._tasks:
            if not t.done():
                t.cancel()
            with contextlib.suppress(BaseException):
                await t
        self._tasks = []
        self._acting = None
        for r in self.reactors:
            r.end_term()
        self.reactors = []
        if self.proj is not None and self.store is not None:  # (not after a second stop)
            self.proj.finish()
        if self.store is not None:
            self.store.close()
            self.store = None

    def lapsed(self) -> bool:
        """Its reactors stopped because the lease's validity ran out between two renewals
        (the loop held up longer than the TTL): a renewal may still succeed, nobody else
        having taken it, but this partition acts no more. It must be handed on and started
        afresh, or its tenants' runs would wait for ever."""
        acting = self._acting
        return (
            acting is not None
            and acting.done()
            and not acting.cancelled()
            and (acting.exception() is None)
        )

    def failure(self) -> BaseException | None:
        """Why the partition's projector or reactors stopped, if they failed."""
        for t in self._tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                return t.exception()
        return None


class PartitionSet:
    """The partitions this process holds, kept to its share of the live planners'."""

    def __init__(
        self,
        base: RoleContext,
        kv: KeyValue,
        ttl_s: float,
        stream: str,
        partitions: int,
        holder: str,
    ) -> None:
        self.base = base
        self.kv = kv
        self.ttl_s = ttl_s
        self.stream = stream
        self.n = partitions
        self.holder = holder
        self.member_key = names.PLANNER_MEMBERS + re.sub(r"[^A-Za-z0-9_=-]", "_", holder)
        self.held: dict[int, Partition] = {}
        self.members = 1

    @property
    def share(self) -> int:
        """At most this many partitions: ceil(N / live planners)."""
        return math.ceil(self.n / max(1, self.members))

    async def step(self) -> None:
        await self._announce()
        self.members = await self._count_members()
        for k, part in list(self.held.items()):
            error = part.failure()
            if error is not None:
                raise error
            if part.lapsed():
                log.warning("planner p%d/%d: handing it on (its lease ran out)", k, self.n)
                del self.held[k]
                await part.stop()
                await part.lease.release()
                continue
            if not await part.lease.renew():
                log.warning("planner p%d/%d: lease lost; stopping it", k, self.n)
                del self.held[k]
                await part.stop()
        if len(self.held) > self.share:  # a planner joined: hand one on per step
            k = max(self.held)
            part = self.held.pop(k)
            log.info("planner p%d/%d: handing it on (share now %d)", k, self.n, self.share)
            await part.stop()
            await part.lease.release()
            return
        for k in range(self.n):
            if len(self.held) >= self.share:
                break
            if k in self.held:
                continue
            lease = Lease(self.kv, names.partition_lease(k, self.n), self.holder, self.ttl_s)
            if not await lease.acquire():
                continue
            log.info("planner p%d/%d: lease taken (%s); catching up", k, self.n, self.holder)
            part = Partition(self.base, self.stream, k, self.n, lease)
            try:
                await part.start()
            except Exception:
                await part.stop()
                await lease.release()
                raise
            self.held[k] = part

    def _report(self) -> None:
        """The held partitions' problems, as the role's own (``/readyz``, status)."""
        problems = self.base.problems
        for key in [key for key in problems if key.startswith(PROBLEM_PREFIX)]:
            del problems[key]
        for k, part in self.held.items():
            for name, text in part.problems.items():
                problems[f"{PROBLEM_PREFIX}{k}/{self.n} {name}"] = text

    async def _announce(self) -> None:
        with contextlib.suppress(*NatsFailure):
            await self.kv.put(self.member_key, self.holder.encode())

    async def _count_members(self) -> int:
        try:
            keys = await entries(self.base.publisher.nc, self.base.settings.prefix)
        except (jsapi.JsApiError, *NatsFailure) as exc:
            log.debug("planner partitions: members unknown (%s)", exc)
            return self.members
        return max(1, sum(1 for key in keys if key.startswith(names.PLANNER_MEMBERS)))

    async def run(self) -> None:
        while True:
            checkpoint()
            await self.step()
            self._report()
            await asyncio.sleep(self.ttl_s / 3)

    async def close(self) -> None:
        """Hand every partition on at once (a clean stop), and leave the members."""
        for k in sorted(self.held):
            part = self.held.pop(k)
            await part.stop()
            await part.lease.release()
        self._report()
        with contextlib.suppress(*NatsFailure, nats.errors.Error):
            await self.kv.delete(self.member_key)

    def owned(self) -> dict[int, str]:
        """Each partition held here and whether it acts yet (for status)."""
        return {k: ("active" if p.active else "catching-up") for k, p in sorted(self.held.items())}


async def run(ctx: RoleContext) -> None:
    """The background service of a partitioned planner role (every instance runs it)."""
    n = ctx.settings.configuration.built(planner_from_sections).partitions
    nc = ctx.publisher.nc
    retention = ctx.settings.configuration.built(streams.events_retention_from)
    stream = await ensure_stream(nc, ctx.settings, n, retention)
    replicas = await jsapi.stream_replicas(nc, ctx.settings.events_stream)
    kv, ttl = await open_bucket(
        nc, ctx.settings.prefix, ctx.settings.configuration.built(ttl_from), replicas=replicas
    )
    parts = PartitionSet(ctx, kv, ttl, stream, n, holder_id(ctx.settings.node_id))
    try:
        await parts.run()
    finally:
        await parts.close()
