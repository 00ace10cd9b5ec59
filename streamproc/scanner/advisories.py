"""The reference scanner's advisory database: OSV JSON records, a KEV list, FIRST's EPSS
scores, and matching.

Advisories are indexed by (ecosystem family, package name). A purl matches an advisory when
its type maps to that family, its name (for Debian binary packages: their *source* package,
which is what Debian advisories name) equals the advisory's package, and its version falls
in an ``affected`` entry. Severity is the advisory's own: a CVSS vector (v4 before v3 before
v2, scored with the ``cvss`` library) or ``database_specific.severity``; an advisory without
either that is on the KEV list counts as high (it is exploited in the wild), otherwise medium.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson

from streamproc.backends.osvrecord import link_of, load_kev, severity_of
from streamproc.scanner.versions import PURL_TYPES, VersionError, affects, ecosystem_of


class AdvisoryError(ValueError):
    """An advisory file that is not an OSV record."""


@dataclass(frozen=True)
class Advisory:
    id: str
    aliases: tuple[str, ...]
    severity: str
    kev: bool
    summary: str
    link: str
    affected: tuple[Mapping[str, Any], ...]
    modified: str
    digest: str
    """sha256 of the record as loaded: a changed advisory has a new digest."""

    @property
    def cves(self) -> tuple[str, ...]:
        return tuple(a for a in (self.id, *self.aliases) if a.startswith("CVE-"))


@dataclass(frozen=True, slots=True)
class Epss:
    """A CVE's EPSS: probability of exploitation in 30 days, percentile, score date."""

    score: float
    percentile: float
    date: str | None


