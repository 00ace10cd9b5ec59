"""From export payloads to change keys, and from pending exports to coalesced groups.

Pure functions: the projection uses the first half inside its fold, the reactor and the
tests the second. Coalescing is decided by the exports' own HLC times and ids — never by
when the planner happened to look — so the same pending exports always form the same runs
with the same ids. A revision of an export whose earlier revision a run already claimed
plans only what that run did not cover (:func:`uncovered`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET, UnsetType

from streamproc.events import payloads as p
from streamproc.ids import export_run_id
from streamproc.planner.records import CRITICAL, KEV, EpssKeys, ExportRecord, Source
from streamproc.sbom.purls import PurlError, normalize_purl


@dataclass(frozen=True)
class KeyChange:
    """The change of one export as keys: all of them, which are KEV or critical, and the
    EPSS of the changed findings by key."""

    keys: list[str]
    kev_keys: list[str] = field(default_factory=list)
    critical_keys: list[str] = field(default_factory=list)
    kev_vulns: list[str] = field(default_factory=list)
    epss: list[EpssKeys] = field(default_factory=list)


def epss_groups(pairs: Iterable[tuple[p.Epss, Iterable[str]]]) -> list[EpssKeys]:
    """Keys grouped by EPSS (score to three decimals; the highest percentile of a group),
    highest first."""
    by: dict[float, tuple[float, set[str]]] = {}
    for e, keys in pairs:
        score = round(e.score, 3)
        pct, held = by.get(score, (0.0, set()))
        held.update(keys)
        by[score] = (max(pct, e.percentile), held)
    return [EpssKeys(s, pct, sorted(ks)) for s, (pct, ks) in sorted(by.items(), reverse=True) if ks]


def feedser_change(x: p.FeedserExport) -> tuple[KeyChange, dict[str, int]]:
    """Keys named by a Feedser export, plus the KEV/critical flags of the vulns it names."""
    kev_ids = set(x.kev)
    flags: dict[str, int] = dict.fromkeys(kev_ids, KEV)
    keys = set(x.changed_product_keys)
    kev_keys: set[str] = set()
    critical: set[str] = set()
    for a in x.advisories:
        keys.update(a.product_keys)
        f = (KEV if a.kev or a.vuln_id in kev_ids else 0) | (
            CRITICAL if a.severity == "critical" else 0
        )
        if f:
            flags[a.vuln_id] = flags.get(a.vuln_id, 0) | f
        if f & KEV:
            kev_keys.update(a.product_keys)
        if f & CRITICAL:
            critical.update(a.product_keys)
    kev_vulns = kev_ids | {a.vuln_id for a in x.advisories if a.kev}
    epss = epss_groups((a.epss, a.product_keys) for a in x.advisories if isinstance(a.epss, p.Epss))
    change = KeyChange(sorted(keys), sorted(kev_keys), sorted(critical), sorted(kev_vulns), epss)
    return change, flags


def vexer_change(
    x: p.VexerExport, vuln_of: Callable[[str], tuple[int, p.Epss | None]]
) -> KeyChange:
    """The product keys (version-less) of the changed claims: a claim names a package, maybe
    at a version, and the images holding any version of it are re-evaluated (the claim's
    own matching decides which findings it speaks of). A claim on a KEV or critical vuln
    tags its key; the vuln's EPSS, when known, ranks it."""
    keys: set[str] = set()
    kev_keys: set[str] = set()
    critical: set[str] = set()
    ranked: list[tuple[p.Epss, list[str]]] = []
    for c in x.changed_claims:
        try:
            key = normalize_purl(c.product_key).product_key
        except PurlError:
            continue  # names no package: no image holds it
        keys.add(key)
        f, epss = vuln_of(c.vuln_id)
        if f & KEV:
            kev_keys.add(key)
        if f & CRITICAL:
            critical.add(key)
        if epss is not None:
            ranked.append((epss, [key]))
    return KeyChange(sorted(keys), sorted(kev_keys), sorted(critical), epss=epss_groups(ranked))


@dataclass(frozen=True)
class Changes:
    """The union of several exports' changes: what an event-driven run resolves."""

    keys: frozenset[str] = frozenset()
    kev_keys: frozenset[str] = frozenset()
    critical_keys: frozenset[str] = frozenset()
    kev_vulns: frozenset[str] = frozenset()
    epss: tuple[EpssKeys, ...] = ()
    """Keys by the EPSS of their changed findings, highest first."""

    @classmethod
    def of(cls, exports: Iterable[ExportRecord]) -> Changes:
        keys: set[str] = set()
        kev: set[str] = set()
        crit: set[str] = set()
        vulns: set[str] = set()
        ranked: list[tuple[p.Epss, list[str]]] = []
        for e in exports:
            keys.update(e.keys)
            kev.update(e.kev_keys)
            crit.update(e.critical_keys)
            vulns.update(e.kev_vulns)
            ranked.extend(
                (p.Epss(score=g.score, percentile=g.percentile), g.keys) for g in e.epss or ()
            )
        return cls(
            frozenset(keys),
            frozenset(kev),
            frozenset(crit),
            frozenset(vulns),
            tuple(epss_groups(ranked)),
        )


