"""CycloneDX VEX (1.4 to 1.7): ``vulnerabilities[].analysis.state`` for the components its
``affects[].ref`` names, standalone or inside an SBOM.

A ref is a ``bom-ref`` of a component of the document (``metadata.component`` and
``components``, nested ones included), or a BOM-Link (``urn:cdx:<serial>/<version>#<ref>``)
whose fragment is such a ``bom-ref`` or is itself a purl. The component's purl is what the
claim names. A vulnerability without ``analysis`` is a finding, not a statement: skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from streamproc.vex.claims import Collector
from streamproc.vex.model import SUPPRESSING, Document, Status, clip

STATES: dict[str, Status] = {
    "not_affected": "not_affected",
    "false_positive": "false_positive",
    "exploitable": "affected",
    "in_triage": "under_investigation",
    "resolved": "fixed",
    "resolved_with_pedigree": "fixed",
}


def _components(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack: list[dict[str, Any]] = []
    meta = (doc.get("metadata") or {}).get("component")
    if isinstance(meta, dict):
        stack.append(meta)
    stack.extend(c for c in doc.get("components") or [] if isinstance(c, dict))
    while stack:
        c = stack.pop()
        yield c
        stack.extend(x for x in c.get("components") or [] if isinstance(x, dict))


def _purl_of(ref: str, refs: dict[str, str | None]) -> tuple[str | None, str]:
    """(purl, why not) of an ``affects`` ref."""
    local = ref
    if ref.startswith("urn:cdx:") and "#" in ref:
        local = unquote(ref.split("#", 1)[1])
    if local in refs:
        purl = refs[local]
        return purl, "" if purl else f"component {local!r} has no purl"
    if local.startswith("pkg:"):
        return local, ""
    if ref.startswith("urn:cdx:"):
        return None, f"{ref} names a component of another BOM by a ref that is not a purl"
    return None, f"no component has bom-ref {ref!r}"


def parse(doc: dict[str, Any]) -> Document:
    out = Collector()
    refs: dict[str, str | None] = {}
    for c in _components(doc):
        if isinstance(c.get("bom-ref"), str):
            refs[c["bom-ref"]] = c.get("purl") if isinstance(c.get("purl"), str) else None
    vulns = doc.get("vulnerabilities") or []
    for n, v in enumerate(vulns):
        analysis = v.get("analysis") or {}
        state = analysis.get("state")
        where = f"vulnerabilities[{n}]"
        if state not in STATES:
            out.skip(where, "no analysis.state: a finding, not a VEX statement")
            continue
        status = STATES[state]
        why = (
            analysis.get("justification") or analysis.get("detail")
            if status in SUPPRESSING
            else None
        )
        order = (str(v.get("updated") or v.get("published") or ""), n)
        for a, affect in enumerate(v.get("affects") or []):
            purl, reason = _purl_of(str(affect.get("ref", "")), refs)
            if purl is None:
                out.skip(f"{where}.affects[{a}]", reason)
                continue
            out.add(purl, str(v.get("id", "")), status, clip(why), None, order, where)
    return out.document(
        "cyclonedx", str(doc.get("serialNumber") or ""), str(doc.get("version", 1)), len(vulns)
    )
