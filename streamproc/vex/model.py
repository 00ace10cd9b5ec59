"""What every VEX format becomes: claims of (product purl, vulnerability, status,
justification), and the document they came from.

Statuses are normalised to five: OpenVEX's four (``not_affected``, ``affected``, ``fixed``,
``under_investigation``) and CycloneDX's ``false_positive``. What each one does to a finding
is :data:`SUPPRESSING` (docs/vex.md, "What each status does").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Format = Literal["openvex", "cyclonedx", "csaf"]
Status = Literal["not_affected", "affected", "fixed", "under_investigation", "false_positive"]
SUPPRESSING: frozenset[str] = frozenset({"not_affected", "false_positive", "fixed"})
"""A claim with one of these drops the finding it matches (and records why); ``affected``
and ``under_investigation`` keep it."""
NO_CLAIM: Status = "affected"
"""What a finding is without any claim: the scanner's word stands. A claim that appears is
reported from it, one that a newer version of its document drops is reported to it."""
MAX_JUSTIFICATION = 500
MAX_SKIPPED_SHOWN = 20


class VexError(ValueError):
    """A document that is not a VEX document this service takes: ``slug`` and ``status``
    are the problem the API answers (415 unknown format, 422 schema violation …)."""

    def __init__(self, status: int, slug: str, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.field = field


@dataclass(frozen=True, slots=True, order=True)
class Claim:
    """One normalised statement: ``purl`` is canonical (sbom.purls), possibly with a
    version and qualifiers; it matches the findings of that package (docs/vex.md)."""

    purl: str
    vuln_id: str
    status: Status
    justification: str | None = None
    image: str | None = None
    """An image digest when the claim holds inside that image only (an OpenVEX product
    that is an image, with the package among its subcomponents)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.purl, self.vuln_id, self.image or "")


@dataclass
class Document:
    """A parsed, schema-checked VEX document and its claims (one per product and vuln)."""

    format: Format
    own_id: str
    """The identifier the document gives itself (OpenVEX ``@id``, CycloneDX
    ``serialNumber``, CSAF ``tracking.id``); empty when it has none."""
    version: str
    """Its version as the format spells it (an integer, or CSAF's integer or semver)."""
    claims: list[Claim] = field(default_factory=list)
    statements: int = 0
    """Statements (OpenVEX), vulnerabilities (CycloneDX, CSAF) read."""
    skipped: list[str] = field(default_factory=list)
    """Why some products could not become claims (no purl, an unresolvable reference…)."""
    skipped_count: int = 0


def version_key(version: str) -> tuple[int, ...]:
    """A sortable form of a document version: integers as themselves, semver (CSAF) by its
    numeric core; anything else sorts below every number."""
    core = version.split("+", 1)[0].split("-", 1)[0]
    try:
        return tuple(int(p) for p in core.split("."))
    except ValueError:
        return (-1,)


def clip(text: str | None) -> str | None:
    if not text:
        return None
    text = " ".join(text.split())
    return text[:MAX_JUSTIFICATION] or None
