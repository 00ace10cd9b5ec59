"""Projected deltas, pure: an export's advisories against each image's last verdict, with
the index's real code; and the even sample a large candidate set is judged on."""

from __future__ import annotations

from pyroaring import BitMap

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex
from streamproc.impact.selector import Selector
from streamproc.planner.estimate import (
    Threat,
    even_sample,
    feedser_threats,
    project,
    vexer_threats,
)
from streamproc.planner.records import CRITICAL, KEV
from tests.planner.util import add_images, digest, lib

SEL = Selector(tenant="t1")


def index_of(count: int) -> ImpactIndex:
    idx = ImpactIndex()
    add_images(idx, "t1", count, keys_of=lambda n: [lib(n % 3)])
    return idx


def test_a_vulnerability_is_new_as_the_runner_judges_it() -> None:
    crit = Threat("V", ("k",), p.SEVERITY_RANK["critical"], False)
    kev = Threat("V", ("k",), p.SEVERITY_RANK["low"], True)
    assert crit.new_to(None) and crit.new_to({}) and crit.new_to({"V": (3, False)})
    assert not crit.new_to({"V": (4, False)})
    assert kev.new_to({"V": (4, False)}) and not kev.new_to({"V": (1, True)})
    assert crit.worsens and kev.worsens
    assert not Threat("V", ("k",), p.SEVERITY_RANK["medium"], False).worsens


def test_feedser_advisories_kev_list_and_bare_keys() -> None:
    idx = index_of(30)  # lib0: 10 images, lib1: 10, lib2: 10
    idx.add_vuln_keys("CVE-OLD", [lib(2)])  # an earlier export's advisory
    export = p.FeedserExportBody(
        export_id="e",
        changed_product_keys=[lib(0), lib(1)],
        kev=["CVE-OLD"],
        advisories=[p.AdvisoryChange(vuln_id="GHSA-1", product_keys=[lib(0)], severity="high")],
    )
    change = feedser_threats(export, idx.vuln_keys)
    assert change.keys == [lib(0), lib(1), lib(2)], "KEV ids map to keys as planning maps them"
    seen = {digest("t1", 0): {"GHSA-1": (3, False)}, digest("t1", 2): {"CVE-OLD": (1, True)}}
    proj = project(change, idx, SEL, True, seen.get, epss_high=0.9)
    assert proj.candidates.count == 30
    # lib0: 9 of 10 (image 0 has GHSA-1 already); lib2: 9 of 10 KEV (image 2 has it as KEV).
    assert (proj.deltas, proj.kev, proj.unassessed, proj.judged) == (18, 9, 10, 30)
    # A verdict made after the export arrived has been judged against it already.
    later = {digest("t1", n) for n in range(3, 30, 3)}
    proj = project(change, idx, SEL, True, seen.get, judged_since=later.__contains__, epss_high=0.9)
    assert (proj.deltas, proj.kev, proj.unassessed) == (9, 9, 10)


def test_vexer_claims_take_the_flags_feedser_gave_and_harmless_ones_count_for_nothing() -> None:
    idx = index_of(30)
    export = p.VexerExportBody(
        export_id="v",
        changed_claims=[
            p.ChangedClaim(product_key=lib(0), vuln_id="CVE-K", status="not_affected→affected"),
            p.ChangedClaim(
                product_key=lib(1), vuln_id="CVE-C", status="under_investigation->affected"
            ),
            p.ChangedClaim(product_key=lib(2), vuln_id="CVE-K", status="affected→fixed"),
        ],
    )
    flags = {"CVE-K": KEV, "CVE-C": CRITICAL}
    epss = {"CVE-C": p.Epss(score=0.4, percentile=0.95)}

    def vuln_of(v: str) -> tuple[int, p.Epss | None]:
        return flags.get(v, 0), epss.get(v)

    proj = project(vexer_threats(export, vuln_of), idx, SEL, True, {}.get, epss_high=0.9)
    assert (proj.deltas, proj.kev, proj.high_epss, proj.unassessed) == (20, 10, 10, 0)
    proj = project(
        vexer_threats(export, lambda v: (0, None)), idx, SEL, True, {}.get, epss_high=0.9
    )
    assert (proj.deltas, proj.unassessed) == (0, 20), "no flags: severity unknown"


def test_a_large_candidate_set_is_judged_on_an_even_sample_scaled_up() -> None:
    bm = BitMap(range(0, 1000, 2))
    sample = even_sample(bm, 50)
    assert len(sample) == 50 and sample <= bm and max(sample) > 900
    assert even_sample(bm, 600) is bm
    idx = index_of(300)
    export = p.FeedserExportBody(
        export_id="e",
        advisories=[p.AdvisoryChange(vuln_id="X", product_keys=[lib(0)], severity="critical")],
    )
    change = feedser_threats(export, idx.vuln_keys)
    proj = project(change, idx, SEL, True, {}.get, sample=30, epss_high=0.9)
    assert (proj.candidates.count, proj.judged, proj.deltas) == (100, 30, 100)


def test_high_epss_deltas_are_counted_apart_from_kev_at_the_configured_percentile() -> None:
    idx = index_of(30)
    export = p.FeedserExportBody(
        export_id="e",
        kev=["CVE-K"],
        advisories=[
            p.AdvisoryChange(
                vuln_id="CVE-E",
                product_keys=[lib(0)],
                severity="high",
                epss=p.Epss(score=0.3, percentile=0.9),
            ),
            p.AdvisoryChange(
                vuln_id="CVE-K",
                product_keys=[lib(1)],
                severity="medium",
                epss=p.Epss(score=0.01, percentile=0.3),
            ),
            p.AdvisoryChange(
                vuln_id="CVE-M",
                product_keys=[lib(2)],
                severity="medium",
                epss=p.Epss(score=0.9, percentile=0.99),
            ),
        ],
    )
    change = feedser_threats(export, idx.vuln_keys)
    proj = project(change, idx, SEL, True, {}.get, epss_high=0.9)
    # lib0: high, EPSS at the threshold; lib1: KEV; lib2: medium, not a delta whatever its EPSS.
    assert (proj.deltas, proj.kev, proj.high_epss) == (20, 10, 10)
    assert project(change, idx, SEL, True, {}.get, epss_high=0.95).high_epss == 0
