"""The three formats' own documents, read: schema-checked, normalised to claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamproc.vex.documents import parse
from streamproc.vex.model import Claim, VexError

DATA = Path(__file__).parent.parent / "data" / "vex"


def load(name: str) -> bytes:
    return (DATA / name).read_bytes()


def test_openvex_spec_minimal_claims_both_architectures() -> None:
    doc = parse(load("openvex/spec-minimal.json"))
    assert doc.format == "openvex"
    assert doc.own_id == "https://openvex.dev/docs/example/vex-9fb3463de1b57"
    assert doc.version == "1"
    assert doc.claims == [
        Claim("pkg:apk/wolfi/git@2.39.0-r1?arch=armv7", "CVE-2023-12345", "fixed"),
        Claim("pkg:apk/wolfi/git@2.39.0-r1?arch=x86_64", "CVE-2023-12345", "fixed"),
    ]


def test_openvex_subcomponents_of_an_image_hold_in_that_image() -> None:
    doc = parse(load("openvex/go-vex-v0.2.0.json"))
    assert doc.statements == 5 and len(doc.claims) == 10 and doc.skipped_count == 0
    image = "sha256:124c7d2707904eea7431fffe91522a01e5a861a624ee31d03372cc1d138a3126"
    assert {c.image for c in doc.claims} == {image}
    na = [c for c in doc.claims if c.status == "not_affected"]
    assert {(c.purl, c.vuln_id, c.justification) for c in na} == {
        (f"pkg:apk/alpine/{p}@3.0.8-r3", cve, "vulnerable_code_not_present")
        for p in ("libssl3", "libcrypto3")
        for cve in ("CVE-2023-3446", "CVE-2023-3817")
    }


def test_openvex_without_the_required_fields_is_a_schema_violation() -> None:
    with pytest.raises(VexError) as e:
        parse(load("openvex/go-vex-v020-1.vex.json"))
    assert e.value.status == 422 and e.value.slug == "schema-violation"
    assert '"timestamp" is a required property' in e.value.detail


def test_openvex_unknown_status_names_the_field() -> None:
    doc = json.loads(load("openvex/spec-minimal.json"))
    doc["statements"][0]["status"] = "maybe"
    with pytest.raises(VexError) as e:
        parse(json.dumps(doc).encode())
    assert e.value.field == "$.statements[0].status"


def test_cyclonedx_bom_link_whose_fragment_is_a_purl() -> None:
    doc = parse(load("cyclonedx/bom-examples-vex.json"))
    assert doc.format == "cyclonedx"
    assert doc.claims == [
        Claim(
            "pkg:maven/com.fasterxml.jackson.core/jackson-databind@2.10.0?type=jar",
            "CVE-2020-25649",
            "not_affected",
            "code_not_reachable",
        )
    ]


def test_cyclonedx_refs_without_purls_are_skipped_with_reasons() -> None:
    doc = parse(load("cyclonedx/cisa-case-3-vex.json"))
    assert doc.statements == 19 and doc.claims == [] and doc.skipped_count == 19
    assert doc.skipped[0] == "vulnerabilities[0].affects[0]: component 'product-GHI' has no purl"
    other = parse(load("cyclonedx/use-case-9-vex.json"))
    assert other.claims == [] and "another BOM" in other.skipped[0]


def test_cyclonedx_states_map_to_the_five_statuses() -> None:
    doc = json.loads(load("cyclonedx/cisa-case-3-vex.json"))
    doc["metadata"]["component"]["purl"] = "pkg:generic/acme/product-ghi@1.0"
    claims = {c.vuln_id: c for c in parse(json.dumps(doc).encode()).claims}
    assert claims["CVE-2020-11896"].status == "under_investigation"  # in_triage
    assert claims["CVE-2020-11897"].status == "not_affected"
    assert claims["CVE-2020-11898"].status == "affected"  # exploitable


def test_cyclonedx_spec_version_without_vex() -> None:
    doc = json.loads(load("cyclonedx/bom-examples-vex.json"))
    doc["specVersion"] = "1.3"
    with pytest.raises(VexError) as e:
        parse(json.dumps(doc).encode())
    assert e.value.slug == "unsupported-version" and e.value.field == "$.specVersion"


def test_csaf_red_hat_vex_components_of_platforms() -> None:
    doc = parse(load("csaf/redhat-cve-2023-1370.json"))
    assert doc.format == "csaf" and doc.own_id == "CVE-2023-1370" and doc.version == "1"
    assert {c.vuln_id for c in doc.claims} == {"CVE-2023-1370"}
    by = {c.purl: c for c in doc.claims}
    crio = by["pkg:rpm/redhat/cri-o@1.23.5-15.rhaos4.10.git0bbb0d9.el7?arch=x86_64"]
    assert (crio.status, crio.justification) == ("not_affected", "vulnerable_code_not_present")
    assert {c.status for c in doc.claims} == {"not_affected", "fixed"}
    # the known_affected products are platform components named without a purl
    assert doc.skipped_count and all("has no purl" in s for s in doc.skipped)


def test_csaf_examples_without_purls_give_no_claims() -> None:
    doc = parse(load("csaf/oasis-2022-evd-uc-03-ms-001.json"))
    assert doc.statements == 19 and doc.claims == [] and doc.skipped_count == 19


def test_csaf_advisory_profile_is_not_vex() -> None:
    doc = json.loads(load("csaf/oasis-sec-vex-2022-0001.json"))
    doc["document"]["category"] = "csaf_base"
    with pytest.raises(VexError) as e:
        parse(json.dumps(doc).encode())
    assert e.value.slug == "not-vex" and e.value.field == "$.document.category"


def test_csaf_schema_violation() -> None:
    doc = json.loads(load("csaf/oasis-sec-vex-2022-0001.json"))
    del doc["document"]["tracking"]["version"]
    with pytest.raises(VexError) as e:
        parse(json.dumps(doc).encode())
    assert e.value.slug == "schema-violation" and e.value.field == "$.document.tracking"


@pytest.mark.parametrize(
    ("body", "slug"),
    [
        (b"{not json", "malformed-json"),
        (b'{"spdxVersion": "SPDX-2.3"}', "unknown-format"),
        (b"[]", "unknown-format"),
        (b'{"document": {"csaf_version": "2.1"}}', "unsupported-version"),
    ],
)
def test_what_is_not_a_vex_document(body: bytes, slug: str) -> None:
    with pytest.raises(VexError) as e:
        parse(body)
    assert e.value.slug == slug and 400 <= e.value.status < 500
