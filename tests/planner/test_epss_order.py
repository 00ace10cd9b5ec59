"""An oversubscribed event-driven run plans KEV images first, then by the highest EPSS of
their changed findings, then by severity (critical) — from Feedser advisories and VEX
claims alike."""

from __future__ import annotations

import pytest

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex
from streamproc.planner.changes import Changes, feedser_change, vexer_change
from streamproc.planner.model import Cause, StaticSource
from streamproc.planner.plan import plan_run
from streamproc.planner.records import KEV, ExportRecord
from streamproc.planner.select import select_images, targets_for
from streamproc.planner.settings import PlannerSettings
from tests.planner.util import add_images, digest, lib, schedule

CFG = PlannerSettings(segment_size=50, default_parallelism=2, debounce_s=0)


def imgs(k: int) -> list[str]:
    """The images holding lib(k) (image n holds lib(n % 100))."""
    return sorted(digest("t1", n) for n in range(600) if n % 100 == k)


@pytest.fixture(scope="module")
def index() -> ImpactIndex:
    idx = ImpactIndex()
    add_images(idx, "t1", 600)
    return idx


def advisory(k: int, **kw: object) -> p.AdvisoryChange:
    return p.AdvisoryChange(vuln_id=f"CVE-2024-{k:04d}", product_keys=[lib(k)], **kw)  # type: ignore[arg-type]


def record(change: object) -> ExportRecord:
    c = change
    return ExportRecord(
        export_id="feedser:x",
        source="feedser",
        tenant="t1",
        ms=0,
        hlc="0:0:n",
        event_id="e",
        keys=c.keys,  # type: ignore[attr-defined]
        kev_keys=c.kev_keys,  # type: ignore[attr-defined]
        critical_keys=c.critical_keys,  # type: ignore[attr-defined]
        kev_vulns=c.kev_vulns,  # type: ignore[attr-defined]
        epss=c.epss,  # type: ignore[attr-defined]
    )


def cause(ch: Changes, trigger: str = "feedser") -> Cause:
    return Cause(run_id="r", tenant="t1", trigger=trigger, at_ms=0, changes=ch)  # type: ignore[arg-type]


def test_oversubscribed_run_plans_kev_then_epss_then_critical(index: ImpactIndex) -> None:
    export = p.FeedserExport(
        export_id="x",
        advisories=[
            advisory(1, severity="medium", epss=p.Epss(score=0.05, percentile=0.50)),
            advisory(2, severity="low"),
            advisory(3, severity="medium", kev=True),
            advisory(4, severity="critical"),
            advisory(5, severity="medium", epss=p.Epss(score=0.91, percentile=0.99)),
            advisory(7, severity="medium", epss=p.Epss(score=0.42, percentile=0.97)),
        ],
    )
    change, _ = feedser_change(export)
    ch = Changes.of([record(change)])
    targets = targets_for(cause(ch), [schedule()])
    selected = select_images(cause(ch), targets, StaticSource(index), {}, True, 0.96)
    order = selected.ordered
    assert order[:6] == sorted(imgs(3), key=order.index) and set(order[:6]) == set(imgs(3))
    assert set(order[6:12]) == set(imgs(5))  # EPSS 0.91
    assert set(order[12:18]) == set(imgs(7))  # EPSS 0.42
    assert set(order[18:24]) == set(imgs(1))  # EPSS 0.05: any EPSS before severity
    assert set(order[24:30]) == set(imgs(4))  # critical, no EPSS
    assert set(order[30:]) == set(imgs(2))
    tiers = dict(zip(order, selected.tiers, strict=True))
    assert {tiers[d] for d in imgs(5) + imgs(7) + imgs(4)} == {1}  # percentile >= 0.96
    assert {tiers[d] for d in imgs(1)} == {2}

    plan = plan_run(
        cause(ch), [schedule(limits=p.Limits(max_jobs=20))], StaticSource(index), {}, CFG
    )
    assert (plan.stats.queued, plan.stats.spilled) == (20, 16)
    queued = {d for s in plan.segments for d in s.digests}
    assert set(imgs(3) + imgs(5) + imgs(7)) <= queued
    assert len(queued & set(imgs(1))) == 2 and not queued & set(imgs(4) + imgs(2))


def test_vex_claims_are_ranked_by_their_vulnerabilities_epss(index: ImpactIndex) -> None:
    known = {
        "CVE-A": (0, p.Epss(score=0.2, percentile=0.9)),
        "CVE-B": (KEV, None),
        "CVE-C": (0, p.Epss(score=0.7, percentile=0.98)),
    }
    x = p.VexerExport(
        export_id="v",
        changed_claims=[
            p.ChangedClaim(product_key=f"{lib(k)}@1.0?arch=amd64", vuln_id=v, status=s)
            for k, v, s in (
                (11, "CVE-A", "not_affected→affected"),
                (12, "CVE-B", "affected→not_affected"),
                (13, "CVE-C", "not_affected→affected"),
                (14, "CVE-D", "not_affected→affected"),
            )
        ],
    )
    change = vexer_change(x, lambda v: known.get(v, (0, None)))
    assert change.keys == [lib(11), lib(12), lib(13), lib(14)]  # version-less product keys
    ch = Changes.of([record(change)])
    plan = plan_run(
        cause(ch, "vexer"), [schedule(limits=p.Limits(max_jobs=18))], StaticSource(index), {}, CFG
    )
    queued = {d for s in plan.segments for d in s.digests}
    assert queued == set(imgs(12) + imgs(13) + imgs(11))
