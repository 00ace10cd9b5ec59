"""Planner benchmark: an export of 10,000 changed keys and a nightly plan on a 50,000-image
catalog, each until run.planned and every segment is acknowledged in the work stream.

Runs an embedded nats-server on loopback and the planner as a process hosts it (projector
folding into RocksDB + the planner reactor), with the catalog built in memory directly with
the ImpactIndex core: 12 purls per image (4 of 500 popular packages, 8 of a 100,000-package
long tail) — fewer than a real image, which only changes the index build time, not the
planner's work (resolve + plan + publish). Each figure has a baseline measured in the same
run: the bare pipelined publish of the same messages (same count, same bytes). Medians of
several trials; ends with one line of JSON.

    python bench/planner.py [--images 50000] [--keys 10000] [--trials 3]

``--partitioned`` measures partitioned planners instead (``planner.partitions``, docs/planning.md):
8 tenants, each with a catalog and a schedule subscribed to Feedser, and one export per
tenant touching all its images; the time from publishing the 8 exports until every work item
of their 8 runs is stored, with ``streamproc planner`` processes (separate processes, like a
deployment): one unpartitioned planner, one planner holding both of 2 partitions, and two
planners holding one each. Ends with ``{"partitioned_2_vs_1": ...}``: two partitioned
planners' time over the one unpartitioned planner's.

    python bench/planner.py --partitioned [--tenant-images 12000] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop
from nats.aio.msg import Msg

from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.configfile.loader import environment_only
from streamproc.events import payloads as p
from streamproc.events.envelope import decode, encode, new_event
from streamproc.hlc import HybridLogicalClock, wall_ms
from streamproc.ids import export_run_id
from streamproc.impact.index import ImpactIndex
from streamproc.impact.selector import Selector
from streamproc.names import plan_stream
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.planner.changes import Changes
from streamproc.planner.emit import plan_events
from streamproc.planner.model import Cause, StaticSource
from streamproc.planner.plan import plan_run
from streamproc.planner.reactor import PlannerReactor
from streamproc.planner.role import PLANNER_PROJECTIONS
from streamproc.planner.settings import PlannerSettings
from streamproc.runtime.batching import batch_time_from
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import RoleContext
from streamproc.sbom.image import IndexedImage
from streamproc.state.store import RocksStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the process helpers: tests/
from tests.planner.partitioned import catalog, export, holders, planner, planner_env, spread_tenants

PREFIX = "bench"
TENANT = "acme"


def popular(k: int) -> str:
    return f"pkg:deb/debian/base{k}"


def tail(k: int) -> str:
    return f"pkg:npm/tail{k}"


def build_catalog(n: int, seed: int = 7) -> ImpactIndex:
    rnd = random.Random(seed)
    index = ImpactIndex()
    for i in range(n):
        keys = {popular(rnd.randrange(500)) for _ in range(4)}
        keys |= {tail(rnd.randrange(100_000)) for _ in range(8)}
        ordered = sorted(keys)
        # already canonical purls: skip build_image's normalisation (the index build is
        # not what this measures)
        index.index_image(
            IndexedImage(
                tenant=TENANT,
                digest="sha256:" + hashlib.sha256(str(i).encode()).hexdigest(),
                purls=[f"{k}@{i % 7}.0" for k in ordered],
                product_keys=ordered,
                used=[rnd.random() < 0.75 for _ in ordered],
                registry="registry.local",
                repo=f"team/app{i % 50}",
                namespace=f"ns{i % 10}",
            )
        )
    return index


class TimedReactor(PlannerReactor):
    """Records when each run's last work item was acknowledged."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.done: dict[str, float] = {}
        self.segments: dict[str, int] = {}
        self.wake = asyncio.Event()

    async def _plan(self, ctx, state, source, d):  # type: ignore[no-untyped-def, override]
        await super()._plan(ctx, state, source, d)
        self.done[d.run_id] = time.perf_counter()
        self.wake.set()


async def wait_run(reactor: TimedReactor, n_before: int) -> None:
    while reactor.planned <= n_before:
        reactor.wake.clear()
        await asyncio.wait_for(reactor.wake.wait(), 30)


