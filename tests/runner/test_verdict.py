"""The pure decision of one image: scanner report → delta → verdict and Notify message."""

from __future__ import annotations

import dataclasses

from streamproc.events import payloads as p
from streamproc.hlc import Timestamp
from streamproc.notify import messages as nm
from streamproc.runner.scanner_client import Attestation, Finding, ScanReport
from streamproc.runner.segment import lanes
from streamproc.runner.verdict import (
    ImageJob,
    decide,
    decide_failed,
    scan_key,
    verdict_id,
)

STAMP = Timestamp(1_790_000_000_000, 3, "n1")
DIGEST = "sha256:" + "a" * 64
JOB = ImageJob("acme", "run-1", "seg-1", DIGEST, "cause-1", ("nightly",), p.NotifyRule())
REQUESTS = Finding(purl="pkg:pypi/requests@2.28.0", vuln_id="GHSA-j8r2-6x86-q33q",
                   severity="medium")  # fmt: skip
LIBC = Finding(purl="pkg:deb/debian/libc-bin@2.36-9", vuln_id="DSA-5514-1", severity="high",
               kev=True, aliases=["CVE-2023-4911"], link="https://example.test/dsa")  # fmt: skip


def report(*findings: Finding) -> ScanReport:
    return ScanReport(
        image_digest=DIGEST,
        findings=list(findings),
        report_url="http://scanner/reports/1",
        attestation=Attestation(uuid="att-1", verified=True),
    )


def test_a_worse_verdict_is_a_rescan_delta_with_deterministic_ids() -> None:
    previous = [(REQUESTS.purl, REQUESTS.vuln_id, "medium", False)]
    d = decide(JOB, report(REQUESTS, LIBC), previous, STAMP)
    msg = d.message
    assert isinstance(msg, nm.RescanDelta)
    vid = verdict_id("run-1", DIGEST)
    assert d.verdict.id == vid and msg.id == nm.image_message_id(vid) and msg.verdict_id == vid
    assert (d.verdict.kind, d.verdict.tenant, d.verdict.hlc) == (
        "verdict.recorded", "acme", "1790000000000:3:n1"
    )  # fmt: skip
    assert d.verdict.causation_id == "cause-1" and d.verdict.correlation_id == "run-1"
    v = d.verdict.payload
    assert (v.status, v.segment_id, v.new_high, v.new_criticals) == ("ok", "seg-1", 1, 0)
    assert v.kev_hits == ["CVE-2023-4911"], "a KEV finding is named by its CVE alias"
    assert [f.vuln_id for f in v.top_findings] == ["DSA-5514-1"], "only what is new"
    assert len(v.findings) == 2
    assert (msg.new_high, msg.kev_hits, msg.schedule_ids) == (1, ["CVE-2023-4911"], ["nightly"])
    assert msg.attestation == nm.Attestation(uuid="att-1", verified=True)
    assert msg.ts == nm.iso(STAMP.physical) and msg.report_url == "http://scanner/reports/1"
    assert d.worse == "kev"
    assert sorted(d.findings) == sorted(
        [
            (REQUESTS.purl, REQUESTS.vuln_id, "medium", False),
            (LIBC.purl, LIBC.vuln_id, "high", True),
        ]
    )
    assert decide(JOB, report(REQUESTS, LIBC), previous, STAMP) == d, "pure: same in, same out"


def test_nothing_new_or_below_the_rule_is_report_ready() -> None:
    same = [(LIBC.purl, LIBC.vuln_id, "high", True)]
    d = decide(JOB, report(LIBC), same, STAMP)
    assert isinstance(d.message, nm.ReportReady) and d.worse is None
    assert d.message.findings == nm.SeverityCounts(high=1) and d.message.new_findings == 0
    assert d.verdict.payload.new_high == 0 and d.verdict.payload.kev_hits == []

    rule = p.NotifyRule(min_severity="critical", include_kev=False)
    strict = dataclasses.replace(JOB, rule=rule)
    below = decide(strict, report(LIBC), None, STAMP)
    assert isinstance(below.message, nm.ReportReady) and below.message.new_findings == 1
    assert below.verdict.payload.new_high == 1, "the verdict records the delta all the same"


def test_a_first_verdict_finds_everything_new() -> None:
    high = Finding(purl=LIBC.purl, vuln_id=LIBC.vuln_id, severity="high")
    d = decide(JOB, report(REQUESTS, high), None, STAMP)
    assert isinstance(d.message, nm.RescanDelta) and d.worse == "high"
    assert len(d.verdict.payload.top_findings) == 2
    only_medium = decide(JOB, report(REQUESTS), None, STAMP)
    assert isinstance(only_medium.message, nm.ReportReady), "below the default minSeverity"


def test_a_refused_image_is_a_failed_verdict_without_a_message() -> None:
    d = decide_failed(JOB, "http_404: " + "x" * 3000, STAMP)
    assert d.message is None and d.findings == [] and d.worse is None
    v = d.verdict.payload
    assert (v.status, v.digest, len(v.error or "")) == ("failed", DIGEST, 2000)
    assert d.verdict.id == verdict_id("run-1", DIGEST) != scan_key("run-1", DIGEST)


def test_a_schedules_parallelism_caps_the_in_flight_limit_never_raises_it() -> None:
    assert lanes(8, None) == 8
    assert lanes(8, 2) == 2
    assert lanes(4, 16) == 4, "a generous schedule does not exceed the runner's limit"
