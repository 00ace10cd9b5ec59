"""What one image's scanner answer becomes: its ``verdict.recorded`` event and its Notify
message (``rescan.delta`` when the verdict got worse in a way the run's rule cares about,
``report.ready`` otherwise). Pure: the caller brings the previous findings, the rule and
the HLC stamp; :mod:`streamproc.runner.segment` does the calls and the publishing.

Every id is derived from the cause: the verdict's from (run, image), the Notify message's
from the verdict's, so whatever a crashed runner emitted is emitted again with the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from msgspec import UNSET, UnsetType

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import Timestamp
from streamproc.ids import derive_id
from streamproc.notify import messages as nm
from streamproc.runner.claims import NO_CLAIMS, ClaimView
from streamproc.runner.delta import Delta, FindingKey, matches
from streamproc.runner.scanner_client import Epss, Finding, ScanReport


def verdict_id(run_id: str, digest: str) -> str:
    return derive_id(run_id, digest, "verdict")


def scan_key(run_id: str, digest: str) -> str:
    """The scanner call's ``Idempotency-Key``."""
    return derive_id(run_id, digest, "scan")


@dataclass(frozen=True, slots=True)
class ImageJob:
    """One image of a segment, with what its verdict and message need to say."""

    tenant: str
    run_id: str
    segment_id: str
    digest: str
    cause_id: str
    """The ``segment.enqueued`` event's id: the verdict's causation."""
    schedule_ids: tuple[str, ...]
    rule: p.NotifyRule
    claims: ClaimView = NO_CLAIMS
    """The tenant's VEX claims as of the run's position (one view per segment)."""

    def of(self, digest: str) -> ImageJob:
        """The same segment's job for another image."""
        return ImageJob(self.tenant, self.run_id, self.segment_id, digest, self.cause_id,
                        self.schedule_ids, self.rule, self.claims)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Envelope
    message: nm.AnyMessage | None
    """None for a failed image: no Notify message."""
    findings: list[FindingKey]
    """The image's findings now: the next verdict's "previous"."""
    worse: str | None
    """For a ``rescan.delta``: the worst new finding (``kev``, ``critical``, ``high``,
    ``other``)."""


def _epss(e: Epss | None) -> p.Epss | UnsetType:
    return UNSET if e is None else p.Epss(score=e.score, percentile=e.percentile, date=e.date)


def findings_of(findings: list[Finding]) -> list[p.Finding]:
    return [
        p.Finding(
            purl=f.purl,
            vuln_id=f.vuln_id,
            severity=f.severity,  # type: ignore[arg-type]  # the scanner's severity is a str validated against the event's Literal on encode
            kev=f.kev,
            link=f.link,
            epss=_epss(f.epss),
            fixed_version=f.fixed_version,
        )
        for f in findings
    ]


def kev_names(findings: list[Finding]) -> dict[str, str]:
    """A KEV finding's CVE alias (the KEV catalog names CVEs) by its vulnerability id."""
    return {
        f.vuln_id: next((a for a in f.aliases if a.startswith("CVE-")), f.vuln_id)
        for f in findings
        if f.kev
    }


def decide(
    job: ImageJob,
    report: ScanReport,
    previous: list[FindingKey] | None,
    stamp: Timestamp,
    scanner: str | None = None,
) -> Decision:
    """The verdict and Notify message of an image the scanner reported on (``report`` as
    :func:`streamproc.runner.backend.settled` gives it: the tenant's VEX claims applied, so
    the verdict, the delta and the message see only the findings that stand)."""
    vid = verdict_id(job.run_id, job.digest)
    findings = findings_of(report.findings)
    delta = Delta(previous, findings, kev_names(report.findings))
    ts = nm.iso(stamp.physical)
    msg: nm.AnyMessage
    worse: str | None = None
    if delta.positive and matches(delta, job.rule):
        msg = nm.RescanDelta(
            id=nm.image_message_id(vid), tenant=job.tenant, run_id=job.run_id, ts=ts,
            image_digest=job.digest, verdict_id=vid, schedule_ids=list(job.schedule_ids),
            new_criticals=delta.new_criticals, new_high=delta.new_high,
            kev_hits=delta.kev_hits,
            top_findings=[
                nm.TopFinding(purl=f.purl, vuln_id=f.vuln_id, severity=f.severity,
                              kev=f.kev, link=f.link, epss=nm.epss_of(f.epss or None))
                for f in delta.top
            ],
            report_url=report.report_url,
            attestation=nm.Attestation(uuid=report.attestation.uuid,
                                       verified=report.attestation.verified)
            if report.attestation else None,
        )  # fmt: skip
        worst = "critical" if delta.new_criticals else "high" if delta.new_high else "other"
        worse = "kev" if delta.kev_hits else worst
    else:
        counts = nm.SeverityCounts()
        for f in findings:
            setattr(counts, f.severity, getattr(counts, f.severity) + 1)
        msg = nm.ReportReady(
            id=nm.image_message_id(vid), tenant=job.tenant, run_id=job.run_id, ts=ts,
            image_digest=job.digest, verdict_id=vid, findings=counts,
            new_findings=len(delta.new), report_url=report.report_url,
        )  # fmt: skip
    verdict = p.VerdictRecorded(
        run_id=job.run_id, segment_id=job.segment_id, digest=job.digest, status="ok",
        new_criticals=delta.new_criticals, new_high=delta.new_high,
        kev_hits=delta.kev_hits, top_findings=delta.top, findings=findings,
        report_url=report.report_url,
        policy_verdict=report.verdict if report.verdict in ("PASS", "FAIL") else None,  # type: ignore[arg-type]  # checked against the Literal's values here
        revision=report.advisories_revision, policy_revision=report.policy_revision,
        scanner=scanner, suppressed=report.suppressed or UNSET,
        vex_documents=report.vex_documents or UNSET,
    )  # fmt: skip
    return Decision(
        _event(job, verdict, vid, stamp),
        msg,
        [(f.purl, f.vuln_id, f.severity, f.kev) for f in findings],
        worse,
    )


def decide_failed(
    job: ImageJob, error: str, stamp: Timestamp, scanner: str | None = None
) -> Decision:
    """The verdict of an image the scanner refused (an unknown image, an invalid report, a
    tool that gave no usable answer): never a PASS."""
    verdict = p.VerdictRecorded(
        run_id=job.run_id, segment_id=job.segment_id, digest=job.digest, status="failed",
        error=error[:2000], scanner=scanner,
    )  # fmt: skip
    return Decision(_event(job, verdict, verdict_id(job.run_id, job.digest), stamp), None, [], None)


def _event(job: ImageJob, verdict: p.VerdictRecorded, vid: str, stamp: Timestamp) -> Envelope:
    return new_event(
        "verdict.recorded", job.tenant, verdict, stamp, event_id=vid, causation_id=job.cause_id,
        correlation_id=job.run_id,
    )  # fmt: skip
