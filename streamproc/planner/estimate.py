"""The impact preview of an export: which images it touches, and how many of them it would
likely make worse — the "projected deltas" — and how many of those with a KEV finding, and
with a high-EPSS one.

Nothing is evaluated; the estimate reads what the planner already holds:

- the export's advisories (Feedser: each advisory's vulnerability, product keys, severity,
  KEV flag and EPSS, and the ``kev`` list; Vexer: each claim that turns a vulnerability
  ``→affected``, with the severity and KEV flags and the latest EPSS earlier Feedser exports
  gave it);
- the ImpactIndex: the images each advisory's product keys hit (within the selection, with
  ``usageOnly`` as planning does);
- each image's last verdict (its findings by vulnerability, folded from
  ``verdict.recorded``).

An image is a projected delta when an advisory that hits it is critical, high or KEV and
its vulnerability is new to the image's last verdict — absent from it, more severe than it
was there, or newly KEV — which is how the runner decides a delta. Of those, the ones with a
KEV finding and the ones with a high-EPSS finding (percentile at least
``planner.epss_high_percentile``) are counted apart, each whatever the other says. An image
whose last verdict was made after a recorded export arrived has been judged against it
already (by the export's own run) and is not counted again. Images hit only by what says
nothing of severity (a bare changed key, a claim on a vulnerability no Feedser export
described) are ``unassessed``. A large candidate set is judged on an even sample of
:data:`PROJECTION_SAMPLE` images, scaled up.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyroaring import BitMap

from streamproc.events import payloads as p
from streamproc.impact.index import ImpactIndex, ImpactSet
from streamproc.impact.selector import Selector
from streamproc.planner.changes import feedser_change
from streamproc.planner.records import CRITICAL, KEV
from streamproc.planner.select import resolve_keys

PROJECTION_SAMPLE = 10_000
"""Candidates whose last verdict is read at most; beyond, an even sample, scaled up."""
HIGH = p.SEVERITY_RANK["high"]
_TO = re.compile(r"(?:→|->)\s*([a-z_]+)$")

Findings = Mapping[str, tuple[int, bool]]
"""An image's last verdict: vulnerability → (highest severity rank, KEV)."""


@dataclass(frozen=True)
class Threat:
    """One vulnerability an export says something about, and the product keys it names."""

    vuln_id: str
    keys: tuple[str, ...]
    rank: int
    """Severity rank (``p.SEVERITY_RANK``); 0 when the export names none."""
    kev: bool
    percentile: float | None = None
    """The vulnerability's EPSS percentile, when the export (or an earlier one) gave it."""
    harmless: bool = False
    """The export says it makes nothing worse (a VEX claim that is not ``→affected``)."""

    @property
    def assessed(self) -> bool:
        """Whether the export says enough to judge it: a severity, KEV, or harmless."""
        return self.kev or self.rank > 0 or self.harmless

    @property
    def worsens(self) -> bool:
        """Whether a new finding of it is a delta (critical, high or KEV)."""
        return self.kev or self.rank >= HIGH

    def new_to(self, last: Findings | None) -> bool:
        """Not in the last verdict as it would be now (the runner's rule, by vulnerability)."""
        if last is None:
            return True
        old = last.get(self.vuln_id)
        return old is None or self.rank > old[0] or (self.kev and not old[1])


@dataclass(frozen=True)
class Change:
    """An export as the estimate needs it: every key it changes (what planning resolves)
    and what it says of each vulnerability."""

    keys: list[str]
    threats: list[Threat]


def feedser_threats(x: p.FeedserExportBody, vuln_keys: Callable[[str], set[str]]) -> Change:
    """A Feedser export: its advisories, and the KEV ids it lists without one (their keys
    from the vuln map earlier exports built, as planning maps them)."""
    sourced = p.FeedserExport(**{f: getattr(x, f) for f in x.__struct_fields__})
    change, _ = feedser_change(sourced)
    kev = set(x.kev)
    threats = [
        Threat(
            a.vuln_id,
            tuple(a.product_keys),
            p.SEVERITY_RANK[a.severity] if a.severity else 0,
            a.kev or a.vuln_id in kev,
            a.epss.percentile if isinstance(a.epss, p.Epss) else None,
        )
        for a in x.advisories
    ]
    described = {a.vuln_id for a in x.advisories}
    keys = set(change.keys)
    for vuln in sorted(kev - described):
        mapped = tuple(sorted(vuln_keys(vuln)))
        keys.update(mapped)
        threats.append(Threat(vuln, mapped, 0, True))
    return Change(sorted(keys), threats)


