"""Extract an image's purls from a CycloneDX (1.4-1.7) or SPDX (2.2/2.3) JSON SBOM.

Plain msgspec Structs rather than cyclonedx-python-lib / spdx-tools: we only need the
purls, and those libraries build a full validated object model that refuses a whole
document over an unrelated missing field (e.g. an SPDX package without
downloadLocation) while pulling in ~60 MB of dependencies (rdflib, beartype, ...).
Decoding only the fields we read is fast, ignores everything else, and still reports a
wrong-typed purl with its JSON path.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal, NamedTuple

import msgspec

__all__ = [
    "CYCLONEDX_VERSIONS",
    "SPDX_VERSIONS",
    "Sbom",
    "SbomError",
    "parse_sbom",
    "read_sbom",
]

CYCLONEDX_VERSIONS = ("1.4", "1.5", "1.6", "1.7")
"""1.7 (what Trivy 0.76 writes by default; cyclonedx-py with ``--sv 1.7``) keeps
``components[].purl`` as 1.4-1.6 have it."""
SPDX_VERSIONS = ("SPDX-2.2", "SPDX-2.3")
_AT = re.compile(r" - at `(\$[^`]*)`$")


class SbomError(ValueError):
    """The document is not a supported SBOM (or not JSON at all); ``field`` is the JSON path
    (within the document) of what is wrong, ``$`` for the document as a whole."""

    def __init__(self, message: str, field: str = "$") -> None:
        super().__init__(message)
        self.field = field


class Sbom(NamedTuple):
    format: Literal["cyclonedx", "spdx"]
    spec_version: str
    purls: list[str]
    """Raw purl strings, de-duplicated in document order (normalise them separately)."""


class _Probe(msgspec.Struct):
    bomFormat: Any = None
    specVersion: Any = None
    spdxVersion: Any = None
    context: Any = msgspec.field(default=None, name="@context")


class _CdxComponent(msgspec.Struct):
    purl: str | None = None
    components: list[_CdxComponent] = []


class _CdxBom(msgspec.Struct):
    components: list[_CdxComponent] = []


class _SpdxRef(msgspec.Struct):
    referenceType: str = ""
    referenceLocator: str = ""


class _SpdxPackage(msgspec.Struct):
    externalRefs: list[_SpdxRef] = []


class _SpdxDoc(msgspec.Struct):
    packages: list[_SpdxPackage] = []


def _decode(data: bytes | str, typ: type[Any], what: str) -> Any:
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        at = _AT.search(str(exc))
        raise SbomError(f"malformed {what}: {exc}", at.group(1) if at else "$") from None
    except msgspec.DecodeError as exc:
        raise SbomError(f"not valid JSON: {exc}") from None


def _cyclonedx_purls(bom: _CdxBom) -> list[str]:
    out: list[str] = []
    stack = list(reversed(bom.components))  # iterative: nesting depth is untrusted
    while stack:
        comp = stack.pop()
        if comp.purl:
            out.append(comp.purl)
        stack.extend(reversed(comp.components))
    return out


def _spdx_purls(doc: _SpdxDoc) -> list[str]:
    return [
        ref.referenceLocator
        for pkg in doc.packages
        for ref in pkg.externalRefs
        if ref.referenceType.lower() == "purl" and ref.referenceLocator
    ]


def parse_sbom(data: bytes | str) -> Sbom:
    """Detect the format from the document itself and return its purls."""
    try:
        probe = msgspec.json.decode(data, type=_Probe)
    except msgspec.ValidationError:
        raise SbomError("not an SBOM: the JSON document is not an object") from None
    except msgspec.DecodeError as exc:
        raise SbomError(f"not valid JSON: {exc}") from None
    if probe.bomFormat is not None:
        if probe.bomFormat != "CycloneDX":
            raise SbomError(
                f"unknown bomFormat {probe.bomFormat!r} (expected 'CycloneDX')", "$.bomFormat"
            )
        if probe.specVersion not in CYCLONEDX_VERSIONS:
            raise SbomError(
                f"CycloneDX specVersion {probe.specVersion!r} is not supported "
                f"(supported: {', '.join(CYCLONEDX_VERSIONS)})",
                "$.specVersion",
            )
        purls = _cyclonedx_purls(_decode(data, _CdxBom, "CycloneDX document"))
        return Sbom("cyclonedx", probe.specVersion, list(dict.fromkeys(purls)))
    if probe.spdxVersion is not None:
        if probe.spdxVersion not in SPDX_VERSIONS:
            raise SbomError(
                f"SPDX version {probe.spdxVersion!r} is not supported "
                f"(supported: {', '.join(SPDX_VERSIONS)})",
                "$.spdxVersion",
            )
        purls = _spdx_purls(_decode(data, _SpdxDoc, "SPDX document"))
        return Sbom("spdx", probe.spdxVersion, list(dict.fromkeys(purls)))
    if probe.context is not None and "spdx" in str(probe.context).lower():
        raise SbomError(
            "SPDX 3 (JSON-LD) is not supported; export SPDX 2.3 JSON instead", "$.@context"
        )
    raise SbomError(
        "neither CycloneDX JSON (no 'bomFormat') nor SPDX JSON (no 'spdxVersion'); "
        "XML, tag-value and RDF SBOMs are not supported"
    )


def read_sbom(path: str | os.PathLike[str]) -> Sbom:
    """Read and parse an SBOM file; errors name the file."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return parse_sbom(data)
    except SbomError as exc:
        raise SbomError(f"{os.fspath(path)}: {exc}", exc.field) from None
