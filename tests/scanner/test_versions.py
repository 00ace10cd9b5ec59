"""Version-range matching per ecosystem, on OSV event semantics and real advisories."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.scanner.advisories import AdvisoryDb, parse_advisory, severity_of
from streamproc.scanner.catalog import Catalog
from streamproc.scanner.versions import VersionError, affects, in_ranges, parse_version

DATA = Path(__file__).resolve().parents[1] / "data"


def rng(*events: dict[str, str], kind: str = "ECOSYSTEM") -> list[dict[str, object]]:
    return [{"type": kind, "events": list(events)}]


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("1.0~rc1", "1.0"),  # tilde sorts before everything, even the end
        ("1.0", "1.0+b1"),
        ("2.36-9", "2.36-9+deb12u3"),
        ("2.36-9+deb12u3", "2.36-9+deb12u14"),  # numeric, not lexical
        ("9.9", "1:0.1"),  # an epoch outranks any upstream version
        ("1.2.4-0.2", "1.2.4-0.2+deb12u1"),
        ("3.0.11-1~deb12u2", "3.0.11-1"),
        ("1.0a", "1.0b"),
    ],
)
def test_debian_order_follows_policy(lower: str, higher: str) -> None:
    assert parse_version("Debian:12", lower) < parse_version("Debian:12", higher)


def test_pep440_order() -> None:
    v = lambda s: parse_version("PyPI", s)  # noqa: E731
    assert v("70.0.0rc1") < v("70.0.0") < v("70.0.0.post1") < v("70.0.1")
    assert v("1.0.dev1") < v("1.0a1") < v("1.0")
    assert v("65.5.0") < v("65.5.1") and v("2!1.0") > v("9.0")
    with pytest.raises(VersionError):
        parse_version("PyPI", "not a version")
    with pytest.raises(VersionError):
        parse_version("Nonexistent", "1.0")


def test_osv_events_fixed_last_affected_limit_and_multiple_ranges() -> None:
    fixed = rng({"introduced": "0"}, {"fixed": "65.5.1"})
    assert in_ranges("PyPI", "65.5.0", fixed) and not in_ranges("PyPI", "65.5.1", fixed)
    window = rng({"introduced": "1.0.5"}, {"fixed": "3.9.2"})
    assert not in_ranges("PyPI", "1.0.4", window) and in_ranges("PyPI", "1.0.5", window)
    assert not in_ranges("PyPI", "3.14.5", window)
    last = rng({"introduced": "2.0"}, {"last_affected": "2.4"})
    assert in_ranges("PyPI", "2.4", last) and not in_ranges("PyPI", "2.4.1", last)
    two = rng({"introduced": "1.0"}, {"fixed": "1.2"}, {"introduced": "2.0"}, {"fixed": "2.3"})
    assert [in_ranges("PyPI", x, two) for x in ("0.9", "1.1", "1.5", "2.1", "2.3")] == [
        False, True, False, True, False,
    ]  # fmt: skip
    limit = rng({"introduced": "0"}, {"limit": "3.0"})
    assert in_ranges("PyPI", "2.9", limit) and not in_ranges("PyPI", "3.0", limit)
    semver = rng({"introduced": "1.2.0"}, {"fixed": "1.10.0"}, kind="SEMVER")
    assert in_ranges("npm", "1.9.0", semver) and not in_ranges("npm", "1.10.0", semver)
    git = rng({"introduced": "0"}, {"fixed": "deadbeef"}, kind="GIT")
    assert not in_ranges("PyPI", "1.0", git), "commit ranges cannot place a version"
    entry = {"package": {"ecosystem": "PyPI", "name": "x"}, "versions": ["0.3"], "ranges": []}
    assert affects(entry, "0.3") and not affects(entry, "0.4")


def test_debian_advisory_bounds_on_real_dsa_records() -> None:
    glibc = parse_advisory((DATA / "osv/DSA-5514-1.json").read_bytes(), frozenset())
    bookworm = next(e for e in glibc.affected if e["package"]["ecosystem"] == "Debian:12")
    assert affects(bookworm, "2.36-9")  # Debian 12.0 as released
    assert affects(bookworm, "2.36-9+deb12u2")
    assert not affects(bookworm, "2.36-9+deb12u3")  # the fix
    assert not affects(bookworm, "2.36-9+deb12u14")  # this machine
    webp = parse_advisory((DATA / "osv/DSA-5497-1.json").read_bytes(), frozenset())
    assert not affects(webp.affected[0], "1.2.4-0.2+deb12u1") and affects(
        webp.affected[0], "1.2.4-0.2"
    )


def test_severities_kev_and_real_sbom_matches() -> None:
    db = AdvisoryDb.load(DATA / "osv", DATA / "kev.json", DATA / "osv/debian-sources.json")
    adv = db.advisories
    assert adv["GHSA-r9hx-vwmv-q579"].severity == "high"  # CVSS 3.1 7.5
    assert adv["GHSA-5rjg-fvgr-3xxf"].severity == "high"  # CVSS 4.0 vector
    assert adv["GHSA-5h86-8mv2-jq9f"].severity == "medium"  # CVSS 3.1 5.9
    assert adv["GHSA-8q59-q68h-6hv4"].severity == "critical"  # CVSS 3.1 9.8 (PyYAML)
    assert adv["GHSA-j8r2-6x86-q33q"].severity == "medium"  # CVSS 3.1 6.1, scope changed
    assert adv["DSA-5514-1"].kev and adv["DSA-5514-1"].severity == "high"  # KEV, no CVSS
    assert not adv["GHSA-cx63-2mw6-8hw5"].kev
    assert severity_of({"database_specific": {"severity": "CRITICAL"}}, False) == "critical"
    assert severity_of({}, False) == "medium"
    cat = Catalog(db)
    found = {}
    for sbom in sorted((DATA / "sboms").glob("*.json")):
        key, _ = cat.add_sbom(sbom.read_bytes())
        found[sbom.name] = {(f.vuln_id, f.purl) for f in cat.findings(key)}
    setuptools = {
        (v, "pkg:pypi/setuptools@65.5.0")
        for v in ("GHSA-r9hx-vwmv-q579", "GHSA-cx63-2mw6-8hw5", "GHSA-5rjg-fvgr-3xxf")
    }
    assert found["python-app.spdx23.json"] == setuptools
    assert found["tools-nested.cdx16.json"] == setuptools
    assert found["debian-base.cdx15.json"] == set() and found["debian-libs.spdx22.json"] == set()
    # Debian binary packages are matched through their source package.
    assert db.package_key("pkg:deb/debian/libc6@2.36-9?arch=amd64") == ("Debian", "glibc", "2.36-9")
    assert "pkg:deb/debian/libc6" in db.product_keys(adv["DSA-5514-1"])
    assert db.package_key("pkg:pypi/PyNaCl@1.6.2") == ("PyPI", "pynacl", "1.6.2")