async def main(args: argparse.Namespace) -> dict[str, float]:
    t0 = time.perf_counter()
    index = build_catalog(args.images)
    build_s = time.perf_counter() - t0
    print(f"catalog: {len(index):,} images, 12 purls each, built in {build_s:.1f} s")
    rnd = random.Random(11)
    work = Path(tempfile.mkdtemp(prefix="streamproc-bench-planner-"))
    server = EmbeddedNats(work / "nats", port=free_port()).start()
    export_s: list[float] = []
    nightly_s: list[float] = []
    bare_export: list[float] = []
    bare_nightly: list[float] = []
    resolve_s: list[float] = []
    pure_export: list[float] = []
    pure_nightly: list[float] = []
    stats: dict[str, p.RunStats] = {}
    segs: dict[str, int] = {}
    try:
        nc = await connect(server.url)
        await streams.apply(nc, streams.definitions(PREFIX))
        pub = await Publisher(nc, prefix=PREFIX).start()
        settings = Settings(prefix=PREFIX, data_dir=work, node_id="bench")
        cfg = PlannerSettings(debounce_s=0, max_jobs_per_run=100_000)
        store = RocksStore(work / "state")
        projections = [f() for f in PLANNER_PROJECTIONS]
        proj = await Projector(  # with the batch-time bound the planner role runs with
            nc,
            store,
            projections,
            stream=settings.events_stream,
            role="planner",
            batch=settings.batch,
            batch_max_s=environment_only().built(batch_time_from),
        ).start()
        clock = HybridLogicalClock("bench")
        ctx = RoleContext(
            role="planner",
            settings=settings,
            store=store,
            publisher=pub,
            clock=clock,
            applied=lambda: proj.applied,
            wait_for=proj.wait_for,
            lag=proj.lag,
            shared={x.name: x for x in projections},
        )
        reactor = TimedReactor(settings, cfg, source=StaticSource(index))
        from streamproc.runtime.loops import react_loop

        tasks = [
            asyncio.create_task(proj.run()),
            asyncio.create_task(react_loop(proj, [reactor], ctx)),
        ]
        now = f"{wall_ms()}:0:bench"
        await pub.publish_events(
            [
                new_event(
                    "schedule.created",
                    TENANT,
                    p.ScheduleCreated(
                        schedule_id="events",
                        name="event-driven",
                        cron="0 3 * * *",
                        timezone="Europe/Sofia",
                        subscriptions=["feedser"],
                    ),
                    now,
                ),
                new_event(
                    "schedule.created",
                    TENANT,
                    p.ScheduleCreated(
                        schedule_id="nightly",
                        name="nightly",
                        cron="0 2 * * *",
                        timezone="Europe/Sofia",
                        subscriptions=[],
                    ),
                    now,
                ),
            ]
        )
        for trial in range(args.trials):
            keys = [tail(k) for k in rnd.sample(range(100_000), args.keys - 5)]
            kev = [popular(k) for k in rnd.sample(range(500), 5)]
            export = new_event(
                "export.feedser",
                TENANT,
                p.FeedserExport(
                    export_id=f"fx-{trial}",
                    changed_product_keys=keys,
                    advisories=[
                        p.AdvisoryChange(vuln_id=f"CVE-{trial}-{i}", product_keys=[k], kev=True)
                        for i, k in enumerate(kev)
                    ],
                ),
                f"{wall_ms()}:0:gw",
            )
            before = reactor.planned
            t1 = time.perf_counter()
            await pub.publish_event(export)
            await wait_run(reactor, before)
            export_s.append(max(reactor.done.values()) - t1)
            t1 = time.perf_counter()  # the index query alone, after (hot), for comparison
            resolve = index.resolve_by_purls([*keys, *kev], True, Selector(tenant=TENANT))
            resolve_s.append(time.perf_counter() - t1)
            assert resolve.count > 0

            tick = new_event(
                "run.requested",
                TENANT,
                p.RunRequested(
                    run_id=f"nightly-{trial}",
                    trigger="cron",
                    schedule_id="nightly",
                    reason=p.RunReason(scheduled_for=f"2026-01-0{trial + 1}T00:00:00Z"),
                ),
                f"{wall_ms()}:0:cron",
                event_id=f"nightly-{trial}",
            )
            before = reactor.planned
            t1 = time.perf_counter()
            await pub.publish_event(tick)
            await wait_run(reactor, before)
            nightly_s.append(reactor.done[f"nightly-{trial}"] - t1)

            # the same plans as a pure function, no I/O (the planner's own compute)
            schedules = projections[0].for_tenant(TENANT)  # type: ignore[attr-defined]
            src = StaticSource(index)
            ex_cause = Cause(
                run_id="pure",
                tenant=TENANT,
                trigger="feedser",
                at_ms=0,
                changes=Changes(frozenset(keys + kev), frozenset(kev)),
            )
            ni_cause = Cause(
                run_id="pure", tenant=TENANT, trigger="cron", at_ms=0, schedule_id="nightly"
            )
            for cause, out in ((ex_cause, pure_export), (ni_cause, pure_nightly)):
                t1 = time.perf_counter()
                plan = plan_run(cause, schedules, src, {}, cfg)
                plan_events(plan, clock)
                out.append(time.perf_counter() - t1)

        # what the planner published, and the same messages published bare (baselines)
        await proj.wait_for(proj.head, 10)
        runs = projections[2]
        for name, run_id in (
            ("export", export_run_id(TENANT, ["fx-0"])),
            ("nightly", "nightly-0"),
        ):
            rec = runs.record(TENANT, run_id)  # type: ignore[attr-defined]
            assert rec is not None and rec.stats is not None, run_id
            stats[name] = rec.stats
            segs[name] = len(rec.segments)
        # The planner stops first: the bare runs are not its plans and it would reject them.
        proj.stop()
        await cancel(tasks)
        for trial in range(args.trials):
            for name, out in (("export", bare_export), ("nightly", bare_nightly)):
                out.append(await bare_publish(pub, index, stats[name], segs[name], clock, trial))
        store.close()
        await pub.close()
        await nc.close()
    finally:
        server.stop()

    ex, ni = statistics.median(export_s), statistics.median(nightly_s)
    bx, bn = statistics.median(bare_export), statistics.median(bare_nightly)
    se, sn = stats["export"], stats["nightly"]
    rows = [
        (
            f"export {args.keys:,} keys -> {se.queued:,} images, {segs['export']} segments",
            ex,
            bx,
            1.0,
        ),
        (f"nightly {sn.queued:,} images, {segs['nightly']} segments", ni, bn, 2.0),
    ]
    print(
        f"\n{'measurement (until every segment is acked)':<52} {'planner s':>10} "
        f"{'bare publish s':>15} {'ratio':>7} {'target s':>9}"
    )
    print("-" * 97)
    for name, got, base, target in rows:
        print(f"{name:<52} {got:>10.3f} {base:>15.3f} {got / base:>6.1f}x {target:>9.1f}")
    print(
        f"of which planning as a pure function (resolve, order, shard, segment, envelopes): "
        f"export {statistics.median(pure_export):.3f} s, "
        f"nightly {statistics.median(pure_nightly):.3f} s"
    )
    print(
        f"resolve alone (index.resolve_by_purls, {args.keys:,} keys, hot): "
        f"{statistics.median(resolve_s) * 1000:.1f} ms; medians of {args.trials}; bare publish ="
        f" run.planned + segment events + work items of the same size, pipelined"
    )
    result = {"export_10k_plan_s": round(ex, 3), "nightly_50k_plan_s": round(ni, 3)}
    print(json.dumps(result))
    return result


