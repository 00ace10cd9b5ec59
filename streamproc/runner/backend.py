"""What answers the runner for one image: the reference scanner's ``/reports`` (``stella``)
or a tool run on the stored SBOM (``trivy``, ``grype``, ``osv-scanner``), chosen by
``scanner.kind``.

Every kind's answer goes through :func:`settled` — findings through
:func:`streamproc.backends.findings.settle` (KEV from the configured catalog), the tenant's
VEX claims (:mod:`streamproc.runner.claims`), then the policy's PASS/FAIL — so deltas,
``topFindings`` and Notify messages come out the same whichever kind answered. A tool call
that gives no usable answer is retried with the runner's backoff (``runner.call_attempts``,
``runner.call_budget_s``), counted in ``scheduler_runner_errors_total{reason}`` and reported
as a problem of the role
(``streamproc status``) until a call succeeds; when the retries run out the image fails
with the named reason (:class:`ImageFailed`), never a PASS.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from streamproc import metrics
from streamproc.backends.findings import KevCatalog, Policy, settle
from streamproc.backends.model import RawFinding, ToolError
from streamproc.backends.settings import ScannerSettings
from streamproc.backends.tools import Tool
from streamproc.runner.claims import NO_CLAIMS, ClaimView, apply_claims
from streamproc.runner.scanner_client import Finding, ImageFailed, ScannerClient, ScanReport

PROBLEM = "scanner"
"""The key of the role problem a failing tool sets (``streamproc status`` shows it)."""


@dataclass(frozen=True, slots=True)
class Answer:
    report: ScanReport
    elapsed: float
    """Seconds of the successful call."""
    retries: int


class Paces(Protocol):
    """What a call awaits before each attempt (:class:`~streamproc.runner.pacing.SegmentPace`):
    ``report`` before evaluating an image, ``registry`` before a registry call of a content
    refresh."""

    async def report(self) -> None: ...

    async def registry(self) -> None: ...


class Backend(Protocol):
    kind: str

    async def answer(
        self,
        tenant: str,
        digest: str,
        key: str,
        refresh: bool,
        pace: Paces | None = None,
        policy_revision: str | None = None,
    ) -> Answer:
        """``policy_revision``: what the run's schedules ask the backend to decide by (a
        backend without policies of its own ignores it)."""
        ...

    async def close(self) -> None: ...


class StellaBackend:
    """The ``/reports`` contract (the reference scanner, or a service that speaks it)."""

    kind = "stella"

    def __init__(self, client: ScannerClient) -> None:
        self.client = client

    async def answer(
        self,
        tenant: str,
        digest: str,
        key: str,
        refresh: bool,
        pace: Paces | None = None,
        policy_revision: str | None = None,
    ) -> Answer:
        retries = 0
        target = digest
        if refresh:
            registry = pace.registry if pace is not None else None
            target, retries = await self.client.refresh(digest, key, registry=registry)
        report, elapsed, more = await self.client.report(
            target,
            key,
            policy_revision,
            tenant=tenant,
            pace=pace.report if pace is not None else None,
        )
        return Answer(report, elapsed, retries + more)

    async def close(self) -> None:
        await self.client.close()


class ToolBackend:
    """Trivy, Grype or OSV-Scanner on the SBOM the image was indexed with."""

    def __init__(
        self,
        tool: Tool,
        sbom_of: Callable[[str, str], str | None],
        problems: dict[str, str],
        *,
        attempts: int = 8,
        budget_s: float = 60.0,
        backoff_base_s: float = 0.1,
        backoff_cap_s: float = 5.0,
        rng: random.Random | None = None,
    ) -> None:
        self.tool = tool
        self.kind = tool.kind
        self.sbom_of = sbom_of
        """``(tenant, digest)`` → the SBOM store name the image was indexed with (``""``:
        indexed without one kept; None: not indexed)."""
        self.problems = problems
        self.attempts = attempts
        self.budget_s = budget_s
        self.base = backoff_base_s
        self.cap = backoff_cap_s
        self.rng = rng or random.Random()
        self._latency = metrics.SCANNER_CALL_SECONDS.labels(self.kind)

    async def answer(
        self,
        tenant: str,
        digest: str,
        key: str,
        refresh: bool,
        pace: Paces | None = None,
        policy_revision: str | None = None,
    ) -> Answer:
        """The tool's findings, decided by the runner's policy (``policy_revision`` is a
        ``stella`` backend's: a tool has no policies to choose from)."""
        if refresh:
            raise ImageFailed(
                f"content_refresh_unsupported: scanner.kind={self.kind} evaluates the stored "
                "SBOM only (docs/scanner.md)"
            )
        name = self.sbom_of(tenant, digest)
        if name is None:
            raise ImageFailed(
                f"image_not_indexed: image {digest} is not indexed (removed after the run was "
                "planned)"
            )
        if not name:
            raise ImageFailed(
                f"sbom_not_kept: image {digest} was indexed without its SBOM being kept; "
                "index it again"
            )
        deadline = time.monotonic() + self.budget_s
        retries = 0
        while True:
            if pace is not None:  # each run of the tool, a retry too, is one of the run's jobs
                paced = time.monotonic()
                await pace.report()
                deadline += time.monotonic() - paced
            try:
                report, elapsed = await self.tool.scan(name)
            except ToolError as exc:
                metrics.RUNNER_ERRORS.labels(exc.reason).inc()
                self.problems[PROBLEM] = f"{self.kind}: {exc}"[:500]
                delay = self.rng.uniform(0, min(self.cap, self.base * (2**retries)))
                if retries + 1 >= self.attempts or time.monotonic() + delay > deadline:
                    raise ImageFailed(f"{exc} (after {retries + 1} attempts)") from None
                retries += 1
                await asyncio.sleep(delay)
                continue
            self.problems.pop(PROBLEM, None)
            self._latency.observe(elapsed)
            return Answer(
                ScanReport(
                    image_digest=digest,
                    findings=[_finding(f) for f in report.findings],
                    advisories_revision=report.revision,
                ),
                elapsed,
                retries,
            )

    async def close(self) -> None:
        self.tool.runner.close()


def _finding(f: RawFinding) -> Finding:
    return Finding(purl=f.purl, vuln_id=f.vuln_id, severity=f.severity, kev=f.kev, link=f.link,
                   aliases=list(f.aliases), fixed_version=f.fixed_version)  # fmt: skip


def _raw(f: Finding) -> RawFinding:
    return RawFinding(
        f.purl, f.vuln_id, f.severity, f.fixed_version, tuple(f.aliases), f.link, f.kev
    )


def settled(
    report: ScanReport, kev: KevCatalog, policy: Policy, claims: ClaimView = NO_CLAIMS
) -> ScanReport:
    """The report as the verdict records it, whichever kind answered: findings settled (one
    per purl and vulnerability, KEV from the catalog, EPSS kept), the tenant's VEX ``claims``
    applied (the findings they drop move to ``suppressed``), then the policy's PASS/FAIL on
    what stands — unless the backend decided — and the policy revision that decided."""
    kev = kev.current()
    epss = {(f.purl, f.vuln_id): f.epss for f in report.findings if f.epss is not None}
    findings = []
    for raw in settle(map(_raw, report.findings), kev):
        f = _finding(raw)
        f.epss = epss.get((f.purl, f.vuln_id))
        findings.append(f)
    vex = apply_claims(findings, report.image_digest, claims)
    verdict = report.verdict if report.verdict in ("PASS", "FAIL") else None
    return ScanReport(
        image_digest=report.image_digest,
        findings=vex.kept,
        report_url=report.report_url,
        attestation=report.attestation,
        advisories_revision=report.advisories_revision,
        policy_revision=report.policy_revision if verdict else policy.revision(kev),
        verdict=verdict or policy.decide((f.severity, f.kev) for f in vex.kept),
        suppressed=vex.suppressed,
        vex_documents=vex.documents,
    )


def settings_policy(s: ScannerSettings) -> tuple[KevCatalog, Policy]:
    return KevCatalog(s.kev_catalog), Policy(s.fail_on)
