"""Reading OSV records: strict JSON only (orjson), and a file that is not one is left out of
the database without stopping the load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streamproc.scanner.advisories import AdvisoryDb, AdvisoryError, parse_advisory

DATA = Path(__file__).resolve().parents[1] / "data"
RECORD = DATA / "osv" / "GHSA-r9hx-vwmv-q579.json"


def test_a_real_record_is_read() -> None:
    adv = parse_advisory(RECORD.read_bytes(), frozenset())
    assert adv.id == "GHSA-r9hx-vwmv-q579"
    assert adv.affected


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "GHSA-x", "modified": NaN}',  # the standard library's json takes NaN
        b"\xef\xbb\xbf" + RECORD.read_bytes(),  # and a byte order mark
        RECORD.read_bytes()[:-40],
        b"\xff",
    ],
    ids=["nan", "byte-order-mark", "truncated", "not-utf-8"],
)
def test_what_is_not_strict_json_is_not_an_advisory(raw: bytes) -> None:
    with pytest.raises(AdvisoryError, match=r"^not JSON: "):
        parse_advisory(raw, frozenset())


def test_the_load_leaves_out_a_file_that_is_not_json(tmp_path: Path) -> None:
    shutil.copy(RECORD, tmp_path / RECORD.name)
    (tmp_path / "broken.json").write_bytes(b'{"id": "GHSA-broken", "modified": NaN}')
    db = AdvisoryDb.load(tmp_path)
    assert set(db.advisories) == {"GHSA-r9hx-vwmv-q579"}
