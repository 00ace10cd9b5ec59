"""Priority digits, run limits, the duration estimate, and the dry run. (The leaky buckets
themselves: tests/runner/test_gcra.py and tests/runner/test_limiter.py.)"""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex
from streamproc.planner.model import StaticSource
from streamproc.planner.pacing import estimate_seconds, priority_digit, run_limits
from streamproc.planner.preview import preview
from streamproc.planner.settings import PlannerSettings
from tests.planner.util import add_images, digest, lib, schedule


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
