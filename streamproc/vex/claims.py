"""Claims as sets: collecting a document's statements into one claim per (product,
vulnerability, image), comparing two versions of a document, and whether a claim's
product matches a finding's package.

Matching (docs/vex.md, "Which findings a claim matches"): the claim's purl names the same
package (type, namespace, name); a version in the claim must equal the finding's; every
qualifier the claim gives must be on the finding's purl with the same value (a claim
without qualifiers matches every architecture or distribution of that version).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import unquote

from packageurl import PackageURL

from streamproc.sbom.purls import PurlError, normalize_purl
from streamproc.vex.model import (
    MAX_SKIPPED_SHOWN,
    NO_CLAIM,
    Claim,
    Document,
    Format,
    Status,
)

Key = tuple[str, str, str]
"""(purl, vulnId, image digest or "")"""


def image_of(purl: str) -> str | None:
    """The digest of an image purl (``pkg:oci/name@sha256%3A…``), else None."""
    if not purl.startswith("pkg:oci/") or "@" not in purl:
        return None
    version = unquote(purl.split("@", 1)[1].split("?", 1)[0].split("#", 1)[0])
    algo, _, hexpart = version.partition(":")
    if algo and hexpart and algo.isalnum() and all(c in "0123456789abcdef" for c in hexpart):
        return f"{algo}:{hexpart}"
    return None


class Collector:
    """One claim per key; where statements repeat a key, the latest (by the statement's
    own time, then document order) wins. Products that cannot be claimed are counted,
    with the first reasons kept."""

    def __init__(self) -> None:
        self._claims: dict[Key, tuple[tuple[str, int], Claim]] = {}
        self.skipped: list[str] = []
        self.skipped_count = 0

    def skip(self, where: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_SKIPPED_SHOWN:
            self.skipped.append(f"{where}: {why}")

    def add(
        self,
        purl: str | None,
        vuln_id: str,
        status: Status,
        justification: str | None,
        image: str | None,
        order: tuple[str, int],
        where: str,
    ) -> None:
        if not vuln_id:
            self.skip(where, "names no vulnerability")
            return
        if purl is None:
            self.skip(where, "a product without a purl (CPEs and plain names are not matched)")
            return
        try:
            canonical = normalize_purl(purl).purl
        except PurlError as exc:
            self.skip(where, exc.reason)
            return
        if image_of(canonical) is not None:
            self.skip(where, f"{canonical} is an image: claims name its packages")
            return
        claim = Claim(canonical, vuln_id, status, justification, image)
        held = self._claims.get(claim.key)
        if held is None or order >= held[0]:
            self._claims[claim.key] = (order, claim)

    def document(self, fmt: Format, own_id: str, version: str, statements: int) -> Document:
        return Document(
            format=fmt,
            own_id=own_id,
            version=version,
            claims=sorted(c for _, c in self._claims.values()),
            statements=statements,
            skipped=self.skipped,
            skipped_count=self.skipped_count,
        )


@dataclass(frozen=True, slots=True)
class Change:
    """A claim of one document that changed between two versions of it."""

    claim: Claim
    """The new claim; for a dropped one, the old claim (``removed``)."""
    before: Status
    after: Status
    removed: bool = False

    @property
    def transition(self) -> str:
        return f"{self.before}→{self.after}"


def diff(held: Mapping[Key, Claim], claims: Iterable[Claim]) -> list[Change]:
    """What changed from the claims ``held`` for a document to its new ``claims``: new
    claims (from ``affected``, what a finding is without one), changed status or
    justification, and dropped claims (to ``affected``). Sorted by key."""
    out: list[Change] = []
    seen: set[Key] = set()
    for c in claims:
        seen.add(c.key)
        old = held.get(c.key)
        if old is None:  # every new claim counts: an ``affected`` one outranks older ones
            out.append(Change(c, NO_CLAIM, c.status))
        elif old.status != c.status or old.justification != c.justification:
            out.append(Change(c, old.status, c.status))
    for k, old in held.items():
        if k not in seen:
            out.append(Change(old, old.status, NO_CLAIM, removed=True))
    out.sort(key=lambda ch: ch.claim.key)
    return out


class _Parts(NamedTuple):
    product: str
    version: str | None
    qualifiers: frozenset[tuple[str, str]]


@lru_cache(maxsize=65_536)
def _parts(purl: str) -> _Parts | None:
    try:
        n = normalize_purl(purl)
        p = PackageURL.from_string(n.purl)
    except (PurlError, ValueError):
        return None
    quals = p.qualifiers if isinstance(p.qualifiers, dict) else {}
    return _Parts(n.product_key, p.version, frozenset(quals.items()))


def matches(claim_purl: str, finding_purl: str) -> bool:
    """Whether a claim on ``claim_purl`` speaks of the package ``finding_purl``."""
    if claim_purl == finding_purl:
        return True
    c, f = _parts(claim_purl), _parts(finding_purl)
    if c is None or f is None or c.product != f.product:
        return False
    if c.version is not None and c.version != f.version:
        return False
    return c.qualifiers <= f.qualifiers
