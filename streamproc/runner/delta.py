"""Deltas: what got worse since the image's previous verdict, and whether Notify cares.

Pure functions, shared by the runner (to fill ``verdict.recorded`` and the Notify message)
and the runner projection (to build the run summary), so both agree on what "new" means:
a finding is new when its (purl, vulnerability) pair was not in the previous verdict, when
its severity rose, or when it became KEV. An image evaluated for the first time has an empty
previous verdict, so all of its findings are new.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from streamproc.events.payloads import SEVERITY_RANK, Finding, NotifyRule

FindingKey = tuple[str, str, str, bool]
"""(purl, vulnId, severity, kev)"""

RANK = SEVERITY_RANK
TOP = 10
"""Findings carried in ``topFindings`` (KEV first, then by severity)."""


def new_findings(previous: Iterable[FindingKey], current: Iterable[FindingKey]) -> list[FindingKey]:
    before = {(f[0], f[1]): f for f in previous}
    out = []
    for f in current:
        old = before.get((f[0], f[1]))
        if old is None or RANK[f[2]] > RANK[old[2]] or (f[3] and not old[3]):
            out.append(f)
    return out


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (not f.kev, -RANK[f.severity], f.vuln_id, f.purl))


class Delta:
    """The delta of one verdict against the previous one."""

    __slots__ = ("kev_hits", "new", "new_criticals", "new_high", "top")

    def __init__(
        self,
        previous: Sequence[FindingKey] | None,
        current: Sequence[Finding],
        kev_ids: dict[str, str] | None = None,
    ) -> None:
        """``kev_ids`` names a finding's KEV entry (its CVE alias) when its id is not a CVE."""
        keys = [(f.purl, f.vuln_id, f.severity, f.kev) for f in current]
        fresh = {(k[0], k[1]) for k in new_findings(previous or (), keys)}
        self.new = ranked(f for f in current if (f.purl, f.vuln_id) in fresh)
        self.new_criticals = sum(1 for f in self.new if f.severity == "critical")
        self.new_high = sum(1 for f in self.new if f.severity == "high")
        ids = kev_ids or {}
        self.kev_hits = sorted({ids.get(f.vuln_id, f.vuln_id) for f in self.new if f.kev})
        self.top = self.new[:TOP]

    @property
    def positive(self) -> bool:
        return bool(self.new)


def combine_rules(rules: Sequence[NotifyRule]) -> NotifyRule:
    """A run for several schedules notifies when any of their rules would."""
    if not rules:
        return NotifyRule()
    return NotifyRule(
        on_new_findings=any(r.on_new_findings for r in rules),
        min_severity=min((r.min_severity for r in rules), key=RANK.__getitem__),
        include_kev=any(r.include_kev for r in rules),
    )


def matches(delta: Delta, rule: NotifyRule) -> bool:
    """``rescan.delta`` is sent when a new finding reaches ``minSeverity`` (with
    ``onNewFindings``) or, with ``includeKEV``, when a new finding is KEV-listed."""
    if rule.include_kev and delta.kev_hits:
        return True
    if not rule.on_new_findings:
        return False
    floor = RANK[rule.min_severity]
    return any(RANK[f.severity] >= floor for f in delta.new)
