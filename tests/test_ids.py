"""Identifiers: tenant validation, derived ids, UUIDv7 layout and order, subject tokens."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamproc.ids import (
    InvalidTenant,
    ascii_int,
    derive_id,
    subject_token,
    uuid7,
    validate_tenant,
)

# ---------------------------------------------------------------- tenants


@pytest.mark.parametrize(
    "tenant", ["a", "acme", "acme-prod", "team_7", "0", "-", "_", "a" * 128, "a-b_c-9"]
)
def test_valid_tenants(tenant):
    assert validate_tenant(tenant) == tenant


@pytest.mark.parametrize(
    "tenant",
    [
        "",
        "Acme",
        "ACME",
        "acme.prod",
        "acme prod",
        "a" * 129,
        "acme*",
        "acme>",
        "acme/x",
        "acmé",
        " acme",
        "acme\t",
    ],
)
def test_invalid_tenants(tenant):
    with pytest.raises(InvalidTenant, match="invalid tenant id"):
        validate_tenant(tenant)


@pytest.mark.parametrize("tenant", [None, 1, b"acme", ["acme"], 1.5])
def test_non_string_tenants(tenant):
    with pytest.raises(InvalidTenant):
        validate_tenant(tenant)


def test_invalid_tenant_is_a_value_error():
    assert issubclass(InvalidTenant, ValueError)


def test_tenant_with_trailing_newline_is_refused():
    with pytest.raises(InvalidTenant):
        validate_tenant("acme\n")


# ---------------------------------------------------------------- derive_id


def test_derive_id_is_deterministic_and_hex():
    a = derive_id("run", "acme", 42)
    assert a == derive_id("run", "acme", 42)
    assert re.fullmatch(r"[0-9a-f]{40}", a)
    assert a != derive_id("run", "acme", 43)
    assert a != derive_id("acme", "run", 42)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("ab", "c"), ("a", "bc")),
        (("abc",), ("ab", "c")),
        (("a", ""), ("a",)),
        (("", "a"), ("a",)),
        (("", ""), ("",)),
        ((), ("",)),
        (("a\x00", "b"), ("a", "\x00b")),
    ],
)
def test_derive_id_is_unambiguous_about_boundaries(left, right):
    assert derive_id(*left) != derive_id(*right)


@given(a=st.lists(st.text(max_size=6), max_size=4), b=st.lists(st.text(max_size=6), max_size=4))
def test_derive_id_differs_for_different_part_lists(a, b):
    assert (derive_id(*a) == derive_id(*b)) == (a == b)


# ---------------------------------------------------------------- uuid7

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_uuid7_format_version_variant():
    seen = set()
    for _ in range(500):
        u = uuid7()
        assert UUID_RE.match(u), u
        parsed = uuid.UUID(u)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        seen.add(u)
    assert len(seen) == 500


def test_uuid7_embeds_the_millisecond_and_orders_by_time(monkeypatch):
    clock = {"ns": 1_700_000_000_123 * 1_000_000}
    monkeypatch.setattr(time, "time_ns", lambda: clock["ns"])
    generated = []
    for step_ms in [0, 1, 1, 250, 1000, 1, 86_400_000]:
        clock["ns"] += step_ms * 1_000_000
        u = uuid7()
        assert int(u.replace("-", "")[:12], 16) == clock["ns"] // 1_000_000
        generated.append(u)
    assert sorted(generated) == generated
    assert len(set(generated)) == len(generated)


def test_uuid7_real_clock_orders_across_milliseconds():
    a = uuid7()
    time.sleep(0.003)
    b = uuid7()
    assert a < b


# ---------------------------------------------------------------- subject_token


@pytest.mark.parametrize("value", ["s1", "run-2024_01", "sha256:abc", "A" * 128, "x"])
def test_subject_token_keeps_safe_ids(value):
    assert subject_token(value) == value


UNSAFE_CHARS = (".", "*", ">", " ", "\t", "\n", "/")


@pytest.mark.parametrize(
    "value",
    [
        "a.b",
        "a*",
        "a>",
        "a b",
        "",
        "A" * 129,
        "pkg:npm/left-pad@1.0",
        "é",
        "\t",
        "reg.example.com/ns/img",
    ],
)
def test_subject_token_hashes_unsafe_ids(value):
    token = subject_token(value)
    assert token != value
    assert re.fullmatch(r"h-[0-9a-f]{32}", token)
    assert subject_token(value) == token
    assert not any(c in token for c in UNSAFE_CHARS)


@given(value=st.text(max_size=200))
def test_subject_token_output_is_always_a_safe_token(value):
    token = subject_token(value)
    assert 1 <= len(token) <= 128
    assert not any(c in token for c in (".", "*", ">", " "))
    assert subject_token(value) == token


def test_subject_token_distinguishes_unsafe_ids():
    assert subject_token("a.b") != subject_token("a.c")


def test_subject_token_hashes_trailing_newline():
    assert "\n" not in subject_token("abc\n")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("007", 7),
        ("1234567890123456789", 1234567890123456789),
        ("", None),
        ("\u00b2", None),
        ("1\u00b2", None),
        ("\u0663", None),
        ("\uff11", None),
        ("+1", None),
        ("-1", None),
        (" 1", None),
        ("1_0", None),
        ("12345678901234567890", None),
    ],
)
def test_ascii_int_reads_ascii_digits_only(text, value):
    assert ascii_int(text) == value