def _hash(kind: bytes, value: str) -> bytes:
    return hashlib.sha256(kind + value.encode()).digest()[:8]


def coverage(rec: ExportRecord) -> set[bytes]:
    """What a revision names, as 8-byte hashes: its keys and its KEV vuln ids."""
    return {_hash(b"k", k) for k in rec.keys} | {_hash(b"v", v) for v in rec.kev_vulns}


def add_coverage(covered: bytes, rec: ExportRecord) -> bytes:
    """``covered`` (sorted 8-byte hashes) with what ``rec`` names added."""
    return b"".join(sorted(_hashes(covered) | coverage(rec)))


def _hashes(covered: bytes) -> set[bytes]:
    return {covered[i : i + 8] for i in range(0, len(covered), 8)}


def uncovered(rec: ExportRecord, covered: bytes) -> ExportRecord:
    """The part of a revision that no claimed revision of its export named: the keys and
    KEV vuln ids the follow-up run plans (with their KEV and critical tags)."""
    if not covered:
        return rec
    seen = _hashes(covered)
    keys = [k for k in rec.keys if _hash(b"k", k) not in seen]
    left = set(keys)
    return msgspec.structs.replace(
        rec,
        keys=keys,
        kev_keys=[k for k in rec.kev_keys if k in left],
        critical_keys=[k for k in rec.critical_keys if k in left],
        kev_vulns=[v for v in rec.kev_vulns if _hash(b"v", v) not in seen],
        epss=_epss_within(rec.epss, left),
    )


def _epss_within(groups: list[EpssKeys] | UnsetType, keys: set[str]) -> list[EpssKeys] | UnsetType:
    """The EPSS groups of ``keys`` only (left out when none is left)."""
    if isinstance(groups, UnsetType):
        return groups
    kept = [EpssKeys(g.score, g.percentile, [k for k in g.keys if k in keys]) for g in groups]
    return [g for g in kept if g.keys] or UNSET


@dataclass(frozen=True)
class ExportGroup:
    """Exports of one tenant and source coalesced into one run."""

    tenant: str
    source: Source
    exports: tuple[ExportRecord, ...]
    start_ms: int
    due_ms: int

    @property
    def export_ids(self) -> list[str]:
        return sorted(e.export_id for e in self.exports)

    @property
    def revisions(self) -> dict[str, int]:
        """The revision planned of each export, where it is not the first."""
        return {e.export_id: e.revision for e in self.exports if e.revision > 1}

    @property
    def run_id(self) -> str:
        return export_run_id(self.tenant, self.export_ids, self.revisions)

    @property
    def latest(self) -> ExportRecord:
        return max(self.exports, key=lambda e: (e.ms, e.export_id))


def coalesce(
    pending: Sequence[ExportRecord], debounce_ms: int, window_ms: int | None = None
) -> list[ExportGroup]:
    """Group pending exports of one tenant and source by HLC time, leading edge first.

    ``window_ms`` is the HLC ms of the latest run requested for this tenant and source (None
    if none was). Ordered by (HLC ms, export id): an export stamped after the window that
    run opened (``window_ms + debounce_ms``) has closed finds the system quiet and is due at
    once, with any others of the same millisecond (the leading edge). The exports stamped
    within an open window coalesce into one group, due when the window closes; the run
    requested then opens the next window. So a quiet system plans an export immediately,
    and a storm becomes one run per window. With no window (0) every export is due at once,
    on its own (those of one millisecond together), however late it arrives.
    """
    ordered = sorted(pending, key=lambda e: (e.ms, e.export_id))
    groups: list[ExportGroup] = []
    end = None if window_ms is None else window_ms + debounce_ms
    i, n = 0, len(ordered)
    while i < n:
        first = ordered[i]
        if end is None or first.ms > end or not debounce_ms:  # quiet (or no window): now
            due, last = first.ms, first.ms
        else:  # within the open window: together, when it closes
            due, last = end, end
        j = i + 1
        while j < n and ordered[j].ms <= last:
            j += 1
        groups.append(ExportGroup(first.tenant, first.source, tuple(ordered[i:j]), first.ms, due))
        end = due + debounce_ms  # the run requested at ``due`` opens the next window
        i = j
    return groups