def vexer_threats(
    x: p.VexerExportBody, vuln_of: Callable[[str], tuple[int, p.Epss | None]]
) -> Change:
    """A Vexer export: each claim that turns its vulnerability ``→affected`` may add a
    finding; its severity, KEV status and EPSS are what Feedser exports gave the
    vulnerability (``vuln_of``: its KEV/critical flags and latest EPSS, as planning reads
    them)."""
    threats = []
    for c in x.changed_claims:
        m = _TO.search(c.status)
        if m is None or m.group(1) != "affected":  # not_affected, fixed, under_investigation
            threats.append(Threat(c.vuln_id, (c.product_key,), 0, False, harmless=True))
            continue
        f, epss = vuln_of(c.vuln_id)
        threats.append(
            Threat(
                c.vuln_id,
                (c.product_key,),
                p.SEVERITY_RANK["critical"] if f & CRITICAL else 0,
                bool(f & KEV),
                epss.percentile if epss is not None else None,
            )
        )
    return Change(sorted({c.product_key for c in x.changed_claims}), threats)


@dataclass(frozen=True)
class ImpactEstimate:
    candidates: ImpactSet
    deltas: int
    kev: int
    high_epss: int
    """Projected deltas with a new finding whose EPSS percentile is at least the threshold
    (KEV or not)."""
    unassessed: int
    judged: int


def even_sample(bm: BitMap, n: int) -> BitMap:
    """``n`` ids spread evenly over ``bm`` (all of it when it has no more)."""
    if len(bm) <= n:
        return bm
    step = len(bm) / n
    return BitMap(bm[int(i * step)] for i in range(n))


def project(
    change: Change,
    index: ImpactIndex,
    selector: Selector,
    usage_only: bool,
    last: Callable[[str], Findings | None],
    judged_since: Callable[[str], bool] = lambda _digest: False,
    sample: int = PROJECTION_SAMPLE,
    *,
    epss_high: float,
) -> ImpactEstimate:
    """The candidates and the projected deltas of ``change`` (``last(digest)``: the image's
    last verdict, None if it has none; ``judged_since(digest)``: whether that verdict was
    made after the export was recorded, so it reflects it already — the export's own run
    re-evaluated it — and nothing is left to get worse; ``epss_high``: the EPSS percentile
    from which a finding counts as high-EPSS, ``planner.epss_high_percentile``)."""
    candidates = resolve_keys(index, change.keys, usage_only, selector)
    judged = even_sample(candidates.bitmap, sample)
    hits: dict[int, list[Threat]] = {}
    for t in change.threats:
        if not t.keys:
            continue
        for image in resolve_keys(index, list(t.keys), usage_only, selector).bitmap & judged:
            hits.setdefault(image, []).append(t)
    deltas = kev = high_epss = unassessed = 0
    digests = dict(zip(judged, candidates.subset(judged).digests(), strict=True))
    for image in judged:
        threats: Sequence[Threat] = hits.get(image, ())
        if threats and judged_since(digests[image]):
            continue  # evaluated since the export arrived: its delta, if any, is history
        if any(t.worsens for t in threats):
            seen = last(digests[image])
            new = [t for t in threats if t.worsens and t.new_to(seen)]
            if new:
                deltas += 1
                kev += any(t.kev for t in new)
                high_epss += any(
                    t.percentile is not None and t.percentile >= epss_high for t in new
                )
                continue
        if not any(t.assessed for t in threats):
            unassessed += 1  # hit by keys that say nothing of severity
    scale = len(candidates.bitmap) / len(judged) if judged else 0.0
    return ImpactEstimate(
        candidates,
        round(deltas * scale),
        round(kev * scale),
        round(high_epss * scale),
        round(unassessed * scale),
        len(judged),
    )
