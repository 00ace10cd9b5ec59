"""Leaky buckets with a fake clock, priority digits, segment rates, and the dry run."""

from __future__ import annotations

import pytest

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex
from streamproc.planner.model import StaticSource
from streamproc.planner.pacing import (
    LeakyBucket,
    Pacer,
    estimate_seconds,
    priority_digit,
    run_limits,
    segment_rate,
)
from streamproc.planner.preview import preview
from streamproc.planner.settings import PlannerSettings
from tests.planner.util import add_images, digest, lib, schedule


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_leaky_bucket_admits_the_burst_then_paces() -> None:
    clock = FakeClock()
    b = LeakyBucket(rate=10, burst=3, now=clock)
    waits = [b.reserve() for _ in range(5)]
    assert waits[:3] == [0, 0, 0]
    assert waits[3] == pytest.approx(0.1) and waits[4] == pytest.approx(0.2)
    clock.t += 10  # the bucket drains while idle: a full burst again
    assert [b.reserve() for _ in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError):
        LeakyBucket(rate=0)


def test_pacer_the_slower_bucket_sets_the_pace() -> None:
    clock = FakeClock()
    pacer = Pacer(tenant_rate=100, registry_rate=2, burst_s=1.0, now=clock)
    waits = [pacer.delay("t1", "registry.a") for _ in range(4)]
    assert waits[0] == 0 and waits[3] == pytest.approx(1.0)  # 2/s per host, burst 2
    assert pacer.delay("t1", "registry.b") == 0  # another host has its own budget
    assert pacer.delay("t2") == 0  # and tenants do not share a bucket


def test_priority_digits_by_trigger_and_tier() -> None:
    assert [priority_digit("manual", t) for t in range(3)] == [0, 1, 2]
    assert [priority_digit("feedser", t) for t in range(3)] == [3, 4, 5]
    assert [priority_digit("vexer", t) for t in range(3)] == [3, 4, 5]
    assert [priority_digit("cron", t) for t in range(3)] == [6, 7, 8]


def test_limits_and_rates() -> None:
    lim = run_limits(
        [p.Limits(rate_per_second=30), p.Limits(parallelism=4)], max_jobs=9, rate=50, parallelism=8
    )
    assert (lim.max_jobs, lim.rate, lim.parallelism) == (9, 30, 4)
    assert (
        segment_rate(30, 4) == 8
        and segment_rate(30, 4, host_rate=5) == 5
        and segment_rate(1, 8) == 1
    )
    assert estimate_seconds(100, 50, 200) == 2.0
    assert estimate_seconds(100, 50, 20) == 5.0
    assert estimate_seconds(100, 50, 200, {"a": 90, "b": 10}, 10) == 9.0


def test_preview_uses_the_same_planning_and_emits_nothing() -> None:
    idx = ImpactIndex()
    add_images(idx, "t1", 300)
    idx.add_vuln_keys("CVE-9", [lib(9)])
    cfg = PlannerSettings(segment_size=2, preview_sample=5, default_rate=10, default_parallelism=1)
    scheds = [schedule(limits=p.Limits(max_jobs=5))]
    pv = preview(
        "t1",
        schedules=scheds,
        source=StaticSource(idx),
        cfg=cfg,
        keys=[lib(1)],
        vulns=["CVE-9"],
        kev=["CVE-9"],
    )
    assert (pv.candidates, pv.deduped, pv.queued, pv.spilled) == (6, 6, 5, 1)
    assert pv.segments == 3 and pv.estimated_seconds == 0.5 and pv.schedule_ids == ["s1"]
    assert set(pv.sample[:3]) == {digest("t1", n) for n in (9, 109, 209)}  # KEV first
    whole = preview("t1", schedules=[], source=StaticSource(idx), cfg=cfg, selection=p.Selection())
    assert whole.candidates == 300 and whole.queued == 300 and len(whole.sample) == 5
    cold = preview(
        "t1", schedules=scheds, source=StaticSource(idx, warm=False), cfg=cfg, keys=[lib(1)]
    )
    assert cold.degraded and cold.queued == 0
