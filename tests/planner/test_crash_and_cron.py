"""Crash safety with a real SIGKILL, and the cron reactor on a fake clock — both against
the real nats-server and RocksDB."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.hlc import wall_ms
from streamproc.ids import export_run_id
from streamproc.natsd.server import EmbeddedNats
from streamproc.planner.cron import CronReactor, tick_id
from streamproc.planner.model import StaticSource, segment_id
from streamproc.planner.settings import PlannerSettings
from streamproc.state.keys import CHECKPOINT_KEY, META_CF, Checkpoint
from streamproc.state.store import RocksStore
from tests.planner.crash_planner import CFG as CRASH_CFG
from tests.planner.crash_planner import crash_index
from tests.planner.harness import PlannerProcess, count, events_of, read_stream, wait_until
from tests.planner.util import created, lib

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("die_after", ["events", "work"])
async def test_planner_killed_mid_plan_then_restarted_enqueues_nothing_twice(
    nats_server: EmbeddedNats,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    die_after: str,
) -> None:
    events, work, _ = stream_names
    now = f"{wall_ms()}:0:gw"
    setup = [
        new_event("schedule.created", "t1", created("s1", subscriptions=["feedser"]), now),
        new_event(
            "export.feedser",
            "t1",
            p.FeedserExport(export_id="x", changed_product_keys=[lib(k) for k in range(50)]),
            now,
        ),
    ]
    acks = await publisher.publish_events(setup)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.planner.crash_planner",
        nats_server.url,
        prefix,
        str(state_dir),
        str(acks[-1].seq),
        die_after,
        cwd=ROOT,
    )
    assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
    run_id = export_run_id("t1", ["x"])
    segs = await events_of(nc, events, "segment.enqueued")
    assert [s.id for s in segs] == [segment_id(run_id, n) for n in range(len(segs))]
    assert len(segs) > 5 and len(await events_of(nc, events, "run.planned")) == 1
    assert await count(nc, work) == (0 if die_after == "events" else len(segs))
    dead = RocksStore(state_dir, read_only=True)  # what the killed planner had committed
    try:
        cp = msgspec.json.decode(dead.get(META_CF, CHECKPOINT_KEY) or b"", type=Checkpoint)
        assert cp.last_seq == acks[-1].seq  # the export, not the run it published
    finally:
        dead.close()

    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(crash_index()), CRASH_CFG
    ).start()
    try:
        assert planner.ctx is not None
        runs = planner.ctx.shared["pl_runs"]
        await wait_until(lambda: runs.is_settled("t1", run_id), what="run.planned folded")  # type: ignore[attr-defined]
        await wait_until(lambda: planner.reactors[0].recovered, what="restart check")  # type: ignore[attr-defined]
    finally:
        await planner.stop()
    log = await events_of(nc, events)
    kinds = [e.kind for e in log]
    assert (kinds.count("run.requested"), kinds.count("run.planned")) == (1, 1)
    assert [e.id for e in log if e.kind == "segment.enqueued"] == [s.id for s in segs]
    items = await read_stream(nc, work)
    assert sorted(i for _, _, i in items) == sorted(s.id for s in segs)  # each exactly once


class FakeWall:
    def __init__(self, text: str) -> None:
        self.ms = _ms(text)

    def set(self, text: str) -> None:
        self.ms = _ms(text)

    def __call__(self) -> int:
        return self.ms


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


async def test_cron_fires_each_tick_once_across_planners_restarts_and_downtime(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    events = stream_names[0]
    at = f"{_ms('2025-03-08T12:00:00+00:00')}:0:gw"
    ny = {"cron": "30 2 * * *", "timezone": "America/New_York"}
    setup = [
        new_event("schedule.created", "t1", created("s1", **ny), at),
        new_event("schedule.created", "t1", created("paused", enabled=False, **ny), at),
        new_event("schedule.created", "t1", created("gone", **ny), at),
        new_event("schedule.deleted", "t1", p.ScheduleStateChange(schedule_id="gone"), at),
    ]
    last = (await publisher.publish_events(setup))[-1].seq
    cfg = PlannerSettings()
    wall = FakeWall("2025-03-09T06:59:30+00:00")
    proc = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(crash_index()), cfg, plan=False
    ).start()
    try:
        ctx, proj = proc.ctx, proc.proj
        assert ctx is not None and proj is not None
        await proj.wait_for(last, 10)
        a, b = CronReactor(ctx.settings, cfg, wall=wall), CronReactor(ctx.settings, cfg, wall=wall)
        await a.react(ctx)
        assert a.published == 0  # 02:30 does not exist today; 03:00 EDT is 07:00Z
        wall.set("2025-03-09T07:00:20+00:00")
        await a.react(ctx)
        await b.react(ctx)  # a second planner, a few seconds behind: same tick, same id
        assert a.published == b.published == 1
        info = await jsapi.stream_info(nc, events)
        assert info is not None and info.state.last_seq == last + 1
        await proj.wait_for(last + 1, 10)
        wall.set("2025-03-09T07:01:00+00:00")
        restarted = CronReactor(ctx.settings, cfg, wall=wall)
        await restarted.react(ctx)
        assert restarted.published == 0
        wall.set("2025-03-12T12:00:00+00:00")  # down for three days
        await restarted.react(ctx)
        none = CronReactor(ctx.settings, PlannerSettings(missed_ticks="none"), wall=wall)
        wall.set("2025-03-15T12:00:00+00:00")
        await none.react(ctx)
        assert none.published == 0
    finally:
        await proc.stop()
    ticks = await events_of(nc, events, "run.requested")
    assert [(e.id, e.payload.schedule_id, e.payload.reason.scheduled_for) for e in ticks] == [
        (tick_id("t1", "s1", _ms("2025-03-09T07:00:00+00:00")), "s1", "2025-03-09T07:00:00Z"),
        (tick_id("t1", "s1", _ms("2025-03-12T06:30:00+00:00")), "s1", "2025-03-12T06:30:00Z"),
    ]
    assert ticks[0].payload.reason.text is None and "missed" in (ticks[1].payload.reason.text or "")
    assert all(e.payload.trigger == "cron" and e.id == e.payload.run_id for e in ticks)
