"""Reading the directory for a poll: what cannot be read makes the poll fail (and be tried
again), never an empty database — a KEV file being replaced would otherwise export every KEV
mark as gone; a malformed advisory is left out with its path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streamproc.feeds.reactor import Unreadable, load_db
from streamproc.feeds.settings import FeedsSettings

DATA = Path(__file__).resolve().parents[1] / "data"


def settings(osv: Path, **files: Path) -> FeedsSettings:
    return FeedsSettings(
        osv_dir=str(osv), tenants=["acme"], **{k: str(v) for k, v in files.items()}
    )


def test_a_missing_kev_file_or_directory_fails_the_poll(tmp_path: Path) -> None:
    osv = tmp_path / "osv"
    with pytest.raises(Unreadable, match="No such file"):
        load_db(settings(osv), {})
    osv.mkdir()
    shutil.copy(DATA / "osv/GHSA-r9hx-vwmv-q579.json", osv)
    with pytest.raises(Unreadable, match=r"feeds\.kev_file"):
        load_db(settings(osv, kev_file=tmp_path / "kev.json"), {})
    (tmp_path / "epss.csv.gz").write_bytes(b"\x1f\x8b\x08\x00")  # a truncated gzip
    with pytest.raises(Unreadable):
        load_db(settings(osv, epss_file=tmp_path / "epss.csv.gz"), {})
    db = load_db(settings(osv, kev_file=DATA / "kev.json"), {})
    assert list(db.advisories) == ["GHSA-r9hx-vwmv-q579"]


def test_a_malformed_advisory_is_left_out_with_its_path(tmp_path: Path) -> None:
    osv = tmp_path / "osv"
    osv.mkdir()
    shutil.copy(DATA / "osv/GHSA-r9hx-vwmv-q579.json", osv)
    (osv / "broken.json").write_text("{not json")
    (osv / "no-id.json").write_text("{}")
    skipped: dict[Path, str] = {}
    db = load_db(settings(osv), skipped)
    assert list(db.advisories) == ["GHSA-r9hx-vwmv-q579"]
    assert sorted(p.name for p in skipped) == ["broken.json", "no-id.json"]
    assert skipped[osv / "no-id.json"] == "not an OSV record (no id)"
