"""Naming a tool's finding by the SBOM's own purl.

Tools report the package they matched by its purl when the SBOM gave one (Grype's
``artifact.purl``, Trivy's ``PkgIdentifier.PURL``), sometimes without it (OSV-Scanner names
ecosystem, name and version; Grype leaves ``purl`` empty for a package it found by CPE).
Findings must name the purl the image was indexed with, or deltas and the index disagree:
so a finding is named by the SBOM purl of the same type, name and version when there is one.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

_ECOSYSTEMS = {
    "go": "golang",
    "crates.io": "cargo",
    "npm": "npm",
    "pypi": "pypi",
    "maven": "maven",
    "rubygems": "gem",
    "nuget": "nuget",
    "packagist": "composer",
    "hex": "hex",
    "pub": "pub",
    "swifturl": "swift",
    "debian": "deb",
    "ubuntu": "deb",
    "alpine": "apk",
    "rocky linux": "rpm",
    "almalinux": "rpm",
    "red hat": "rpm",
    "suse": "rpm",
    "opensuse": "rpm",
}


def _split(purl: str) -> tuple[str, str, str] | None:
    """(type, namespace/name lower-cased, version) of a purl, qualifiers dropped."""
    if not purl.startswith("pkg:"):
        return None
    body = purl[4:].split("#", 1)[0].split("?", 1)[0]
    path, _, version = body.rpartition("@") if "@" in body else (body, "", "")
    kind, _, name = path.partition("/")
    if not kind or not name:
        return None
    return kind.lower(), unquote(name).lower(), unquote(version)


class SbomPurls:
    """The purls of one SBOM, looked up by (type, name, version) and by name alone."""

    def __init__(self, purls: Iterable[str]) -> None:
        self.exact: dict[tuple[str, str, str], str] = {}
        self.by_name: dict[tuple[str, str], list[str]] = {}
        for p in purls:
            k = _split(p)
            if k is None:
                continue
            self.exact.setdefault(k, p)
            tail = k[1].rsplit("/", 1)[-1]
            self.by_name.setdefault((k[0], tail), []).append(p)

    def resolve(self, purl: str) -> str:
        """The SBOM's spelling of ``purl`` (same type, name, version), else ``purl``."""
        k = _split(purl)
        return self.exact.get(k, purl) if k is not None else purl

    def named(self, kind: str, name: str, version: str) -> str:
        """The SBOM purl of a package known by type, name and version only; a
        ``pkg:<kind>/<name>@<version>`` of our making when the SBOM has none."""
        tail = name.lower().replace(":", "/").rsplit("/", 1)[-1]
        for p in self.by_name.get((kind, tail), ()):
            k = _split(p)
            if k is not None and k[2] == version and k[1].endswith(name.lower().replace(":", "/")):
                return p
        return (
            f"pkg:{kind}/{name.replace(':', '/')}@{version}"
            if kind
            else f"pkg:generic/{name}@{version}"
        )


def purl_type(ecosystem: str) -> str:
    """The purl type of an OSV ecosystem (``Debian:12`` → ``deb``); ``generic`` if unknown."""
    base = ecosystem.split(":", 1)[0].strip().lower()
    return _ECOSYSTEMS.get(base, "generic")
