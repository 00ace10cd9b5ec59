"""SBOM purl extraction on real generated SBOMs and on hand-made edge cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamproc.impact.index import ImpactIndex
from streamproc.impact.selector import Selector
from streamproc.sbom.image import build_image
from streamproc.sbom.parse import SbomError, parse_sbom, read_sbom
from streamproc.sbom.purls import normalize_image_purls
from tests.scenarios.sboms import GENERATOR

DATA = Path(__file__).parent.parent / "data" / "sboms"
FILES = {
    "debian-base.cdx15.json": ("cyclonedx", "1.5", "pkg:deb/debian/dpkg"),
    "tools-nested.cdx16.json": ("cyclonedx", "1.6", "pkg:pypi/msgspec"),
    "python-app.spdx23.json": ("spdx", "SPDX-2.3", "pkg:pypi/pyroaring"),
    "debian-libs.spdx22.json": ("spdx", "SPDX-2.2", "pkg:deb/debian/libc6"),
}


def raw_purls(doc: dict[str, Any]) -> list[str]:
    """Independent walk with the json module, to check the msgspec reader against."""
    if "bomFormat" in doc:
        out, todo = [], list(doc.get("components", []))
        while todo:
            comp = todo.pop()
            out += [comp["purl"]] if "purl" in comp else []
            todo += comp.get("components", [])
        return out
    return [
        ref["referenceLocator"]
        for pkg in doc["packages"]
        for ref in pkg.get("externalRefs", [])
        if ref["referenceType"] == "purl"
    ]


@pytest.mark.parametrize("version", ["1.6", "1.7"])
def test_cyclonedx_py_sboms_of_each_supported_version(tmp_path: Path, version: str) -> None:
    """cyclonedx-py, run now over this environment, as a user would run it (1.7: what Trivy
    and cyclonedx-py write when asked for the newest)."""
    out = tmp_path / f"env.cdx{version}.json"
    done = subprocess.run(
        [*GENERATOR[:-1], "environment", "--sv", version, sys.executable, "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sbom = read_sbom(out)
    assert (sbom.format, sbom.spec_version) == ("cyclonedx", version)
    assert sorted(sbom.purls) == sorted(set(raw_purls(json.loads(out.read_text()))))
    assert "pkg:pypi/msgspec" in {n.product_key for n in normalize_image_purls(sbom.purls)}


@pytest.mark.parametrize("name", sorted(FILES))
def test_real_sboms(name: str) -> None:
    fmt, version, product = FILES[name]
    sbom = read_sbom(DATA / name)
    assert (sbom.format, sbom.spec_version) == (fmt, version)
    expected = raw_purls(json.loads((DATA / name).read_text()))
    assert sorted(sbom.purls) == sorted(set(expected))
    assert 30 <= len(sbom.purls) <= 500
    normalized = normalize_image_purls(sbom.purls)
    assert product in {n.product_key for n in normalized}


def test_nested_cyclonedx_components_are_all_found() -> None:
    nested = read_sbom(DATA / "tools-nested.cdx16.json").purls
    assert any(p.startswith("pkg:deb/") for p in nested)
    assert any(p.startswith("pkg:pypi/") for p in nested)  # two levels below the top
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.4",
        "components": [
            {"name": "a", "purl": "pkg:pypi/a@1", "components": [
                {"name": "b", "components": [{"name": "c", "purl": "pkg:pypi/c@1"}]},
                {"name": "dup", "purl": "pkg:pypi/a@1"},
            ]},
            {"name": "no-purl"},
            {"name": "d", "purl": "pkg:pypi/d@1"},
        ],
    }  # fmt: skip
    assert parse_sbom(json.dumps(doc)).purls == ["pkg:pypi/a@1", "pkg:pypi/c@1", "pkg:pypi/d@1"]


def test_spdx_ignores_other_reference_types() -> None:
    doc = {
        "spdxVersion": "SPDX-2.3",
        "packages": [
            {"name": "x", "externalRefs": [
                {"referenceCategory": "SECURITY", "referenceType": "cpe23Type",
                 "referenceLocator": "cpe:2.3:a:x:x:1:*:*:*:*:*:*:*"},
                {"referenceCategory": "PACKAGE_MANAGER", "referenceType": "purl",
                 "referenceLocator": "pkg:npm/x@1"},
            ]},
            {"name": "y"},
        ],
    }  # fmt: skip
    assert parse_sbom(json.dumps(doc).encode()).purls == ["pkg:npm/x@1"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid JSON"),
        (b"<bom xmlns='http://cyclonedx.org/schema/bom/1.5'/>", "not valid JSON"),
        (b"[]", "not an object"),
        (b'{"name": "x"}', "neither CycloneDX"),
        (b'{"bomFormat": "SWID"}', "unknown bomFormat"),
        (b'{"bomFormat": "CycloneDX", "specVersion": "1.3"}', "supported: 1.4, 1.5, 1.6, 1.7"),
        (b'{"spdxVersion": "SPDX-2.1"}', "supported: SPDX-2.2, SPDX-2.3"),
        (b'{"@context": "https://spdx.org/rdf/3.0.1/spdx-context.jsonld"}', "SPDX 3"),
        (
            b'{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": [{"purl": 1}]}',
            "$.components[0].purl",
        ),
        (b'{"spdxVersion": "SPDX-2.3", "packages": {}}', "malformed SPDX"),
    ],
)
def test_clear_errors(data: bytes, message: str) -> None:
    with pytest.raises(SbomError) as info:
        parse_sbom(data)
    assert message in str(info.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "image.sbom.json"
    bad.write_text('{"hello": "world"}')
    with pytest.raises(SbomError, match=r"image\.sbom\.json: neither"):
        read_sbom(bad)


def test_sbom_to_index_end_to_end() -> None:
    """An SBOM read from disk is queryable by product key and exact purl."""
    ix = ImpactIndex()
    for i, name in enumerate(sorted(FILES)):
        purls = read_sbom(DATA / name).purls
        ix.index_image(build_image(tenant="acme", digest=f"sha256:{i}", purls=purls))
    sel = Selector(tenant="acme")
    assert ix.resolve_by_purls(["pkg:pypi/msgspec"], usage_only=False, selector=sel).count == 2
    debs = read_sbom(DATA / "debian-base.cdx15.json").purls
    r = ix.resolve_by_purls(
        [debs[0], "pkg:deb/debian/not-installed-here"], usage_only=False, selector=sel
    )
    assert r.count >= 1
    assert r.unmatched == ["pkg:deb/debian/not-installed-here"]
