"""The planner against the real nats-server and RocksDB: one export → one run and its
segments (in the event log and the work queue), storms, spill-over, manual runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import encode, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import export_run_id, spill_run_id
from streamproc.impact.index import ImpactIndex
from streamproc.planner.changes import Changes
from streamproc.planner.emit import planned_event_id
from streamproc.planner.model import Cause, StaticSource
from streamproc.planner.plan import plan_run
from streamproc.planner.settings import PlannerSettings
from tests.planner.harness import PlannerProcess, count, events_of, read_stream, wait_until
from tests.planner.util import add_images, created, lib, schedule

CFG = PlannerSettings(debounce_s=0, segment_size=100, spill_delay_s=0)
KEYS = [lib(k) for k in range(0, 100, 2)]


def stamp() -> str:
    return f"{wall_ms()}:0:gw"


def ev(kind: str, payload: p.Payload, tenant: str = "t1", event_id: str | None = None):  # type: ignore[no-untyped-def]
    return new_event(kind, tenant, payload, stamp(), event_id=event_id)


@pytest.fixture(scope="module")
def index() -> ImpactIndex:
    idx = ImpactIndex()
    add_images(idx, "t1", 1200)
    return idx


def expected(index: ImpactIndex, run_id: str, limits: p.Limits | None = None):  # type: ignore[no-untyped-def]
    cause = Cause(
        run_id=run_id, tenant="t1", trigger="feedser", at_ms=0, changes=Changes(frozenset(KEYS))
    )
    return plan_run(
        cause, [schedule(subscriptions=["feedser"], limits=limits)], StaticSource(index), {}, CFG
    )


async def test_an_export_storm_plans_exactly_one_run_and_its_segments(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    index: ImpactIndex,
) -> None:
    events, work, _ = stream_names
    run_id = export_run_id("t1", ["fx-1"])
    want = expected(index, run_id)
    assert len(want.segments) == 8 and want.stats.queued == 600
    export = p.FeedserExport(export_id="fx-1", changed_product_keys=KEYS)
    await publisher.publish_event(ev("schedule.created", created("s1", subscriptions=["feedser"])))
    # 50 deliveries: the same event re-sent (JetStream keeps one) and re-stamped copies
    # from other gateway nodes (new event ids, same exportId: the fold keeps one)
    same = ev("export.feedser", export)
    storm = [same] * 25 + [ev("export.feedser", export) for _ in range(25)]
    await publisher.publish_events(storm[:10])
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), CFG
    ).start()
    try:
        await publisher.publish_events(storm[10:])
        await wait_until(lambda: has(nc, work, 8), what="work items")
        await wait_until(lambda: _settled(planner, run_id), what="run.planned folded back")
        await publisher.publish_events([ev("export.feedser", export) for _ in range(5)])
        assert planner.proj is not None
        head = (await _info(nc, events)).state.last_seq
        await planner.proj.wait_for(head, 10)
        assert planner.reactors[0].planned == 1  # type: ignore[attr-defined]
    finally:
        await planner.stop()

    log = await events_of(nc, events)
    kinds = [e.kind for e in log]
    assert kinds.count("export.feedser") == 31  # 1 + 25 re-stamped + 5 late, 24 de-duplicated
    assert kinds.count("run.requested") == 1 and kinds.count("run.planned") == 1
    req = next(e for e in log if e.kind == "run.requested")
    pl = next(e for e in log if e.kind == "run.planned")
    segs = [e for e in log if e.kind == "segment.enqueued"]
    assert req.id == run_id and req.payload.reason.feedser_export_ids == ["fx-1"]
    assert pl.id == planned_event_id(run_id) and pl.causation_id == run_id
    assert pl.payload.stats == want.stats and pl.payload.segments == want.run_planned().segments
    assert [s.id for s in segs] == [s.segment_id for s in want.segments]
    assert [s.payload.digests for s in segs] == [s.digests for s in want.segments]
    assert (
        kinds.index("run.requested") < kinds.index("run.planned") < kinds.index("segment.enqueued")
    )

    items = await read_stream(nc, work)
    assert len(items) == len(segs)
    by_id = {s.id: s for s in segs}
    for subject, data, msg_id in items:
        seg = by_id[msg_id]
        assert data == encode(seg)  # the same envelope bytes, Nats-Msg-Id = event id
        assert subject == f"{prefix}.work.t1.segment.{seg.payload.priority}"
    assert planner.ctx is not None


async def test_spill_over_continues_in_the_next_window_until_done(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    index: ImpactIndex,
) -> None:
    events, work, _ = stream_names
    lim = p.Limits(max_jobs=250)
    await publisher.publish_event(
        ev("schedule.created", created("s1", subscriptions=["feedser"], limits=lim))
    )
    await publisher.publish_event(
        ev("export.feedser", p.FeedserExport(export_id="big", changed_product_keys=KEYS))
    )
    run_id = export_run_id("t1", ["big"])
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), CFG
    ).start()
    try:
        last = spill_run_id(run_id, 500)
        await wait_until(lambda: _settled(planner, last), what="the last continuation")
        await wait_until(lambda: all_enqueued(nc, events, work), what="work items")
    finally:
        await planner.stop()
    planned = await events_of(nc, events, "run.planned")
    assert [
        (e.payload.run_id, e.payload.stats.queued, e.payload.stats.spilled) for e in planned
    ] == [
        (run_id, 250, 350),
        (spill_run_id(run_id, 250), 250, 100),
        (last, 100, 0),
    ]
    requested = await events_of(nc, events, "run.requested")
    assert [e.payload.reason.feedser_export_ids for e in requested] == [["big"]] * 3
    segs = await events_of(nc, events, "segment.enqueued")
    digests = [d for e in segs for d in e.payload.digests]
    assert len(digests) == len(set(digests)) == 600
    assert await count(nc, work) == len(segs)


async def test_manual_run_requested_is_planned_at_manual_priority(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    index: ImpactIndex,
) -> None:
    events, work, _ = stream_names
    req = p.RunRequested(run_id="m-1", trigger="manual", selection=p.Selection(digests=[]))
    await publisher.publish_event(ev("run.requested", req, event_id="m-1"))
    await publisher.publish_event(ev("run.cancel_requested", p.RunCancelRequested(run_id="m-0")))
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), CFG
    ).start()
    try:
        await wait_until(lambda: _settled(planner, "m-1"), what="manual run planned")
        await wait_until(lambda: all_enqueued(nc, events, work), what="work items")
    finally:
        await planner.stop()
    segs = await events_of(nc, events, "segment.enqueued")
    assert sum(len(s.payload.digests) for s in segs) == 1200
    assert {s.payload.priority for s in segs} == {2}
    items = await read_stream(nc, work)
    assert {subj for subj, _, _ in items} == {f"{prefix}.work.t1.segment.2"}


async def test_a_run_cancelled_before_it_is_planned_gets_an_empty_plan(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    index: ImpactIndex,
) -> None:
    """The cancel is folded in the same pass as the request (the planner was busy or down):
    the run is still planned, empty, so that the runner can end it ``cancelled`` — without a
    ``run.planned`` it would stay ``planning`` for ever."""
    events, work, _ = stream_names
    req = p.RunRequested(run_id="c-1", trigger="manual", selection=p.Selection(digests=[]))
    await publisher.publish_event(ev("run.requested", req, event_id="c-1"))
    await publisher.publish_event(ev("run.cancel_requested", p.RunCancelRequested(run_id="c-1")))
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), CFG
    ).start()
    try:
        await wait_until(lambda: _settled(planner, "c-1"), what="cancelled run planned")
    finally:
        await planner.stop()
    (plan,) = await events_of(nc, events, "run.planned")
    assert plan.payload.run_id == "c-1" and plan.payload.segments == []
    assert (plan.payload.stats.candidates, plan.payload.stats.queued) == (0, 0)
    assert await events_of(nc, events, "segment.enqueued") == []
    assert await count(nc, work) == 0


async def has(nc: FastClient, stream: str, n: int) -> bool:
    return await count(nc, stream) >= n


async def all_enqueued(nc: FastClient, events: str, work: str) -> bool:
    segs = await events_of(nc, events, "segment.enqueued")
    return bool(segs) and await count(nc, work) == len(segs)


def _settled(planner: PlannerProcess, run_id: str, tenant: str = "t1") -> bool:
    assert planner.ctx is not None
    runs = planner.ctx.shared["pl_runs"]
    return runs.is_settled(tenant, run_id)  # type: ignore[attr-defined, no-any-return]


async def _info(nc: FastClient, stream: str):  # type: ignore[no-untyped-def]
    from streamproc.bus import jsapi

    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info


async def test_the_role_plans_from_the_impact_projection_it_hosts(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    """PLANNER as registered: images arrive as image.indexed events, the index is the
    ``impact`` projection folded in the same batches, reached via ``ctx.shared``."""
    events, work, _ = stream_names
    images = [
        ev(
            "image.indexed",
            p.ImageIndexed(
                digest=f"sha256:{n:064x}",
                registry="registry.local",
                repository="team/app",
                components=[
                    p.Component(purl=f"{lib(n % 4)}@1.0", product_key=lib(n % 4), used=True)
                ],
            ),
        )
        for n in range(40)
    ]
    advisory = p.AdvisoryChange(vuln_id="CVE-2026-1", product_keys=[lib(1)], kev=True)
    export = p.FeedserExport(export_id="fx", changed_product_keys=[lib(2)], advisories=[advisory])
    await publisher.publish_events(
        [ev("schedule.created", created("s1", subscriptions=["feedser"])), *images]
    )
    await publisher.publish_event(ev("export.feedser", export))
    planner = await PlannerProcess(nc, publisher, prefix, state_dir, None, CFG).start()
    try:
        assert planner.ctx is not None and "impact" in planner.ctx.shared
        run_id = export_run_id("t1", ["fx"])
        await wait_until(lambda: _settled(planner, run_id), what="run planned")
        await wait_until(lambda: all_enqueued(nc, events, work), what="work items")
    finally:
        await planner.stop()
    segs = await events_of(nc, events, "segment.enqueued")
    by_prio: dict[int, list[str]] = {}
    for s in segs:
        by_prio[s.payload.priority] = sorted(
            by_prio.get(s.payload.priority, []) + s.payload.digests
        )
    assert by_prio == {
        3: sorted(f"sha256:{n:064x}" for n in range(40) if n % 4 == 1),  # KEV advisory
        5: sorted(f"sha256:{n:064x}" for n in range(40) if n % 4 == 2),
    }


async def test_default_settings_plan_a_quiet_export_at_once_and_coalesce_a_burst(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    index: ImpactIndex,
) -> None:
    """The default 30 s window: the first export after a quiet spell is planned at once;
    the exports that arrive within the window after it become one more run when it closes
    (the planner's clock is moved past it instead of waiting 30 s)."""
    events, _, _ = stream_names
    cfg = PlannerSettings()
    assert cfg.debounce_s == 30
    ahead = [0]
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), cfg,
        wall=lambda: wall_ms() + ahead[0],
    ).start()  # fmt: skip
    reactor = planner.reactors[0]
    try:
        await publisher.publish_event(
            ev("schedule.created", created("s1", subscriptions=["feedser"]))
        )
        sent = time.monotonic()
        await publisher.publish_event(
            ev("export.feedser", p.FeedserExport(export_id="b-0", changed_product_keys=KEYS))
        )
        lead = export_run_id("t1", ["b-0"])
        await wait_until(lambda: _settled(planner, lead), what="the first export planned")
        assert time.monotonic() - sent < 5, "planned at once, not after the 30 s window"

        burst = [p.FeedserExport(export_id=f"b-{i}", changed_product_keys=KEYS[:i])
                 for i in range(1, 9)]  # fmt: skip
        await publisher.publish_events([ev("export.feedser", x) for x in burst])
        assert planner.proj is not None
        await planner.proj.wait_for((await _info(nc, events)).state.last_seq, 10)
        looked = reactor.passes  # type: ignore[attr-defined]
        await wait_until(lambda: reactor.passes >= looked + 2, what="two planner passes")  # type: ignore[attr-defined]
        assert len(await events_of(nc, events, "run.requested")) == 1, "the window is open"

        ahead[0] = 31_000  # the window closes
        rest = export_run_id("t1", [x.export_id for x in burst])
        await wait_until(lambda: _settled(planner, rest), what="the coalesced run planned")
    finally:
        await planner.stop()
    reqs = await events_of(nc, events, "run.requested")
    assert [r.payload.reason.feedser_export_ids for r in reqs] == [
        ["b-0"], sorted(x.export_id for x in burst)
    ]  # fmt: skip
    assert [r.id for r in reqs] == [lead, rest]
    assert len(await events_of(nc, events, "run.planned")) == 2
