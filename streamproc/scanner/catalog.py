"""The reference scanner's image catalog and reports.

Images come from the event log: every image the index knows, by (tenant, digest), folded
into the scanner's own state (:mod:`.images`). Images can also be registered by hand
(``POST /sboms``, ``POST /images``: a digest, an SBOM, optionally a tag and an attestation,
in memory only) to simulate what the log does not carry: a tag that moved, an attestation.
SBOMs are stored by content (``sbomKey`` = sha256 of the sorted purls), so many digests
share one. Findings are computed once per (SBOM, advisory revision) and cached: the match
is deterministic, so a report is a pure function of the image and the advisories.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from streamproc.backends.osvrecord import SEVERITY_RANK
from streamproc.sbom.parse import parse_sbom
from streamproc.scanner.advisories import AdvisoryDb
from streamproc.scanner.images import sbom_key
from streamproc.scanner.indexed import IndexedImages


class EpssOut(msgspec.Struct, kw_only=True):
    score: float
    percentile: float
    date: str | None = None


class ReportFinding(msgspec.Struct, kw_only=True, rename="camel"):
    purl: str
    vuln_id: str
    severity: str
    kev: bool = False
    aliases: list[str] = []
    link: str | None = None
    fixed_version: str | None = None
    epss: EpssOut | None = None


class Attestation(msgspec.Struct, kw_only=True, rename="camel"):
    uuid: str
    verified: bool = False


class Summary(msgspec.Struct, kw_only=True):
    critical: int = 0
    high: int = 0
    medium: int = 0
    low: int = 0


class Report(msgspec.Struct, kw_only=True, rename="camel"):
    """What ``POST /reports`` answers: the image's current findings (no delta of its own)."""

    image_digest: str
    report_id: str
    advisories_revision: str
    policy_revision: str | None = None
    sbom_key: str
    findings: list[ReportFinding] = []
    summary: Summary = msgspec.field(default_factory=Summary)
    report_url: str
    attestation: Attestation | None = None


@dataclass
class Image:
    digest: str
    sbom_key: str
    ref: str | None = None
    attestation: Attestation | None = None


@dataclass
class Catalog:
    db: AdvisoryDb
    base_url: str = "http://127.0.0.1"
    images: dict[str, Image] = field(default_factory=dict)
    sboms: dict[str, list[str]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    """image ref (``registry/repo:tag``) → the digest it currently points at."""
    indexed: IndexedImages | None = None
    """The images folded from the event log (None: registered images only)."""
    _findings: OrderedDict[tuple[str, str], list[ReportFinding]] = field(
        default_factory=OrderedDict
    )

    def add_sbom(self, document: bytes | str) -> tuple[str, int]:
        """Store an SBOM by content; returns (sbomKey, number of purls)."""
        purls = sorted(parse_sbom(document).purls)
        key = sbom_key(purls)
        self.sboms[key] = purls
        return key, len(purls)

    def add_image(
        self,
        digest: str,
        sbom_key: str,
        ref: str | None = None,
        attestation: Attestation | None = None,
    ) -> Image:
        if sbom_key not in self.sboms:
            raise KeyError(f"unknown sbomKey {sbom_key}")
        img = Image(digest, sbom_key, ref, attestation)
        self.images[digest] = img
        if ref:
            self.refs[ref] = digest
        return img

    def sbom_of(self, digest: str, tenant: str | None = None) -> str | None:
        """The SBOM key of an image: as the log has it, else as registered."""
        key = self.indexed.sbom_of(tenant, digest) if self.indexed is not None else None
        if key is None and (img := self.images.get(digest)) is not None:
            key = img.sbom_key
        return key

    def _purls(self, key: str) -> list[str]:
        purls = self.sboms.get(key)
        if purls is None and self.indexed is not None:
            purls = self.indexed.purls(key)
        if purls is None:
            raise KeyError(f"unknown sbomKey {key}")
        return purls

    def findings(self, sbom_key: str) -> list[ReportFinding]:
        ck = (sbom_key, self.db.revision)
        hit = self._findings.get(ck)
        if hit is not None:
            return hit
        out: dict[tuple[str, str], ReportFinding] = {}
        for m in self.db.match(self._purls(sbom_key)):
            adv = m.advisory
            e = self.db.epss_of(adv)
            out[(m.purl, adv.id)] = ReportFinding(
                purl=m.purl,
                vuln_id=adv.id,
                severity=adv.severity,
                kev=adv.kev,
                aliases=list(adv.aliases),
                link=adv.link,
                fixed_version=m.fixed,
                epss=EpssOut(score=e.score, percentile=e.percentile, date=e.date) if e else None,
            )
        result = sorted(
            out.values(), key=lambda f: (not f.kev, -SEVERITY_RANK[f.severity], f.vuln_id, f.purl)
        )
        self._findings[ck] = result
        while len(self._findings) > 4096:
            self._findings.popitem(last=False)
        return result

    def report(
        self, digest: str, policy_revision: str | None = None, tenant: str | None = None
    ) -> Report | None:
        key = self.sbom_of(digest, tenant)
        if key is None:
            return None
        img = self.images.get(digest)
        findings = self.findings(key)
        summary = Summary()
        for f in findings:
            setattr(summary, f.severity, getattr(summary, f.severity) + 1)
        rev = self.db.revision
        rid = hashlib.sha256(f"{digest}|{rev}|{policy_revision or ''}".encode()).hexdigest()[:24]
        return Report(
            image_digest=digest,
            report_id=rid,
            advisories_revision=rev,
            policy_revision=policy_revision,
            sbom_key=key,
            findings=findings,
            summary=summary,
            report_url=f"{self.base_url}/reports/{digest}?revision={rev}",
            attestation=img.attestation if img is not None and img.sbom_key == key else None,
        )
