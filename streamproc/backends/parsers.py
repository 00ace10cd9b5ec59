"""Each tool's JSON, as it prints it, parsed into findings (pure functions).

Only the fields read are declared; everything else the tools print is ignored, so a newer
release that adds fields still parses. A document that is not the tool's JSON at all, or
whose fields have the wrong types, raises :class:`~.model.ToolError` (``unparseable_output``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from streamproc.backends.model import RawFinding, ToolError, ToolReport, cvss_band, severity
from streamproc.backends.osvrecord import SEVERITY_RANK, link_of, severity_of
from streamproc.backends.purlmatch import SbomPurls, purl_type


def _decode(raw: bytes, typ: type[Any], tool: str) -> Any:
    try:
        return msgspec.json.decode(raw, type=typ)
    except msgspec.DecodeError as exc:  # ValidationError included
        head = raw[:120].decode(errors="replace").strip()
        detail = f"{tool} printed no {tool} JSON ({exc}): {head!r}"
        raise ToolError("unparseable_output", detail) from None


# ------------------------------------------------------------------ Grype (-o json)


class _GFix(msgspec.Struct):
    versions: list[str] = []
    state: str = ""


class _GVuln(msgspec.Struct):
    id: str
    severity: str = ""
    dataSource: str = ""
    urls: list[str] = []
    fix: _GFix = msgspec.field(default_factory=_GFix)
    knownExploited: list[Any] = []


class _GRelated(msgspec.Struct):
    id: str


class _GArtifact(msgspec.Struct):
    name: str
    version: str = ""
    type: str = ""
    purl: str = ""


class _GMatch(msgspec.Struct):
    vulnerability: _GVuln
    artifact: _GArtifact
    relatedVulnerabilities: list[_GRelated] = []


class _GDescriptor(msgspec.Struct):
    name: str = ""
    version: str = ""
    db: dict[str, Any] | None = None


class _GDoc(msgspec.Struct):
    matches: list[_GMatch]
    descriptor: _GDescriptor = msgspec.field(default_factory=_GDescriptor)


_GRYPE_TYPES = {"python": "pypi", "java-archive": "maven", "go-module": "golang",
                "rust-crate": "cargo", "dotnet": "nuget", "php-composer": "composer"}  # fmt: skip


def grype_revision(desc: _GDescriptor) -> str:
    """``grype-db v<schema> built <time>`` (with a checksum prefix when Grype gives one)."""
    db: dict[str, Any] = desc.db or {}
    status: dict[str, Any] = db["status"] if isinstance(db.get("status"), dict) else db
    schema = str(status.get("schemaVersion") or "?")
    built = str(status.get("built") or "?")
    checksum = str(status.get("checksum") or "").removeprefix("sha256:")[:12]
    out = f"grype-db v{schema.lstrip('v')} built {built}"
    return f"{out} ({checksum})" if checksum else out


def parse_grype(raw: bytes, sbom: SbomPurls) -> ToolReport:
    doc: _GDoc = _decode(raw, _GDoc, "grype")
    out = []
    for m in doc.matches:
        a, v = m.artifact, m.vulnerability
        if a.purl:
            purl = sbom.resolve(a.purl)
        else:
            purl = sbom.named(_GRYPE_TYPES.get(a.type, a.type), a.name, a.version)
        fixed = v.fix.versions[0] if v.fix.state == "fixed" and v.fix.versions else None
        out.append(
            RawFinding(
                purl=purl,
                vuln_id=v.id,
                severity=severity(v.severity),
                fixed_version=fixed,
                aliases=tuple(r.id for r in m.relatedVulnerabilities if r.id != v.id),
                link=v.dataSource or (v.urls[0] if v.urls else None),
                kev=bool(v.knownExploited),
            )
        )
    return ToolReport(out, grype_revision(doc.descriptor), doc.descriptor.version)


# ------------------------------------------------------------------ Trivy (--format json)


class _TIdent(msgspec.Struct):
    PURL: str = ""


class _TVuln(msgspec.Struct):
    VulnerabilityID: str
    PkgName: str = ""
    InstalledVersion: str = ""
    FixedVersion: str = ""
    Severity: str = ""
    PrimaryURL: str = ""
    PkgIdentifier: _TIdent = msgspec.field(default_factory=_TIdent)
    VendorIDs: list[str] = []


class _TResult(msgspec.Struct):
    Target: str = ""
    Type: str = ""
    Vulnerabilities: list[_TVuln] | None = None


class _TTool(msgspec.Struct):
    Version: str = ""


class _TDoc(msgspec.Struct):
    SchemaVersion: int
    Results: list[_TResult] | None = None
    Trivy: _TTool = msgspec.field(default_factory=_TTool)


_TRIVY_TYPES = {"debian": "deb", "ubuntu": "deb", "alpine": "apk", "centos": "rpm",
                "redhat": "rpm", "rocky": "rpm", "alma": "rpm", "amazon": "rpm",
                "oracle": "rpm", "photon": "rpm", "suse": "rpm", "gemspec": "gem",
                "bundler": "gem", "pip": "pypi", "pipenv": "pypi", "poetry": "pypi",
                "python-pkg": "pypi", "uv": "pypi", "npm": "npm", "yarn": "npm",
                "pnpm": "npm", "node-pkg": "npm", "gomod": "golang", "gobinary": "golang",
                "cargo": "cargo", "rustbinary": "cargo", "jar": "maven", "pom": "maven",
                "gradle": "maven", "composer": "composer", "nuget": "nuget"}  # fmt: skip


def parse_trivy(raw: bytes, sbom: SbomPurls, revision: str = "") -> ToolReport:
    """``revision``: from ``trivy version --format json`` (the JSON report names no DB)."""
    doc: _TDoc = _decode(raw, _TDoc, "trivy")
    out = []
    for result in doc.Results or ():
        kind = _TRIVY_TYPES.get(result.Type.lower(), result.Type.lower())
        for v in result.Vulnerabilities or ():
            if v.PkgIdentifier.PURL:
                purl = sbom.resolve(v.PkgIdentifier.PURL)
            else:
                purl = sbom.named(kind, v.PkgName, v.InstalledVersion)
            out.append(
                RawFinding(
                    purl=purl,
                    vuln_id=v.VulnerabilityID,
                    severity=severity(v.Severity),
                    fixed_version=v.FixedVersion.split(",")[0].strip() or None,
                    aliases=tuple(i for i in v.VendorIDs if i != v.VulnerabilityID),
                    link=v.PrimaryURL or None,
                )
            )
    version = doc.Trivy.Version
    return ToolReport(out, revision or f"trivy {version or '?'} (DB revision not known)", version)


# ------------------------------------------------------------------ OSV-Scanner (--format json)


class _OPackage(msgspec.Struct):
    name: str
    version: str = ""
    ecosystem: str = ""
    purl: str = ""


class _OGroup(msgspec.Struct):
    ids: list[str]
    aliases: list[str] | None = None
    max_severity: str = ""


class _OEntry(msgspec.Struct):
    package: _OPackage
    vulnerabilities: list[dict[str, Any]] = []
    groups: list[_OGroup] | None = None


class _OResult(msgspec.Struct):
    packages: list[_OEntry] = []


class _ODoc(msgspec.Struct):
    results: list[_OResult]


def _fixed(record: dict[str, Any], name: str) -> str | None:
    for entry in record.get("affected") or ():
        if (entry.get("package") or {}).get("name") not in (None, name):
            continue
        for rng in entry.get("ranges") or ():
            for event in rng.get("events") or ():
                if event.get("fixed"):
                    return str(event["fixed"])
    return None


def parse_osv(raw: bytes, sbom: SbomPurls, tool_version: str = "") -> ToolReport:
    """One finding per group of aliases OSV-Scanner formed (per record without groups);
    the revision is the tool's version and the newest ``modified`` of the records."""
    doc: _ODoc = _decode(raw, _ODoc, "osv-scanner")
    out = []
    newest = ""
    for result in doc.results:
        for e in result.packages:
            pkg = e.package
            if pkg.purl:
                purl = sbom.resolve(pkg.purl)
            else:
                purl = sbom.named(purl_type(pkg.ecosystem), pkg.name, pkg.version)
            records = {str(r.get("id")): r for r in e.vulnerabilities if isinstance(r, dict)}
            for r in records.values():
                newest = max(newest, str(r.get("modified") or ""))
            groups = e.groups or [_OGroup(ids=[i]) for i in records]
            for g in groups:
                members = [records[i] for i in g.ids if i in records]
                if not members:
                    continue
                sev = _group_severity(g, members)
                first = members[0]
                aliases = {a for r in members for a in (r.get("aliases") or ())}
                aliases |= set(g.ids[1:]) | set(g.aliases or ())
                aliases.discard(g.ids[0])
                out.append(
                    RawFinding(
                        purl=purl,
                        vuln_id=g.ids[0],
                        severity=sev,
                        fixed_version=next(
                            (f for r in members if (f := _fixed(r, pkg.name))), None
                        ),
                        aliases=tuple(sorted(aliases)),
                        link=link_of(first),
                    )
                )
    revision = f"osv-scanner {tool_version or '?'}, advisories modified up to {newest or '?'}"
    return ToolReport(out, revision, tool_version)


def _group_severity(g: _OGroup, members: list[dict[str, Any]]) -> str:
    try:
        return cvss_band(float(g.max_severity))
    except ValueError:
        pass
    return max((severity_of(r, False) for r in members), key=SEVERITY_RANK.__getitem__)
