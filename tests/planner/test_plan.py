"""Planning as a pure function: dedupe, onlyIf, limits, spill-over, ordering, sharding,
degraded mode — no I/O, an in-memory ImpactIndex built with its real code."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from msgspec import UNSET

from streamproc.events import payloads as p
from streamproc.ids import derive_id
from streamproc.impact.index import ImpactIndex
from streamproc.planner.changes import Changes
from streamproc.planner.model import DAY_MS, Cause, StaticSource
from streamproc.planner.plan import plan_run, shard_of
from streamproc.planner.records import CRITICAL, KEV
from streamproc.planner.select import hash32
from streamproc.planner.settings import PlannerSettings
from tests.planner.util import add_images, digest, lib, schedule

CFG = PlannerSettings(segment_size=50, default_parallelism=4, debounce_s=0)


def changes(keys: list[str], kev: list[str] = (), crit: list[str] = ()) -> Changes:  # type: ignore[assignment]
    return Changes(frozenset(keys), frozenset(kev), frozenset(crit))


def event_cause(ch: Changes, run_id: str = "r1", tenant: str = "t1", **kw: object) -> Cause:
    return Cause(run_id=run_id, tenant=tenant, trigger="feedser", at_ms=0, changes=ch, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def index() -> ImpactIndex:
    idx = ImpactIndex()
    add_images(idx, "t1", 400, namespace="web")
    add_images(idx, "t1", 200, start=400, namespace="data")
    add_images(idx, "t2", 100)
    return idx


def test_dedupe_across_schedules_counts_candidates_and_unique_digests(index: ImpactIndex) -> None:
    web = schedule("a", selection=p.Selection(namespaces=["web"]))
    both = schedule("b", selection=p.Selection(namespaces=["web", "data"]))
    plan = plan_run(event_cause(changes([lib(1)])), [web, both], StaticSource(index), {}, CFG)
    hit_web = [n for n in range(400) if n % 100 == 1]
    hit_data = [n for n in range(400, 600) if n % 100 == 1]
    assert plan.stats.candidates == 2 * len(hit_web) + len(hit_data)
    assert plan.stats.deduped == plan.stats.queued == len(hit_web) + len(hit_data)
    queued = [d for s in plan.segments for d in s.digests]
    assert sorted(queued) == sorted(digest("t1", n) for n in hit_web + hit_data)
    assert plan.schedule_ids == ["a", "b"]


def test_tenants_never_mix(index: ImpactIndex) -> None:
    plan = plan_run(event_cause(changes([lib(1)])), [schedule()], StaticSource(index), {}, CFG)
    queued = {d for s in plan.segments for d in s.digests}
    assert not queued & {digest("t2", n) for n in range(100)}
    assert (
        plan_run(
            event_cause(changes([lib(1)]), tenant="t3"), [schedule()], StaticSource(index), {}, CFG
        ).segments
        == []
    )


def test_only_subscribed_active_schedules_take_part(index: ImpactIndex) -> None:
    scheds = [
        schedule("vex", subscriptions=["vexer"]),
        schedule("paused", paused=True),
        schedule("deleted", deleted=True),
    ]
    plan = plan_run(event_cause(changes([lib(1)])), scheds, StaticSource(index), {}, CFG)
    assert plan.schedule_ids == [] and plan.segments == [] and plan.stats.candidates == 0


def test_usage_only_default_ignores_packages_no_entrypoint_uses() -> None:
    idx = ImpactIndex()
    add_images(idx, "t1", 10, used=False)
    add_images(idx, "t1", 10, start=10, used=True)
    ch = changes([lib(k) for k in range(100)])
    plan = plan_run(event_cause(ch), [schedule()], StaticSource(idx), {}, CFG)
    assert plan.stats.queued == 10
    cfg = PlannerSettings(usage_only=False)
    assert plan_run(event_cause(ch), [schedule()], StaticSource(idx), {}, cfg).stats.queued == 20


def test_sharding_covers_every_digest_once_in_bounded_segments(index: ImpactIndex) -> None:
    lim = p.Limits(parallelism=3)
    ch = changes([lib(k) for k in range(100)])
    cfg = PlannerSettings(segment_size=40)
    plan = plan_run(event_cause(ch), [schedule(limits=lim)], StaticSource(index), {}, cfg)
    queued = [d for s in plan.segments for d in s.digests]
    assert len(queued) == len(set(queued)) == plan.stats.queued == 600
    assert {s.shard for s in plan.segments} == {0, 1, 2}
    for n, s in enumerate(plan.segments):
        assert 1 <= len(s.digests) <= 40
        assert s.segment_id == derive_id("r1", "segment", n)
        assert all(shard_of(hash32(d), 3) == s.shard for d in s.digests)
    sizes = Counter(s.shard for s in plan.segments for _ in s.digests)
    assert min(sizes.values()) > 150  # the hash spreads evenly


def test_plan_is_deterministic(index: ImpactIndex) -> None:
    ch = changes([lib(k) for k in range(0, 100, 3)], kev=[lib(3)], crit=[lib(6)])
    a = plan_run(event_cause(ch), [schedule()], StaticSource(index), {}, CFG)
    b = plan_run(event_cause(ch), [schedule()], StaticSource(index), {}, CFG)
    assert a == b and a.run_planned() == b.run_planned()


def test_kev_then_critical_first_with_their_priority_digits(index: ImpactIndex) -> None:
    ch = changes([lib(k) for k in range(10)], kev=[lib(3)], crit=[lib(4)])
    plan = plan_run(event_cause(ch), [schedule()], StaticSource(index), {}, CFG)
    tiers = [s.tier for s in plan.segments]
    assert tiers == sorted(tiers) and set(tiers) == {0, 1, 2}
    assert all(s.priority == 3 + s.tier for s in plan.segments)
    kev_imgs = {digest("t1", n) for n in range(600) if n % 100 == 3}
    assert {d for s in plan.segments if s.tier == 0 for d in s.digests} == kev_imgs


def test_max_jobs_keeps_kev_and_critical_and_spills_the_rest(index: ImpactIndex) -> None:
    ch = changes([lib(k) for k in range(10)], kev=[lib(3)], crit=[lib(4)])
    sched = schedule(limits=p.Limits(max_jobs=10))
    plan = plan_run(event_cause(ch), [sched], StaticSource(index), {}, CFG)
    assert (plan.stats.deduped, plan.stats.queued, plan.stats.spilled) == (60, 10, 50)
    per_tier = Counter(s.tier for s in plan.segments for _ in s.digests)
    assert per_tier == {0: 6, 1: 4}  # all 6 KEV images, then 4 of the 6 critical ones
    kept = {d for s in plan.segments for d in s.digests}
    assert {digest("t1", n) for n in range(600) if n % 100 == 3} <= kept


def test_max_jobs_per_run_is_a_ceiling_no_schedule_exceeds(index: ImpactIndex) -> None:
    """A schedule recorded with more (before the ceiling was lowered) is cut at it; one
    setting none takes it."""
    ch = changes([lib(k) for k in range(10)])
    cfg = msgspec.structs.replace(CFG, max_jobs_per_run=15)
    for limits in (p.Limits(max_jobs=40), p.Limits()):
        plan = plan_run(event_cause(ch), [schedule(limits=limits)], StaticSource(index), {}, cfg)
        assert (plan.stats.deduped, plan.stats.queued, plan.stats.spilled) == (60, 15, 45)
        assert plan.limits.max_jobs == 15
    smaller = schedule(limits=p.Limits(max_jobs=5))
    assert plan_run(event_cause(ch), [smaller], StaticSource(index), {}, cfg).stats.queued == 5


def test_spill_chain_covers_the_rest_exactly_once(index: ImpactIndex) -> None:
    ch = changes([lib(k) for k in range(10)], kev=[lib(3)])
    sched = schedule(limits=p.Limits(max_jobs=25))
    seen: list[str] = []
    offset, runs = 0, 0
    while True:
        plan = plan_run(event_cause(ch, offset=offset), [sched], StaticSource(index), {}, CFG)
        seen += [d for s in plan.segments for d in s.digests]
        runs += 1
        offset += plan.stats.queued
        if plan.stats.spilled == 0:
            break
        assert plan.stats.spilled == 60 - offset
    assert runs == 3 and len(seen) == len(set(seen)) == 60


def test_smallest_limit_of_the_schedules_wins(index: ImpactIndex) -> None:
    a = schedule("a", limits=p.Limits(max_jobs=30, rate_per_second=40, parallelism=2))
    b = schedule("b", limits=p.Limits(max_jobs=20))
    plan = plan_run(event_cause(changes([lib(1), lib(2)])), [a, b], StaticSource(index), {}, CFG)
    assert (plan.limits.max_jobs, plan.limits.rate, plan.limits.parallelism) == (20, 40, 2)
    # Every segment records the run's whole rate: runners share one bucket per run.
    assert all(s.rate_per_second == 40 for s in plan.segments)
    payloads = plan.segment_payloads()
    assert {(x.rate_per_second, x.tenant_rate, x.burst_s) for x in payloads} == {
        (40, CFG.tenant_rate, CFG.burst_s)
    }
    assert all(x.registry_host is UNSET and x.registry_rate is UNSET for x in payloads)


def test_only_if_last_report_older_than_days(index: ImpactIndex) -> None:
    at = 100 * DAY_MS
    hit = [digest("t1", n) for n in range(600) if n % 100 == 1]
    reports = {hit[0]: (at - 1 * DAY_MS, 0), hit[1]: (at - 10 * DAY_MS, 0)}
    sched = schedule(only_if=p.OnlyIf(last_report_older_than_days=7))
    cause = Cause(run_id="r", tenant="t1", trigger="feedser", at_ms=at, changes=changes([lib(1)]))
    plan = plan_run(cause, [sched], StaticSource(index), reports, CFG)
    queued = {d for s in plan.segments for d in s.digests}
    assert hit[0] not in queued and hit[1] in queued and len(queued) == len(hit) - 1
    assert plan.stats.deduped == len(hit)


def test_the_schedules_policy_revision_is_on_every_segment(index: ImpactIndex) -> None:
    """``onlyIf.policyRevision`` goes to the scanner with each report call: on every segment
    of the run (its spill continuations too); schedules naming different ones name none."""
    r7 = schedule("a", only_if=p.OnlyIf(policy_revision="policy-7"), limits=p.Limits(max_jobs=5))
    plan = plan_run(
        event_cause(changes([lib(1)])), [r7, schedule("b")], StaticSource(index), {}, CFG
    )
    rest = plan_run(event_cause(changes([lib(1)]), offset=5), [r7], StaticSource(index), {}, CFG)
    segments = plan.segment_payloads() + rest.segment_payloads()
    assert segments and {s.policy_revision for s in segments} == {"policy-7"}
    assert b'"policyRevision":"policy-7"' in msgspec.json.encode(segments[0])
    r8 = schedule("c", only_if=p.OnlyIf(policy_revision="policy-8"))
    both = plan_run(event_cause(changes([lib(1)])), [r7, r8], StaticSource(index), {}, CFG)
    assert {s.policy_revision for s in both.segment_payloads()} == {UNSET}
    assert b"policyRevision" not in msgspec.json.encode(both.segment_payloads()[0])


def test_nightly_resolves_the_whole_selection_kev_history_first(index: ImpactIndex) -> None:
    sched = schedule(
        "n", selection=p.Selection(namespaces=["data"]), limits=p.Limits(max_jobs=1000)
    )
    reports = {digest("t1", 450): (0, KEV), digest("t1", 451): (0, CRITICAL)}
    cause = Cause(run_id="c", tenant="t1", trigger="cron", at_ms=0, schedule_id="n")
    plan = plan_run(cause, [sched], StaticSource(index), reports, CFG)
    assert plan.stats.queued == 200
    assert plan.segments[0].digests == [digest("t1", 450)] and plan.segments[0].priority == 6
    assert plan.segments[1].digests == [digest("t1", 451)] and plan.segments[1].priority == 7
    assert {s.priority for s in plan.segments[2:]} == {8}
    paused = schedule("n", paused=True)
    assert plan_run(cause, [paused], StaticSource(index), {}, CFG).stats.candidates == 0


def test_manual_runs_outrank_event_driven_which_outrank_nightly(index: ImpactIndex) -> None:
    sel = p.Selection(namespaces=["web"])
    manual = Cause(run_id="m", tenant="t1", trigger="manual", at_ms=0, selection=sel)
    plan = plan_run(manual, [], StaticSource(index), {}, CFG)
    assert plan.stats.queued == 400 and {s.priority for s in plan.segments} == {2}
    event = plan_run(event_cause(changes([lib(1)])), [schedule()], StaticSource(index), {}, CFG)
    assert {s.priority for s in event.segments} == {5}


def test_degraded_event_run_resolves_only_kev_and_critical_keys(index: ImpactIndex) -> None:
    ch = changes([lib(k) for k in range(10)], kev=[lib(3)], crit=[lib(4)])
    plan = plan_run(event_cause(ch), [schedule()], StaticSource(index, warm=False), {}, CFG)
    assert plan.degraded and plan.degraded_reason and "KEV" in plan.degraded_reason
    assert plan.stats.queued == 12 and {s.tier for s in plan.segments} == {0, 1}
    rp = plan.run_planned()
    assert rp.degraded and rp.degraded_reason == plan.degraded_reason
    capped = PlannerSettings(degraded_max_jobs=5)
    small = plan_run(event_cause(ch), [schedule()], StaticSource(index, warm=False), {}, capped)
    assert (small.stats.queued, small.stats.spilled) == (5, 7)


def test_degraded_nightly_falls_back_to_the_whole_selection(index: ImpactIndex) -> None:
    unknown = "sha256:" + "ab" * 32
    sel = p.Selection(digests=[digest("t1", 5), unknown])
    sched = schedule("n", selection=sel)
    cause = Cause(run_id="c", tenant="t1", trigger="cron", at_ms=0, schedule_id="n")
    warm = plan_run(cause, [sched], StaticSource(index), {}, CFG)
    cold = plan_run(cause, [sched], StaticSource(index, warm=False), {}, CFG)
    assert not warm.degraded and warm.stats.queued == 1
    assert cold.degraded and cold.stats.queued == 2
    assert {d for s in cold.segments for d in s.digests} == {digest("t1", 5), unknown}


def test_kev_vulns_map_through_the_index_vuln_map(index: ImpactIndex) -> None:
    idx = ImpactIndex()
    add_images(idx, "t1", 200)
    idx.add_vuln_keys("CVE-1", [lib(7)])
    ch = Changes(frozenset({lib(1)}), kev_vulns=frozenset({"CVE-1"}))
    plan = plan_run(event_cause(ch), [schedule()], StaticSource(idx), {}, CFG)
    kev = {d for s in plan.segments if s.tier == 0 for d in s.digests}
    assert kev == {digest("t1", 7), digest("t1", 107)} and plan.stats.queued == 4


def test_bad_keys_are_dropped_not_fatal(index: ImpactIndex) -> None:
    ch = changes([lib(1), "not a purl", "pkg:"])
    plan = plan_run(event_cause(ch), [schedule()], StaticSource(index), {}, CFG)
    assert plan.stats.queued == 6


def test_content_refresh_segments_stay_on_one_registry_host() -> None:
    idx = ImpactIndex()
    add_images(idx, "t1", 30, registry="a.io")
    add_images(idx, "t1", 30, start=30, registry="b.io")
    sched = schedule("n", mode="content-refresh", limits=p.Limits(rate_per_second=100))
    cause = Cause(run_id="c", tenant="t1", trigger="cron", at_ms=0, schedule_id="n")
    cfg = PlannerSettings(registry_rate=7, default_parallelism=2)
    plan = plan_run(cause, [sched], StaticSource(idx), {}, cfg)
    assert plan.mode == "content-refresh" and plan.hosts == {"a.io": 30, "b.io": 30}
    for s in plan.segments:
        assert s.mode == "content-refresh" and s.rate_per_second == 100
        assert len({idx.image("t1", d).registry for d in s.digests}) == 1  # type: ignore[union-attr]
    for x in plan.segment_payloads():  # each segment names its host's bucket
        assert x.registry_rate == 7
        assert x.registry_host == idx.image("t1", x.digests[0]).registry  # type: ignore[union-attr]
