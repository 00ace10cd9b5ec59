"""Applying a tenant's VEX claims to a scanner's findings: the one step every backend's
answer passes through before its verdict is built (:func:`streamproc.runner.verdict.decide`),
so a claim silences a finding whichever scanner reported it.

For each finding, the claims on its vulnerability (its id or any alias) whose product
matches its package (:func:`streamproc.vex.claims.matches`), and that hold in this image,
are candidates; the one that took effect last wins (docs/vex.md, "When documents disagree").
``not_affected``, ``false_positive`` and ``fixed`` drop the finding and record why;
``affected`` and ``under_investigation`` keep it. Pure: the claims come from a
:class:`ClaimView` at the run's position.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamproc.events import payloads as p
from streamproc.runner.claims_state import Entry
from streamproc.runner.scanner_client import Finding
from streamproc.vex.claims import matches
from streamproc.vex.model import SUPPRESSING


class ClaimView:
    """A tenant's claims as a run sees them: the values in effect before ``as_of``."""

    def __init__(self, entries: Callable[[str], Sequence[Entry]], as_of: int | None) -> None:
        self._entries = entries
        self._as_of = math.inf if as_of is None else as_of
        self._cache: dict[str, list[Entry]] = {}

    def current(self, vuln: str) -> list[Entry]:
        """Each claim's value at the run's position (dropped claims left out)."""
        hit = self._cache.get(vuln)
        if hit is None:
            latest: dict[tuple[str, str, str], Entry] = {}
            for e in self._entries(vuln):
                if e.seq < self._as_of:
                    held = latest.get(e.ident)
                    if held is None or e.seq > held.seq:
                        latest[e.ident] = e
            hit = self._cache[vuln] = [e for e in latest.values() if e.status]
        return hit

    def effective(self, purl: str, ids: Sequence[str], digest: str) -> Entry | None:
        best: Entry | None = None
        for vuln in dict.fromkeys(ids):
            for e in self.current(vuln):
                if (e.image and e.image != digest) or not matches(e.purl, purl):
                    continue
                if best is None or (e.seq, e.document) > (best.seq, best.document):
                    best = e
        return best


NO_CLAIMS = ClaimView(lambda _v: (), None)


@dataclass(frozen=True, slots=True)
class Applied:
    kept: list[Finding]
    suppressed: list[p.Suppressed]
    documents: list[p.VexApplied]


def apply_claims(findings: Sequence[Finding], digest: str, view: ClaimView) -> Applied:
    """Split a report's findings into those that stand and those a claim drops."""
    kept: list[Finding] = []
    suppressed: list[p.Suppressed] = []
    applied: dict[str, str | None] = {}
    for f in findings:
        claim = view.effective(f.purl, [f.vuln_id, *f.aliases], digest)
        if claim is None:
            kept.append(f)
            continue
        applied.setdefault(claim.document, claim.version)
        if claim.status not in SUPPRESSING:
            kept.append(f)
            continue
        suppressed.append(
            p.Suppressed(
                purl=f.purl,
                vuln_id=f.vuln_id,
                severity=f.severity,  # type: ignore[arg-type]  # validated by the scanner client
                status=claim.status,  # type: ignore[arg-type]  # one of SUPPRESSING
                justification=claim.justification,
                document_id=claim.document,
            )
        )
    documents = [p.VexApplied(document_id=d, version=v) for d, v in sorted(applied.items())]
    return Applied(kept, suppressed, documents)
