"""FIRST's EPSS CSV in the advisory data: read (plain or gzipped), refused when it is not
one, carried on the scanner's findings and in the Feedser export's advisories."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from streamproc.scanner.advisories import AdvisoryDb, AdvisoryError, Epss, load_epss
from streamproc.scanner.catalog import Catalog
from streamproc.scanner.feedser import build_export

DATA = Path(__file__).parent.parent / "data"
EPSS = DATA / "epss.csv"


def test_reads_firsts_format_plain_and_gzipped(tmp_path: Path) -> None:
    plain = load_epss(EPSS)
    assert plain["CVE-2023-4911"] == Epss(0.74226, 0.98812, "2025-06-01")
    gz = tmp_path / "epss_scores-2025-06-01.csv.gz"
    gz.write_bytes(gzip.compress(EPSS.read_bytes()))
    assert load_epss(gz) == plain
    assert load_epss(None) == {} and load_epss(tmp_path / "missing.csv") == {}


@pytest.mark.parametrize(
    "text",
    [
        "cve,score\nCVE-1,0.1\n",
        "cve,epss,percentile\nCVE-1,high,0.2\n",
        "cve,epss,percentile\nCVE-1,2,0.5\n",
    ],
)
def test_refuses_what_is_not_an_epss_file(tmp_path: Path, text: str) -> None:
    f = tmp_path / "x.csv"
    f.write_text(text)
    with pytest.raises(AdvisoryError):
        load_epss(f)


def test_findings_and_the_feedser_export_carry_epss() -> None:
    db = AdvisoryDb.load(
        DATA / "osv", DATA / "kev.json", DATA / "osv" / "debian-sources.json", EPSS
    )
    catalog = Catalog(db)
    key, _ = catalog.add_sbom((DATA / "sboms" / "python-app.spdx23.json").read_bytes())
    findings = catalog.findings(key)
    assert findings and all(f.epss is not None for f in findings)
    body = build_export(db, {"advisories": {}})
    assert body is not None
    by = {a["vulnId"]: a for a in body["advisories"]}
    assert by["DSA-5514-1"]["epss"] == {
        "score": 0.74226,
        "percentile": 0.98812,
        "date": "2025-06-01",
    }
    without = build_export(AdvisoryDb.load(DATA / "osv"), {"advisories": {}})
    assert without is not None and all("epss" not in a for a in without["advisories"])
