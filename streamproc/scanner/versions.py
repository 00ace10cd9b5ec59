"""Is a package version inside an OSV ``affected`` entry? Per-ecosystem version order.

Version *ordering* comes from ``univers`` (aboutcode.org), which implements each ecosystem's
own rules: Debian's policy algorithm (epochs, ``~`` before anything, upstream/revision
split), PEP 440 for PyPI, semver for npm/Go/crates, RPM's rpmvercmp, Maven's. It ships a
``from_osv_v1`` hook but leaves it unimplemented, so the OSV event semantics (a sorted list of
``introduced`` / ``fixed`` / ``last_affected`` / ``limit`` events, OSV schema 1.x) are
evaluated here, exactly as the OSV specification's reference algorithm does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

from univers import versions as uv

__all__ = ["ECOSYSTEMS", "VersionError", "affects", "ecosystem_of", "in_ranges", "parse_version"]


class VersionError(ValueError):
    """A version string that the ecosystem's scheme cannot parse."""


ECOSYSTEMS: dict[str, type[uv.Version]] = {
    "Debian": uv.DebianVersion,
    "Ubuntu": uv.DebianVersion,
    "PyPI": uv.PypiVersion,
    "npm": uv.SemverVersion,
    "Go": uv.GolangVersion,
    "crates.io": uv.SemverVersion,
    "Maven": uv.MavenVersion,
    "NuGet": uv.NugetVersion,
    "RubyGems": uv.RubygemsVersion,
    "Packagist": uv.ComposerVersion,
    "Alpine": uv.AlpineLinuxVersion,
    "Red Hat": uv.RpmVersion,
    "Rocky Linux": uv.RpmVersion,
    "AlmaLinux": uv.RpmVersion,
}
"""OSV ecosystem (without its ``:release`` suffix) → univers version class."""

PURL_TYPES: dict[str, str] = {
    "deb": "Debian",
    "pypi": "PyPI",
    "npm": "npm",
    "golang": "Go",
    "cargo": "crates.io",
    "maven": "Maven",
    "nuget": "NuGet",
    "gem": "RubyGems",
    "composer": "Packagist",
    "apk": "Alpine",
    "rpm": "Red Hat",
}
"""purl type → OSV ecosystem family."""


def ecosystem_of(osv_ecosystem: str) -> str:
    """``"Debian:12"`` → ``"Debian"``: the family decides the version scheme."""
    return osv_ecosystem.split(":", 1)[0]


@lru_cache(maxsize=65536)
def parse_version(ecosystem: str, text: str) -> uv.Version:
    cls = ECOSYSTEMS.get(ecosystem_of(ecosystem))
    if cls is None:
        raise VersionError(f"no version scheme for ecosystem {ecosystem!r}")
    try:
        return cls(text)
    except (uv.InvalidVersion, ValueError, TypeError) as exc:
        raise VersionError(f"{text!r} is not a valid {ecosystem} version: {exc}") from None


def _is_zero(ecosystem: str, v: str) -> bool:
    return v == "0"


def in_ranges(
    ecosystem: str,
    version: str,
    ranges: Iterable[Mapping[str, Any]],
    parse: Callable[[str, str], uv.Version] = parse_version,
) -> bool:
    """OSV's evaluation: within one range, walk the events sorted by version; ``introduced``
    opens, ``fixed`` / ``limit`` close before, ``last_affected`` closes after. ``GIT`` ranges
    name commits, not versions, and are skipped (an SBOM carries versions)."""
    v = parse(ecosystem, version)
    for r in ranges:
        kind = r.get("type")
        if kind not in ("ECOSYSTEM", "SEMVER"):
            continue
        events: list[tuple[uv.Version | None, str]] = []
        for ev in r.get("events", ()):
            for key in ("introduced", "fixed", "last_affected", "limit"):
                if key in ev:
                    text = str(ev[key])
                    if key == "introduced" and _is_zero(ecosystem, text):
                        events.append((None, key))  # "0": before every version
                    elif key == "limit" and text == "*":
                        continue
                    else:
                        try:
                            events.append((parse(ecosystem, text), key))
                        except VersionError:
                            continue  # an unparsable bound cannot decide anything
        # None (the "0" sentinel) sorts first; at equal versions openings precede closings.
        order = {"introduced": 0, "last_affected": 1, "fixed": 2, "limit": 2}
        events.sort(key=lambda e: (e[0] is not None, e[0] or 0, order[e[1]]))
        affected = False
        for bound, key in events:
            if key == "introduced":
                if bound is None or v >= bound:
                    affected = True
            elif key in ("fixed", "limit"):
                if bound is not None and v >= bound:
                    affected = False
            elif key == "last_affected" and bound is not None and v > bound:
                affected = False
        if affected:
            return True
    return False


def affects(entry: Mapping[str, Any], version: str) -> bool:
    """Whether one OSV ``affected[]`` entry covers ``version`` (explicit list or ranges)."""
    ecosystem = entry.get("package", {}).get("ecosystem", "")
    if version in (entry.get("versions") or ()):
        return True
    return in_ranges(ecosystem, version, entry.get("ranges") or ())
