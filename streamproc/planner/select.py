"""Which images a run covers: resolve per schedule, de-duplicate by digest, ``onlyIf``,
and the planning order. Event-driven: KEV first, then the highest EPSS of the image's changed
findings, then critical, then by digest hash; nightly: KEV, critical, rest by the last report.
Pure: the index is read, "now" is the cause's own time.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyroaring import BitMap

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex, ImpactSet
from streamproc.impact.selector import Selector
from streamproc.planner import pacing
from streamproc.planner.changes import Changes
from streamproc.planner.model import DAY_MS, Cause, ImpactSource, Target
from streamproc.planner.records import CRITICAL, KEV, ScheduleView
from streamproc.sbom.purls import MAX_KEYS_PER_QUERY, PurlError, normalize_purl


def selector_of(tenant: str, sel: p.Selection) -> Selector:
    return Selector(
        tenant=tenant,
        namespaces=list(sel.namespaces),
        repos=list(sel.repositories),
        labels=list(sel.labels),
        digests=list(sel.digests),
        include_tags=list(sel.include_tags),
    )


def targets_for(cause: Cause, schedules: Sequence[ScheduleView]) -> list[Target]:
    """Event-driven: every active schedule subscribed to the source. Cron: its schedule,
    if still active. Manual: the request's selection, or its schedule's."""

    def of(s: ScheduleView, selection: p.Selection | None = None) -> Target:
        return Target(s.id, selection or s.selection, s.only_if, s.limits, s.mode)

    own = [s for s in schedules if s.tenant == cause.tenant]
    if cause.event_driven:
        return [of(s) for s in own if s.active and cause.trigger in s.subscriptions]
    if cause.trigger == "cron":
        return [of(s) for s in own if s.id == cause.schedule_id and s.active]
    for s in own:
        if s.id == cause.schedule_id and not s.deleted:
            return [of(s, cause.selection)]
    return [Target(None, cause.selection or p.Selection(), p.OnlyIf(), p.Limits(), cause.mode)]


def _valid_key(k: str) -> bool:
    try:
        normalize_purl(k)
    except PurlError:
        return False
    return True


def _with_bitmap(s: ImpactSet, bm: BitMap) -> ImpactSet:
    """Re-point a result the index handed us (ours to keep) at another set of its ids."""
    s.bitmap = bm
    return s


def resolve_keys(
    index: ImpactIndex, keys: Sequence[str], usage_only: bool, selector: Selector
) -> ImpactSet:
    """Images in scope hit by any key; unparseable keys are dropped, long lists chunked."""
    out: ImpactSet | None = None
    for i in range(0, max(1, len(keys)), MAX_KEYS_PER_QUERY):
        chunk = keys[i : i + MAX_KEYS_PER_QUERY]
        try:
            s = index.resolve_by_purls(chunk, usage_only, selector)
        except PurlError:
            s = index.resolve_by_purls([k for k in chunk if _valid_key(k)], usage_only, selector)
        out = s if out is None else _with_bitmap(out, out.bitmap | s.bitmap)
    assert out is not None
    return out


@dataclass
class Selected:
    """The images a run covers before capping, in planning order, with the counts."""

    ordered: list[str]
    tiers: list[int]
    candidates: int
    deduped: int
    keys: int
    degraded_reason: str | None


def _change_keys(
    cause: Cause, index: ImpactIndex, warm: bool
) -> tuple[list[str], set[str], set[str], str | None]:
    ch = cause.changes or Changes()
    kev = set(ch.kev_keys)
    for v in sorted(ch.kev_vulns):
        kev |= index.vuln_keys(v)
    crit = set(ch.critical_keys)
    keys = set(ch.keys) | kev
    reason = None
    if not warm:
        urgent = kev | crit
        reason = (
            f"impact index not warm: event-driven run limited to its {len(urgent)} KEV and "
            f"critical keys of {len(keys)} changed keys"
        )
        keys = urgent
    return sorted(keys), kev, crit, reason


def _epss_by_image(
    index: ImpactIndex, ch: Changes, usage_only: bool, tenant: str, kept: BitMap
) -> dict[int, tuple[float, float]]:
    """Image id → (score, percentile) of the highest EPSS among its changed findings."""
    out: dict[int, tuple[float, float]] = {}
    everyone = Selector(tenant=tenant)
    for g in ch.epss:  # highest first: an image keeps the first (highest) it is hit by
        for i in resolve_keys(index, g.keys, usage_only, everyone).bitmap & kept:
            out.setdefault(i, (g.score, g.percentile))
    return out


def select_images(
    cause: Cause,
    targets: Sequence[Target],
    source: ImpactSource,
    reports: Mapping[str, tuple[int, int]],
    usage_only: bool,
    epss_high: float = 0.9,
) -> Selected:
    """Resolve, de-duplicate by digest, apply ``onlyIf`` and order (the module docstring);
    an image's tier is KEV, critical (or a changed finding's EPSS percentile at least
    ``epss_high``), or the rest. Pure; the index is only read."""
    index, warm = source.index, source.warm
    tenant = cause.tenant
    keys: list[str] = []
    kev: set[str] = set()
    crit: set[str] = set()
    reason: str | None = None
    if cause.event_driven:
        keys, kev, crit, reason = _change_keys(cause, index, warm)
    elif not warm:
        reason = (
            "impact index not warm: the run covers the whole selection as indexed so far, "
            "plus any digests the selection lists by name"
        )
    sets: list[ImpactSet] = []
    kept_parts: list[BitMap] = []
    extra: dict[str, None] = {}
    for t in targets:
        sel = selector_of(tenant, t.selection)
        if cause.event_driven:
            s = resolve_keys(index, keys, usage_only, sel) if keys else None
        else:
            s = index.resolve_all(sel)
            if not warm:
                for d in t.selection.digests:
                    if index.image_id(tenant, d) is None and _old_enough(
                        d, t.only_if, cause.at_ms, reports
                    ):
                        extra[d] = None
        if s is not None:
            sets.append(s)
            kept_parts.append(_fresh_enough(s, t.only_if, cause.at_ms, reports))
    candidates = sum(s.count for s in sets) + len(extra)
    deduped = (len(BitMap.union(*[s.bitmap for s in sets])) if sets else 0) + len(extra)
    if sets:
        kept = BitMap.union(*kept_parts) if len(kept_parts) > 1 else kept_parts[0]
        view = _with_bitmap(sets[0], kept)
        ids, digests = list(kept), view.digests()
    else:
        kept, ids, digests = BitMap(), [], []
    rows: list[tuple[int, float, int, int, str, int]] = []
    """(not KEV, -EPSS, not critical, digest hash, digest, tier)"""
    if cause.event_driven:
        everyone = Selector(tenant=tenant)
        kev_bm = (
            resolve_keys(index, sorted(kev), usage_only, everyone).bitmap & kept
            if kev
            else BitMap()
        )
        crit_bm = (
            resolve_keys(index, sorted(crit), usage_only, everyone).bitmap & kept
            if crit
            else BitMap()
        )
        epss = _epss_by_image(index, cause.changes or Changes(), usage_only, tenant, kept)
        for i, d in zip(ids, digests, strict=True):
            is_kev, is_crit = i in kev_bm, i in crit_bm
            score, pct = epss.get(i, (0.0, 0.0))
            tier = (
                pacing.TIER_KEV
                if is_kev
                else pacing.TIER_CRITICAL
                if is_crit or (score > 0 and pct >= epss_high)
                else pacing.TIER_REST
            )
            rows.append((not is_kev, -score, not is_crit, hash32(d), d, tier))
    else:
        for d in digests:
            tier = _report_tier(reports.get(d))
            rows.append((tier, 0.0, 0, hash32(d), d, tier))
    rows.extend((pacing.TIER_REST, 0.0, 1, hash32(d), d, pacing.TIER_REST) for d in extra)
    rows.sort()
    return Selected(
        ordered=[r[4] for r in rows],
        tiers=[r[5] for r in rows],
        candidates=candidates,
        deduped=deduped,
        keys=len(keys),
        degraded_reason=reason,
    )


def hash32(digest: str) -> int:
    """32-bit hash of a digest: its high bits pick the shard, and it orders a tier."""
    return zlib.crc32(digest.encode())


def _report_tier(report: tuple[int, int] | None) -> int:
    """Nightly order: images whose last report had KEV findings, then critical, then rest."""
    if report is None:
        return pacing.TIER_REST
    flags = report[1]
    return (
        pacing.TIER_KEV
        if flags & KEV
        else pacing.TIER_CRITICAL
        if flags & CRITICAL
        else pacing.TIER_REST
    )


def _old_enough(
    digest: str, only_if: p.OnlyIf, at_ms: int, reports: Mapping[str, tuple[int, int]]
) -> bool:
    days = only_if.last_report_older_than_days
    if days is None:
        return True
    r = reports.get(digest)
    return r is None or r[0] < at_ms - days * DAY_MS


def _fresh_enough(
    s: ImpactSet, only_if: p.OnlyIf, at_ms: int, reports: Mapping[str, tuple[int, int]]
) -> BitMap:
    """``lastReportOlderThanDays``: images never reported, or last reported before then
    (``policyRevision`` does not filter: the plan puts it on the segments, for the scanner)."""
    days = only_if.last_report_older_than_days
    if days is None:
        return s.bitmap
    cutoff = at_ms - days * DAY_MS
    get = reports.get
    return BitMap(
        i
        for i, d in zip(s.bitmap, s.digests(), strict=True)
        if (r := get(d)) is None or r[0] < cutoff
    )
