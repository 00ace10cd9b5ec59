"""The README's `make run` flow, automated: gateway, real planner, runner and the reference
scanner in one process; a signed Feedser export (the real `feedser export` command) becomes
exactly the expected deltas."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.natsd.server import EmbeddedNats
from tests.flows import EXPECTED_DELTAS, feedser_run


async def test_feedser_export_becomes_deltas_through_the_real_planner(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    async with feedser_run(nats_server, prefix, tmp_path, monkeypatch) as flow:
        assert "gateway answered 202" in capsys.readouterr().out
        # the exporter's state is in the data directory, wherever it was run from
        assert (flow.settings.data_dir / "feedser-export.json").is_file()
        assert list(elsewhere.iterdir()) == []
        msgs = flow.notify
        deltas = [m for m in msgs if str(m["subject"]).endswith(".rescan.delta")]
        affected = {m["data"]["imageDigest"] for m in deltas}  # type: ignore[index]
        # setuptools' GHSA-cx63 lands in the two SBOMs that carry that setuptools version
        assert len(deltas) == len(affected) == EXPECTED_DELTAS, deltas
        assert all("GHSA-cx63-2mw6-8hw5" in str(m["data"]) for m in deltas)
        ready = [m for m in msgs if str(m["subject"]).endswith(".report.ready")]
        assert len(deltas) + len(ready) == len(flow.demo.images)
