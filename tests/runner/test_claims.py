"""VEX claims in the runner: the fold (positions, history, pruning) and their application
to a scanner's findings, pure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamproc.backends.findings import KevCatalog, Policy
from streamproc.backends.model import ToolReport
from streamproc.backends.parsers import parse_grype, parse_osv, parse_trivy
from streamproc.backends.purlmatch import SbomPurls
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.hlc import Timestamp
from streamproc.notify import messages as nm
from streamproc.runner.backend import _finding as tool_finding
from streamproc.runner.backend import settled
from streamproc.runner.claims import ClaimView, apply_claims
from streamproc.runner.claims_state import ClaimsReader, Entry, VexClaims, prune
from streamproc.runner.scanner_client import Epss, Finding, ScanReport
from streamproc.runner.verdict import ImageJob, decide
from streamproc.state.keys import Checkpoint
from tests.helpers import memory_fold

T = "t1"
JINJA = "pkg:pypi/jinja2@2.10"
IMAGE = "sha256:" + "ab" * 32


def export(eid: str, *claims: p.ChangedClaim, source: str = "vex-documents") -> Envelope:
    x = p.VexerExport(export_id=eid, changed_claims=list(claims), source=source)
    return new_event("export.vexer", T, x, "1790000000000:0:n1", event_id=eid)


def claim(status: str, doc: str = "d1", **kw: object) -> p.ChangedClaim:
    return p.ChangedClaim(
        product_key=JINJA, vuln_id="CVE-2019-10906", status=status, document_id=doc, **kw
    )  # type: ignore[arg-type]


def requested(run_id: str) -> Envelope:
    r = p.RunRequested(run_id=run_id, trigger="manual")
    return new_event("run.requested", T, r, "1790000000000:0:n1", event_id=run_id)


def completed(run_id: str) -> Envelope:
    return new_event("run.completed", T, p.RunCompleted(run_id=run_id), "1790000000000:0:n1")


def fold(*events: Envelope) -> ClaimsReader:
    msgs = [(i + 1, f"s.events.{T}.x.{i}", encode(e)) for i, e in enumerate(events)]
    return ClaimsReader(memory_fold([VexClaims()], msgs, Checkpoint("S", "e", len(msgs))))


def finding(vuln: str = "GHSA-462w-v97r-4m45", purl: str = JINJA) -> Finding:
    return Finding(purl=purl, vuln_id=vuln, severity="high", aliases=["CVE-2019-10906"])


def view(reader: ClaimsReader, run_id: str) -> ClaimView:
    return ClaimView(lambda v: reader.entries(T, v), reader.as_of(T, run_id))


def test_a_run_applies_the_claims_recorded_before_its_request() -> None:
    reader = fold(
        export("x1", claim("affected→not_affected", justification="vulnerable_code_not_present")),
        requested("r1"),
        export("x2", claim("not_affected→affected")),
        requested("r2"),
    )
    r1 = apply_claims([finding()], IMAGE, view(reader, "r1"))
    assert r1.kept == []
    assert r1.suppressed == [
        p.Suppressed(
            purl=JINJA,
            vuln_id="GHSA-462w-v97r-4m45",
            severity="high",
            status="not_affected",
            justification="vulnerable_code_not_present",
            document_id="d1",
        )
    ]
    assert [d.document_id for d in r1.documents] == ["d1"]
    # r2 was requested after the claim turned back: the finding stands again
    r2 = apply_claims([finding()], IMAGE, view(reader, "r2"))
    assert r2.kept == [finding()] and r2.suppressed == []
    assert [d.document_id for d in r2.documents] == ["d1"]  # an affected claim applied


def test_the_latest_claim_wins_across_documents_and_a_drop_uncovers_the_older() -> None:
    reader = fold(
        export("x1", claim("affected→affected", doc="vendor")),
        export("x2", claim("affected→not_affected", doc="team")),
        requested("r1"),
        export("x3", claim("not_affected→affected", doc="team", removed=True)),
        export("x4", claim("affected→false_positive", doc="vendor")),
        requested("r2"),
    )
    assert apply_claims([finding()], IMAGE, view(reader, "r1")).kept == []
    out = apply_claims([finding()], IMAGE, view(reader, "r2"))
    assert out.kept == [] and out.suppressed[0].status == "false_positive"
    assert out.suppressed[0].document_id == "vendor"


def test_an_image_scoped_claim_holds_in_that_image_only() -> None:
    reader = fold(export("x1", claim("affected→not_affected", image_digest=IMAGE)), requested("r"))
    v = view(reader, "r")
    assert apply_claims([finding()], IMAGE, v).kept == []
    other = "sha256:" + "cd" * 32
    assert apply_claims([finding()], other, v).kept == [finding()]


def test_a_claim_matches_by_package_version_and_vulnerability() -> None:
    reader = fold(export("x1", claim("affected→not_affected")), requested("r"))
    v = view(reader, "r")
    other_version = finding(purl="pkg:pypi/jinja2@2.11")
    other_vuln = Finding(purl=JINJA, vuln_id="GHSA-other", severity="low")
    out = apply_claims([other_version, other_vuln, finding()], IMAGE, v)
    assert out.kept == [other_version, other_vuln] and len(out.suppressed) == 1


def test_history_is_kept_for_open_runs_only() -> None:
    reader = fold(
        export("x1", claim("affected→not_affected")),
        requested("r1"),
        export("x2", claim("not_affected→under_investigation")),
        export("x3", claim("under_investigation→not_affected")),
    )
    assert [e.seq for e in reader.entries(T, "CVE-2019-10906")] == [1, 3, 4]
    reader = fold(
        export("x1", claim("affected→not_affected")),
        requested("r1"),
        completed("r1"),
        export("x2", claim("not_affected→under_investigation")),
    )
    assert [e.seq for e in reader.entries(T, "CVE-2019-10906")] == [4]


def test_prune() -> None:
    def e(seq: int, status: str = "not_affected", doc: str = "d") -> Entry:
        return Entry(doc, JINJA, "", seq, status)

    assert prune([e(1), e(5), e(9)], None) == [e(9)]
    assert prune([e(1), e(5), e(9)], 6) == [e(5), e(9)]
    assert prune([e(1), e(5, "")], None) == []  # dropped, and no run needs the older value
    assert prune([e(1), e(5, ""), e(9)], 7) == [e(9)]
    assert prune([e(1, doc="a"), e(2, doc="b")], None) == [e(1, doc="a"), e(2, doc="b")]


def test_the_verdict_sees_only_what_stands_and_a_claim_turning_back_is_a_delta() -> None:
    stamp = Timestamp(1_790_000_000_000, 0, "n1")
    reader = fold(
        export("x1", claim("affected→not_affected", justification="component_not_present")),
        requested("r1"),
        export("x2", claim("not_affected→affected")),
        requested("r2"),
    )
    answer = ScanReport(image_digest=IMAGE, findings=[finding()])
    rule = p.NotifyRule(min_severity="high")
    job = ImageJob(T, "r1", "s", IMAGE, "c", (), rule, view(reader, "r1"))
    report = settled(answer, KevCatalog(None), Policy("high"), job.claims)
    assert report.verdict == "PASS"  # the policy decides on what stands
    silenced = decide(job, report, [(JINJA, "GHSA-462w-v97r-4m45", "high", False)], stamp)
    v = silenced.verdict.payload
    assert v.findings == [] and [s.vuln_id for s in v.suppressed] == ["GHSA-462w-v97r-4m45"]
    assert [d.document_id for d in v.vex_documents] == ["d1"]
    assert isinstance(silenced.message, nm.ReportReady) and silenced.findings == []
    job2 = ImageJob(T, "r2", "s", IMAGE, "c", (), rule, view(reader, "r2"))
    report2 = settled(answer, KevCatalog(None), Policy("high"), job2.claims)
    assert report2.verdict == "FAIL"
    back = decide(job2, report2, silenced.findings, stamp)
    assert isinstance(back.message, nm.RescanDelta) and back.verdict.payload.new_high == 1


SCANNERS = Path(__file__).parent.parent / "data" / "scanners"
KINDS = [
    # kind, the tool's own output (tests/data/scanners), the claim's purl and vulnerability,
    # the findings it drops (an alias matches: Grype's GHSA names CVE-2023-28755)
    ("trivy", parse_trivy, "pip.json.golden", "pkg:pypi/werkzeug@0.11", "CVE-2019-14806", 1),
    ("grype", parse_grype, "chainguard-ruby-test.json", "pkg:gem/uri@0.10.1", "CVE-2023-28755", 2),
    ("osv-scanner", parse_osv, "test-vuln-results-a.json", "pkg:cargo/regex", "CVE-2022-24713", 1),
]


@pytest.mark.parametrize(("kind", "parse", "output", "purl", "vuln", "dropped"), KINDS)
def test_claims_apply_to_every_tool_kinds_findings(
    kind: str, parse: Callable[..., ToolReport], output: str, purl: str, vuln: str, dropped: int
) -> None:
    tool = parse((SCANNERS / kind / output).read_bytes(), SbomPurls([]))
    answer = ScanReport(image_digest=IMAGE, findings=[tool_finding(f) for f in tool.findings])
    entry = Entry("team", purl, "", 1, "not_affected", "vulnerable_code_not_present", "3")
    claims = ClaimView(lambda v: [entry] if v == vuln else [], 10)
    before = settled(answer, KevCatalog(None), Policy("critical"))
    after = settled(answer, KevCatalog(None), Policy("critical"), claims)
    assert len(after.suppressed) == dropped == len(before.findings) - len(after.findings)
    assert all(s.document_id == "team" and s.status == "not_affected" for s in after.suppressed)
    assert [(d.document_id, d.version) for d in after.vex_documents] == [("team", "3")]
    kept = {(f.purl, f.vuln_id) for f in after.findings}
    assert all((s.purl, s.vuln_id) not in kept for s in after.suppressed)


def test_claims_apply_to_the_reference_scanners_findings_and_keep_their_epss() -> None:
    epss = Epss(score=0.08, percentile=0.92, date="2025-06-01")
    yaml = Finding(purl="pkg:pypi/pyyaml@5.3.1", vuln_id="GHSA-8q59-q68h-6hv4",
                   severity="critical", aliases=["CVE-2020-14343"], epss=epss)  # fmt: skip
    answer = ScanReport(image_digest=IMAGE, findings=[yaml, finding()])
    report = settled(answer, KevCatalog(None), Policy("high"))
    assert [f.epss for f in report.findings] == [epss, None]
    entry = Entry("d", "pkg:pypi/pyyaml", "", 1, "false_positive")
    report = settled(answer, KevCatalog(None), Policy("critical"), ClaimView(
        lambda v: [entry] if v == "CVE-2020-14343" else [], 5))  # fmt: skip
    assert [f.vuln_id for f in report.findings] == ["GHSA-462w-v97r-4m45"]
    assert report.verdict == "PASS" and report.suppressed[0].status == "false_positive"
