"""Claims as sets: matching a finding's package, and what changed between versions."""

from __future__ import annotations

import pytest

from streamproc.vex.claims import Change, diff, image_of, matches
from streamproc.vex.model import Claim


@pytest.mark.parametrize(
    ("claim", "finding", "expected"),
    [
        ("pkg:pypi/jinja2@2.10", "pkg:pypi/jinja2@2.10", True),
        ("pkg:pypi/jinja2", "pkg:pypi/jinja2@2.10", True),  # every version
        ("pkg:pypi/jinja2@2.11", "pkg:pypi/jinja2@2.10", False),
        ("pkg:pypi/Jinja2@2.10", "pkg:pypi/jinja2@2.10", True),  # canonical names
        ("pkg:deb/debian/openssl@3.0.11-1", "pkg:deb/debian/openssl@3.0.11-1?arch=amd64", True),
        (
            "pkg:apk/wolfi/git@2.39.0-r1?arch=x86_64",
            "pkg:apk/wolfi/git@2.39.0-r1?arch=armv7",
            False,
        ),
        ("pkg:apk/wolfi/git@2.39.0-r1?arch=x86_64", "pkg:apk/wolfi/git@2.39.0-r1", False),
        ("pkg:npm/lodash@4.17.20", "pkg:pypi/lodash@4.17.20", False),
    ],
)
def test_matches(claim: str, finding: str, expected: bool) -> None:
    assert matches(claim, finding) is expected


def test_image_of() -> None:
    assert image_of("pkg:oci/alpine@sha256%3A124c7d27") == "sha256:124c7d27"
    assert image_of("pkg:oci/alpine@latest") is None
    assert image_of("pkg:pypi/jinja2@2.10") is None


def test_diff_new_changed_dropped_and_unchanged() -> None:
    a = Claim("pkg:pypi/a@1", "CVE-1", "not_affected", "component_not_present")
    b = Claim("pkg:pypi/b@1", "CVE-2", "under_investigation")
    c = Claim("pkg:pypi/c@1", "CVE-3", "affected")
    held = {a.key: a, b.key: b}
    b2 = Claim("pkg:pypi/b@1", "CVE-2", "not_affected", "vulnerable_code_not_present")
    changes = diff(held, [b2, c])
    assert changes == [
        Change(a, "not_affected", "affected", removed=True),
        Change(b2, "under_investigation", "not_affected"),
        Change(c, "affected", "affected"),
    ]
    assert [ch.transition for ch in changes] == [
        "not_affected→affected",
        "under_investigation→not_affected",
        "affected→affected",
    ]
    assert diff({a.key: a}, [a]) == []  # an identical re-send changes nothing
