"""``scanner.kind = grype`` end to end, with no reference scanner: an SBOM made by
``cyclonedx-py`` is indexed with ``streamproc index add`` (kept in the SBOM store), a
Feedser export touches one of its packages, and the run's ``rescan.delta`` names what the
grype stand-in reported for the stored SBOM; the two settings an operator gives are the
environment variables docs/scanner.md shows."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from streamproc.cli import main
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.events import payloads as p
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import DATA
from tests.backends.conftest import DATA as RECORDED
from tests.backends.conftest import install_standins
from tests.flows import stream_messages
from tests.helpers import env_configuration
from tests.runner.harness import Planner
from tests.scenarios.sboms import generated_sbom, purls


def grype_output(setuptools: str) -> dict[str, object]:
    """Grype's JSON (a recorded run's document: descriptor, match layout) reporting
    GHSA-cx63-2mw6-8hw5 for the SBOM's setuptools."""
    doc = json.loads((RECORDED / "grype" / "ghsa-test.json").read_text())
    match = copy.deepcopy(doc["matches"][0])
    match["vulnerability"].update(
        id="GHSA-cx63-2mw6-8hw5", severity="High",
        dataSource="https://github.com/advisories/GHSA-cx63-2mw6-8hw5",
        fix={"versions": ["70.0.0"], "state": "fixed"},
    )  # fmt: skip
    match["relatedVulnerabilities"] = [{"id": "CVE-2024-6345"}]
    name, version = setuptools.removeprefix("pkg:pypi/").split("@")
    match["artifact"].update(name=name, version=version, type="python", purl=setuptools)
    doc["matches"] = [match]
    return doc  # type: ignore[no-any-return]


async def test_a_feedser_export_turns_into_deltas_naming_grypes_findings(
    nats_server: EmbeddedNats,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sbom = await asyncio.to_thread(generated_sbom, tmp_path)
    setuptools = next(p for p in purls(sbom) if p.startswith("pkg:pypi/setuptools@"))
    output = tmp_path / "grype.json"
    output.write_text(json.dumps(grype_output(setuptools)))
    bin_dir = install_standins(tmp_path / "bin")
    monkeypatch.setenv("STANDIN_OUTPUT", str(output))
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "calls.jsonl"))
    # The two settings of docs/scanner.md, and nothing of the reference scanner.
    monkeypatch.setenv("STREAMPROC_SCANNER_KIND", "grype")
    monkeypatch.setenv("STREAMPROC_SCANNER_GRYPE_PATH", str(bin_dir / "grype"))
    for name in ("STREAMPROC_SCANNER_URL", "STREAMPROC_GATEWAY_CONFIG",
                 "STREAMPROC_FEEDSER_SECRET", "STREAMPROC_PLANNER_DEBOUNCE_S"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
    )
    settings = prepare_dev_auth(settings).settings
    system = System(settings, ["gateway", "planner", "runner"])
    await system.start()
    digest = "sha256:" + hashlib.sha256(sbom.read_bytes()).hexdigest()
    try:
        assert system.publisher is not None
        await Planner(system.publisher, prefix).schedule("demo", "nightly", p.NotifyRule())
        nats = ["--nats-url", nats_server.url, "--prefix", prefix]
        argv = ["index", "add", *nats, "--tenant", "demo", "--image", digest,
                "--repo", "ghcr.io/acme/tiny-app", "--sbom", str(sbom)]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        osv = tmp_path / "osv"
        osv.mkdir()
        shutil.copy(DATA / "osv" / "GHSA-cx63-2mw6-8hw5.json", osv)
        argv = ["feedser", "export", "--osv", str(osv), "--kev", str(DATA / "kev.json"),
                "--url", system.http_url, "--secret", os.environ["STREAMPROC_FEEDSER_SECRET"],
                "--data-dir", str(settings.data_dir),  # its development issuer mints the token
                "--state", str(tmp_path / "feedser-state.json")]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        sent = time.monotonic()
        delta = verdict = None
        while (delta is None or verdict is None) and time.monotonic() - sent < 30:
            for m in await stream_messages(system.nc, stream_names[2]):
                data = m["data"]
                if str(m["subject"]).endswith(".rescan.delta") and data["imageDigest"] == digest:  # type: ignore[index]
                    delta = data
            for m in await stream_messages(system.nc, stream_names[0]):
                data = m["data"]
                if data.get("kind") == "verdict.recorded":  # type: ignore[union-attr]
                    verdict = data["payload"]  # type: ignore[index]
            await asyncio.sleep(0.1)
        assert delta is not None, "no rescan.delta for the image within 30 s of the export"
        assert delta["newHigh"] == 1 and delta["newCriticals"] == 0  # type: ignore[index]
        (top,) = delta["topFindings"]  # type: ignore[index]
        assert (top["purl"], top["vulnId"], top["severity"]) == (
            setuptools, "GHSA-cx63-2mw6-8hw5", "high",
        )  # fmt: skip
        assert verdict is not None
        assert verdict["scanner"] == "grype" and verdict["policyVerdict"] == "FAIL"
        assert verdict["revision"].startswith("grype-db v5 built 2023-08-31")
        assert verdict["findings"][0]["fixedVersion"] == "70.0.0"
        (call,) = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
        assert call["sha256"] == digest.removeprefix("sha256:")  # the stored SBOM, as sent
    finally:
        await system.close()
