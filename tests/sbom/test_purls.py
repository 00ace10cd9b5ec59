"""Purl normalisation: one canonical string per package, clear errors for garbage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamproc.sbom import purls as purls_module
from streamproc.sbom.purls import (
    MAX_KEYS_PER_QUERY,
    NormalizedPurl,
    PurlError,
    TooManyKeysError,
    check_component,
    check_key_count,
    check_parseable,
    is_product_key,
    normalize_image_purls,
    normalize_purl,
)


@pytest.mark.parametrize(
    ("raw", "purl", "product"),
    [
        (
            "pkg:deb/debian/openssl@3.0.11-1~deb12u2?distro=bookworm&arch=amd64",
            "pkg:deb/debian/openssl@3.0.11-1~deb12u2?arch=amd64&distro=bookworm",
            "pkg:deb/debian/openssl",
        ),
        ("pkg:DEB/debian/openssl", "pkg:deb/debian/openssl", "pkg:deb/debian/openssl"),
        ("pkg:pypi/Django_Rest@3.0", "pkg:pypi/django-rest@3.0", "pkg:pypi/django-rest"),
        (
            "pkg:npm/@angular/core@16.0.0",
            "pkg:npm/%40angular/core@16.0.0",
            "pkg:npm/%40angular/core",
        ),
        ("pkg:github/Foo/Bar@v1#src/x", "pkg:github/foo/bar@v1#src/x", "pkg:github/foo/bar"),
        (
            "pkg:maven/org.apache.commons/commons-text@1.10.0?type=jar&classifier=sources",
            "pkg:maven/org.apache.commons/commons-text@1.10.0?classifier=sources&type=jar",
            "pkg:maven/org.apache.commons/commons-text",
        ),
        ("pkg:deb/debian/bash@1%3A5.2", "pkg:deb/debian/bash@1:5.2", "pkg:deb/debian/bash"),
        ("pkg://deb/debian/curl@8", "pkg:deb/debian/curl@8", "pkg:deb/debian/curl"),
        ("pkg:deb/debian/curl@", "pkg:deb/debian/curl", "pkg:deb/debian/curl"),
    ],
)
def test_canonical_forms(raw: str, purl: str, product: str) -> None:
    assert normalize_purl(raw) == NormalizedPurl(purl, product)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("openssl", "scheme"),
        ("", "empty"),
        ("pkg:", "type"),
        ("pkg:deb/", "name"),
        ("pkg:1deb/x", "type"),
        ("pkg:deb/debian/%zz", "percent-encoding"),
        ("pkg:deb/debian/%ff", "UTF-8"),
        ("pkg:deb/debian/a\x00b", "control"),
        ("pkg:deb/debian/x?arch=amd64&ARCH=i386", "duplicate qualifier"),
        ("pkg:deb/debian/x?arch", "qualifier"),
        ("pkg:generic/a%2Fb", "%2F"),
        ("pkg:generic/" + "a" * 5000, "longer"),
    ],
)
def test_errors_carry_purl_and_reason(raw: str, reason: str) -> None:
    with pytest.raises(PurlError) as info:
        normalize_purl(raw)
    assert reason in info.value.reason
    assert isinstance(info.value, ValueError)


def test_non_string_is_rejected() -> None:
    with pytest.raises(PurlError, match="expected a string"):
        normalize_purl(42)  # type: ignore[arg-type]


def test_image_purls_all_or_nothing() -> None:
    ok = normalize_image_purls(["pkg:pypi/a@1", "pkg:pypi/B@2"])
    assert [n.purl for n in ok] == ["pkg:pypi/a@1", "pkg:pypi/b@2"]
    with pytest.raises(PurlError) as info:
        normalize_image_purls(["pkg:pypi/a@1", "nope", "pkg:%"])
    assert info.value.purl == "nope"
    assert "#1" in info.value.reason


def test_product_key_detection() -> None:
    assert is_product_key(normalize_purl("pkg:deb/debian/openssl"))
    assert not is_product_key(normalize_purl("pkg:deb/debian/openssl?arch=amd64"))
    assert not is_product_key(normalize_purl("pkg:deb/debian/openssl@1"))


def test_key_limit() -> None:
    check_key_count(MAX_KEYS_PER_QUERY)
    with pytest.raises(TooManyKeysError, match="at most 100000"):
        check_key_count(MAX_KEYS_PER_QUERY + 1)


_segment = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=8
)


@given(
    ptype=st.sampled_from(["deb", "pypi", "npm", "generic", "maven", "golang"]),
    ns=st.none() | _segment,
    name=_segment,
    version=st.none() | _segment,
    quals=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), _segment),
)
def test_normalisation_is_idempotent(
    ptype: str, ns: str | None, name: str, version: str | None, quals: dict[str, str]
) -> None:
    from packageurl import PackageURL

    try:
        raw = PackageURL(ptype, ns, name, version, quals).to_string()
    except Exception:
        return  # packageurl itself cannot build it
    try:
        n = normalize_purl(raw)
    except PurlError:
        return  # refusing is fine; what we accept must be stable
    assert normalize_purl(n.purl) == n
    assert normalize_purl(n.product_key) == NormalizedPurl(n.product_key, n.product_key)


@settings(max_examples=200, deadline=None)
@given(st.from_regex(purls_module._FAST, fullmatch=True))
def test_fast_path_accepts_only_what_packageurl_parses(s: str) -> None:
    """The fold's ~1 µs check must never let through a purl the full parser refuses."""
    query = s.partition("#")[0].partition("?")[2]
    names = [q.partition("=")[0] for q in query.split("&")] if query else []
    if len(names) != len(set(names)):
        with pytest.raises(PurlError, match="duplicate qualifier"):
            check_parseable(s)
        return
    check_parseable(s)
    normalize_purl(s)  # must not raise either


@pytest.mark.parametrize(
    ("purl", "key", "reason"),
    [
        ("pkg:deb/debian/openssl@3?arch=amd64", "pkg:deb/debian/openssl", None),
        ("pkg:npm/%40angular/core@16.0.0", "pkg:npm/%40angular/core", None),
        ("pkg:generic/busybox", "pkg:generic/busybox", None),
        ("pkg:deb/debian/openssl@3", "pkg:deb/debian/openssl-dev", "version-less prefix"),
        ("pkg:deb/debian/%zz@1", "pkg:deb/debian/%zz", "percent-encoding"),
        ("deb/openssl@1", "deb/openssl", "scheme"),
    ],
)
def test_check_component(purl: str, key: str, reason: str | None) -> None:
    if reason is None:
        check_component(purl, key)
    else:
        with pytest.raises(PurlError, match=reason):
            check_component(purl, key)
