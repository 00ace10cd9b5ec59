"""Reading OSV records and the KEV catalog: an advisory's severity, its link, and the CVE
ids CISA lists as known exploited. Shared by the reference scanner (which matches OSV records
itself) and the OSV-Scanner backend (which prints them).

Severity is the record's own: a CVSS vector (v4 before v3 before v2, scored with the ``cvss``
library), else ``database_specific.severity``, else an ecosystem's own severity; a record
without any that is on the KEV list counts as high (it is exploited in the wild), otherwise
medium.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cvss import CVSS2, CVSS3, CVSS4

SEVERITY_RANK = {"low": 1, "medium": 2, "high": 3, "critical": 4}
_DB_SEVERITY = {"LOW": "low", "MODERATE": "medium", "MEDIUM": "medium", "HIGH": "high"}
_DB_SEVERITY["CRITICAL"] = "critical"


def cvss_severity(vector: str) -> str | None:
    try:
        if vector.startswith("CVSS:4"):
            sev = CVSS4(vector).severity
        elif vector.startswith("CVSS:3"):
            sev = CVSS3(vector).severities()[0]
        else:
            score = CVSS2(vector).scores()[0]
            sev = "High" if score >= 7 else "Medium" if score >= 4 else "Low"
    except Exception:  # the cvss library raises its own error types per version
        return None
    sev = sev.lower()
    return sev if sev in SEVERITY_RANK else None


def severity_of(doc: Mapping[str, Any], kev: bool) -> str:
    scores = {s.get("type"): s.get("score", "") for s in doc.get("severity") or ()}
    for kind in ("CVSS_V4", "CVSS_V3", "CVSS_V2"):
        if scores.get(kind):
            sev = cvss_severity(scores[kind])
            if sev:
                return sev
    db = (doc.get("database_specific") or {}).get("severity")
    if isinstance(db, str) and db.upper() in _DB_SEVERITY:
        return _DB_SEVERITY[db.upper()]
    for entry in doc.get("affected") or ():
        eco = (entry.get("ecosystem_specific") or {}).get("severity")
        if isinstance(eco, str) and eco.upper() in _DB_SEVERITY:
            return _DB_SEVERITY[eco.upper()]
    return "high" if kev else "medium"


def link_of(doc: Mapping[str, Any]) -> str:
    for ref in doc.get("references") or ():
        if ref.get("type") == "ADVISORY" and ref.get("url"):
            return str(ref["url"])
    return f"https://osv.dev/vulnerability/{doc['id']}"


def kev_ids(doc: Mapping[str, Any]) -> frozenset[str]:
    """CVE ids of a CISA KEV catalog document (``vulnerabilities[].cveID``)."""
    return frozenset(v["cveID"] for v in doc.get("vulnerabilities", ()) if v.get("cveID"))


def load_kev(path: Path | None) -> frozenset[str]:
    """CVE ids of a CISA KEV catalog file."""
    if path is None or not path.exists():
        return frozenset()
    return kev_ids(json.loads(path.read_bytes()))