LIBS = 200
"""Libraries of the partitioned catalog; each image uses 8 of them, every export all."""
LAYOUTS = (("1 planner, unpartitioned", 1, 1), ("1 planner, 2 partitions", 2, 1),
           ("2 planners, 1 partition each", 2, 2))  # fmt: skip


async def partitioned(args: argparse.Namespace) -> dict[str, float]:
    tenants = spread_tenants(8, 2)
    work = Path(tempfile.mkdtemp(prefix="streamproc-bench-partitions-"))
    server = EmbeddedNats(work / "nats", port=free_port()).start()
    times: dict[str, list[float]] = {name: [] for name, _, _ in LAYOUTS}
    try:
        nc = await connect(server.url)
        for trial in range(args.trials):
            for name, n, procs in LAYOUTS:
                prefix = f"pb{trial}x{n}x{procs}"
                times[name].append(
                    await partitioned_trial(nc, server.url, prefix, work, tenants, n, procs, args)
                )
                print(f"trial {trial + 1}: {name}: {times[name][-1]:.3f} s", flush=True)
        await nc.close()
    finally:
        server.stop()
    one = statistics.median(times[LAYOUTS[0][0]])
    print(f"\n8 tenants x {args.tenant_images:,} images (8 of {LIBS} libraries each); one "
          f"export per tenant naming all {LIBS}; from publishing the 8 exports to the last "
          f"work item stored; medians of {args.trials}; {os.cpu_count()} cores")  # fmt: skip
    print(f"{'layout':<34} {'N':>3} {'seconds':>9} {'vs 1 planner':>13}")
    print("-" * 62)
    for name, n, _ in LAYOUTS:
        t = statistics.median(times[name])
        print(f"{name:<34} {n:>3} {t:>9.3f} {t / one:>12.2f}x")
    two = statistics.median(times[LAYOUTS[2][0]])
    same_n = statistics.median(times[LAYOUTS[1][0]])
    result = {
        "partitioned_2_vs_1": round(two / one, 3),
        "partitioned_2_vs_1_same_partitions": round(two / same_n, 3),
    }
    print(json.dumps(result))
    return result