def load_epss(path: Path | None) -> dict[str, Epss]:
    """CVE id → EPSS, from FIRST's daily CSV (``epss_scores-YYYY-MM-DD.csv``, gzipped or
    not): a ``#model_version:…,score_date:…`` comment line, the header
    ``cve,epss,percentile``, then one row per CVE."""
    if path is None or not path.exists():
        return {}
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    date: str | None = None
    out: dict[str, Epss] = {}
    header = False
    for n, line in enumerate(raw.decode().splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            for part in line[1:].split(","):
                key, _, value = part.partition(":")
                if key.strip() == "score_date":
                    date = value.strip()[:10] or None
            continue
        cells = [c.strip() for c in line.split(",")]
        if not header:
            if cells[:3] != ["cve", "epss", "percentile"]:
                raise AdvisoryError(f"{path}:{n}: not an EPSS file (header cve,epss,percentile)")
            header = True
            continue
        try:
            score, pct = float(cells[1]), float(cells[2])
        except (IndexError, ValueError):
            raise AdvisoryError(f"{path}:{n}: not an EPSS row: {line[:80]!r}") from None
        if not (0.0 <= score <= 1.0 and 0.0 <= pct <= 1.0):
            raise AdvisoryError(f"{path}:{n}: EPSS values lie in [0, 1]: {line[:80]!r}")
        out[cells[0]] = Epss(score, pct, date)
    return out


def parse_advisory(raw: bytes, kev: frozenset[str]) -> Advisory:
    """An OSV record from its bytes, decoded by orjson (the fastest decoder of untyped OSV
    records, docs/dependencies.md), which takes strict JSON only: ``NaN`` or a byte order
    mark is not JSON."""
    try:
        doc = orjson.loads(raw)
    except ValueError as exc:
        raise AdvisoryError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise AdvisoryError("not an OSV record (no id)")
    if doc.get("withdrawn"):
        raise AdvisoryError(f"{doc['id']} is withdrawn")
    aliases = tuple(doc.get("aliases") or ()) + tuple(doc.get("upstream") or ())
    is_kev = any(a in kev for a in (doc["id"], *aliases))
    return Advisory(
        id=doc["id"],
        aliases=tuple(dict.fromkeys(a for a in aliases if a != doc["id"])),
        severity=severity_of(doc, is_kev),
        kev=is_kev,
        summary=str(doc.get("summary") or "")[:500],
        link=link_of(doc),
        affected=tuple(doc.get("affected") or ()),
        modified=str(doc.get("modified") or ""),
        digest=hashlib.sha256(raw).hexdigest(),
    )


@dataclass(frozen=True)
class Match:
    purl: str
    advisory: Advisory
    fixed: str | None = None


@dataclass
class AdvisoryDb:
    """Advisories by (family, package name); ``revision`` changes whenever the set does."""

    advisories: dict[str, Advisory] = field(default_factory=dict)
    kev: frozenset[str] = frozenset()
    epss: dict[str, Epss] = field(default_factory=dict)
    """CVE id → EPSS (FIRST's daily scores)."""
    debian_sources: dict[str, str] = field(default_factory=dict)
    """Debian binary package → source package (advisories name source packages)."""
    _index: dict[tuple[str, str], list[tuple[Advisory, Mapping[str, Any]]]] = field(
        default_factory=dict
    )
    revision: str = ""

    @classmethod
    def load(
        cls,
        osv_dir: Path | None,
        kev_file: Path | None = None,
        sources: Path | None = None,
        epss_file: Path | None = None,
        *,
        skipped: Callable[[Path, str], None] | None = None,
    ) -> AdvisoryDb:
        """The advisories of ``osv_dir`` (a record that is withdrawn or not an OSV record is
        left out); with ``skipped``, each file left out — a file that cannot be read too,
        which otherwise raises — is told to it with the reason."""
        db = cls(kev=load_kev(kev_file), epss=load_epss(epss_file))
        if sources is not None and sources.exists():
            db.debian_sources = dict(orjson.loads(sources.read_bytes()).get("binaryToSource", {}))
        if osv_dir is not None:
            for path in sorted(osv_dir.glob("*.json")):
                try:
                    db.add(parse_advisory(path.read_bytes(), db.kev))
                except AdvisoryError as exc:
                    if skipped is not None:
                        skipped(path, str(exc))
                    continue  # withdrawn or not an OSV record: not an advisory to match
                except OSError as exc:
                    if skipped is None:
                        raise
                    skipped(path, exc.strerror or str(exc))
        db.reindex()
        return db

    def add(self, adv: Advisory) -> None:
        self.advisories[adv.id] = adv

    def reindex(self) -> None:
        index: dict[tuple[str, str], list[tuple[Advisory, Mapping[str, Any]]]] = {}
        for adv in self.advisories.values():
            for entry in adv.affected:
                pkg = entry.get("package") or {}
                family = ecosystem_of(str(pkg.get("ecosystem", "")))
                name = str(pkg.get("name", ""))
                if family == "PyPI":
                    name = _pep503(name)
                index.setdefault((family, name), []).append((adv, entry))
        self._index = index
        h = hashlib.sha256()
        for adv_id in sorted(self.advisories):
            h.update(f"{adv_id}={self.advisories[adv_id].digest};".encode())
        h.update(",".join(sorted(self.kev)).encode())
        for cve in sorted(self.epss):
            e = self.epss[cve]
            h.update(f"{cve}={e.score},{e.percentile},{e.date};".encode())
        self.revision = h.hexdigest()[:16]

    def epss_of(self, adv: Advisory) -> Epss | None:
        """The highest EPSS among the advisory's CVEs (None when none is scored)."""
        scored = [self.epss[c] for c in adv.cves if c in self.epss]
        return max(scored, key=lambda e: e.score) if scored else None

    def package_key(self, purl: str) -> tuple[str, str, str] | None:
        """(family, advisory package name, version) of a purl, or None if unmatchable."""
        if not purl.startswith("pkg:") or "@" not in purl:
            return None
        body = purl[4:].split("?", 1)[0].split("#", 1)[0]
        path, _, version = body.rpartition("@")
        ptype, _, rest = path.partition("/")
        family = PURL_TYPES.get(ptype.lower())
        if family is None or not rest:
            return None
        name = unquote(rest.rsplit("/", 1)[-1])
        version = unquote(version)
        if family == "PyPI":
            name = _pep503(name)
        elif family == "Debian":
            name = self.debian_sources.get(name, name)
        return family, name, version

    def match(self, purls: Iterable[str]) -> list[Match]:
        out: list[Match] = []
        for purl in purls:
            key = self.package_key(purl)
            if key is None:
                continue
            family, name, version = key
            for adv, entry in self._index.get((family, name), ()):
                try:
                    if affects(entry, version):
                        out.append(Match(purl, adv, _fixed_of(entry)))
                except VersionError:
                    continue  # a version the ecosystem cannot parse cannot be placed
        return out

    def product_keys(self, adv: Advisory) -> list[str]:
        """Product keys (version-less purls) an advisory touches, for the Feedser export."""
        keys: set[str] = set()
        binaries: dict[str, list[str]] = {}
        for b, s in self.debian_sources.items():
            binaries.setdefault(s, []).append(b)
        for entry in adv.affected:
            pkg = entry.get("package") or {}
            family = ecosystem_of(str(pkg.get("ecosystem", "")))
            name = str(pkg.get("name", ""))
            if family == "PyPI":
                keys.add(f"pkg:pypi/{_pep503(name)}")
            elif family == "Debian":
                for b in binaries.get(name, [name]):
                    keys.add(f"pkg:deb/debian/{b}")
            elif family == "npm":
                keys.add(f"pkg:npm/{name}")
        return sorted(keys)


def _fixed_of(entry: Mapping[str, Any]) -> str | None:
    for r in entry.get("ranges") or ():
        for ev in r.get("events") or ():
            if "fixed" in ev:
                return str(ev["fixed"])
    return None


def _pep503(name: str) -> str:
    out = name.lower().replace("_", "-").replace(".", "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out
