"""``settle`` and the policy: what every backend's findings become before a verdict (pure,
over a KEV catalog file on disk)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from streamproc.backends.findings import KevCatalog, Policy, settle
from streamproc.backends.model import RawFinding

GLIBC = "pkg:deb/debian/libc6@2.36-9"
TOOLS = "pkg:pypi/setuptools@65.5.0"


def catalog(path: Path, *cves: str, version: str = "2026.12.01") -> Path:
    doc = {"catalogVersion": version, "vulnerabilities": [{"cveID": c} for c in cves]}
    path.write_text(json.dumps(doc))
    return path


def test_one_finding_per_purl_and_vulnerability_at_its_highest_severity(tmp_path: Path) -> None:
    kev = KevCatalog(str(catalog(tmp_path / "kev.json", "CVE-2023-4911"))).current()
    found = settle(
        [
            RawFinding(TOOLS, "GHSA-cx63-2mw6-8hw5", "medium"),
            RawFinding(TOOLS, "GHSA-cx63-2mw6-8hw5", "high", fixed_version="70.0.0"),
            RawFinding(GLIBC, "DSA-5514-1", "high", aliases=("CVE-2023-4911",)),
            RawFinding(GLIBC, "CVE-2023-0000", "critical"),
        ],
        kev,
    )
    got = [(f.purl, f.vuln_id, f.severity, f.kev) for f in found]
    assert got == [  # KEV first (by its CVE alias), then by severity
        (GLIBC, "DSA-5514-1", "high", True),
        (GLIBC, "CVE-2023-0000", "critical", False),
        (TOOLS, "GHSA-cx63-2mw6-8hw5", "high", False),
    ]
    assert found[2].fixed_version == "70.0.0"


def test_the_catalog_is_read_again_when_it_changes_and_a_bad_one_lists_nothing(
    tmp_path: Path,
) -> None:
    path = catalog(tmp_path / "kev.json", "CVE-2023-4911")
    kev = KevCatalog(str(path))
    policy = Policy("critical")
    assert policy.revision(kev.current()) == "failOn=critical;kev=2026.12.01"
    f = RawFinding(GLIBC, "CVE-2023-4863", "medium")
    assert not settle([f], kev.current())[0].kev
    catalog(path, "CVE-2023-4911", "CVE-2023-4863", version="2026.12.02")
    os.utime(path, ns=(1, 2))  # a new stamp, whatever the clock's resolution
    (listed,) = settle([f], kev.current())
    assert listed.kev and policy.revision(kev) == "failOn=critical;kev=2026.12.02"
    assert policy.decide([(listed.severity, listed.kev)]) == "FAIL"  # KEV fails at any severity
    path.write_text("{not json")
    assert kev.current().ids == frozenset() and kev.version == "unreadable"
    path.unlink()
    assert kev.current().version == "missing"
    assert KevCatalog(None).current().version == "none"


def test_the_policy_threshold() -> None:
    assert Policy("high").decide([("medium", False)]) == "PASS"
    assert Policy("high").decide([("high", False)]) == "FAIL"
    assert Policy("low").decide([("low", False)]) == "FAIL"
    assert Policy().decide([]) == "PASS"