async def partitioned_trial(
    nc: FastClient,
    url: str,
    prefix: str,
    work: Path,
    tenants: list[str],
    partitions: int,
    procs: int,
    args: argparse.Namespace,
) -> float:
    """One layout: streams, catalog, planners warmed by a first export each, then the timed
    export round; the planners stopped and the streams deleted after."""
    defs = streams.definitions(prefix)
    await streams.apply(nc, defs)
    pub = await Publisher(nc, prefix=prefix).start()
    for t in tenants:
        await pub.publish_events(catalog(t, args.tenant_images, LIBS, per_image=8))
    env = planner_env(partitions, 5.0, STREAMPROC_PLANNER_SEGMENT_SIZE="500")
    planners = [planner(f"p{i}", url, prefix, work / prefix, env) for i in range(procs)]
    planned: set[str] = set()
    segments: dict[str, int] = {}
    stored: set[str] = set()
    progress = asyncio.Event()

    async def on_event(msg: Msg) -> None:
        if b'"run.planned"' in msg.data[:200]:
            e = decode(msg.data)
            planned.add(e.payload.run_id)
            segments[e.payload.run_id] = len(e.payload.segments)
            progress.set()

    async def on_work(msg: Msg) -> None:
        stored.add((msg.headers or {}).get("Nats-Msg-Id", ""))
        progress.set()

    subs = [await nc.subscribe(f"{prefix}.events.*.run.>", cb=on_event),
            await nc.subscribe(f"{prefix}.work.>", cb=on_work)]  # fmt: skip

    async def until(runs: set[str]) -> None:
        while not (runs <= planned and len(stored) >= sum(segments[r] for r in planned)):
            progress.clear()
            await asyncio.wait_for(progress.wait(), 300)

    try:
        for proc in planners:
            proc.start()
        if procs > 1:  # the planners share the partitions before the clock starts
            while len(set((await holders(nc, prefix, partitions)).values())) < procs:
                await asyncio.sleep(0.1)
        warm = {export_run_id(t, [f"warm-{t}"]) for t in tenants}
        await pub.publish_events([export(t, f"warm-{t}", 1) for t in tenants])
        await until(warm)
        timed = {export_run_id(t, [f"fx-{t}"]) for t in tenants}
        t0 = time.perf_counter()
        await pub.publish_events([export(t, f"fx-{t}", LIBS) for t in tenants])
        await until(timed)
        return time.perf_counter() - t0
    finally:
        for sub in subs:
            await sub.unsubscribe()
        for proc in planners:
            proc.stop()
        await pub.close()
        for name in [d["name"] for d in defs] + [plan_stream(defs[0]["name"], partitions)]:
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(nc, f"STREAM.DELETE.{name}")
        shutil.rmtree(work / prefix, ignore_errors=True)


async def cancel(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: Python 3.11's ``wait_for`` can swallow a cancellation that races
    with its inner future completing (the reactor loop waits with it)."""
    while not all(t.done() for t in tasks):
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks, timeout=0.1)


async def bare_publish(
    pub: Publisher,
    index: ImpactIndex,
    stats: p.RunStats,
    n_segs: int,
    clock: HybridLogicalClock,
    trial: int,
) -> float:
    """The same number of messages of the same size as the plan, published bare."""
    digests = index.resolve_all(Selector(tenant=TENANT)).digests()[: stats.queued]
    per = max(1, -(-len(digests) // max(1, n_segs)))
    run_id = f"bare-{trial}-{stats.queued}"
    payloads = [
        p.SegmentEnqueued(
            segment_id=f"{run_id}-{i}", run_id=run_id, shard=i, digests=digests[j : j + per]
        )
        for i, j in enumerate(range(0, len(digests), per))
    ]
    planned = new_event(
        "run.planned", TENANT, p.RunPlanned(run_id=run_id, trigger="cron"), clock.now()
    )
    evs = [planned, *(new_event("segment.enqueued", TENANT, s, clock.now()) for s in payloads)]
    items = [(pub.subject_of(e), encode(e), e.id) for e in evs]
    work = [(f"{PREFIX}.work.{TENANT}.segment.9", encode(e), e.id) for e in evs[1:]]
    t0 = time.perf_counter()
    await pub.publish_many(items)
    await pub.publish_many(work)
    return time.perf_counter() - t0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--tenant-images", type=int, default=12_000)
    args = parser.parse_args()
    if args.partitioned:
        uvloop.run(partitioned(args))
    else:
        uvloop.run(main(args))
