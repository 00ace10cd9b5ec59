"""An SBOM made by a standard generator (``cyclonedx-py environment`` over a throwaway
virtual environment, at test time) has no usage data. Indexed with ``streamproc index add``,
it is found by the impact preview with the default ``usageOnly``, the reference scanner knows
it without a second upload, and a Feedser export touching one of its packages turns into a
``rescan.delta`` for it within seconds, at the planner's default settings (30 s debounce)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from pathlib import Path

import aiohttp
import pytest

from streamproc.cli import main
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import DATA, seed_demo
from tests.flows import stream_messages
from tests.helpers import env_configuration
from tests.scenarios.sboms import generated_sbom, has_usage_data, purls


async def test_a_generated_sbom_without_usage_data_is_impacted_and_scanned(
    nats_server: EmbeddedNats,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sbom = await asyncio.to_thread(generated_sbom, tmp_path)
    setuptools = next(p for p in purls(sbom) if p.startswith("pkg:pypi/setuptools@"))
    assert int(setuptools.split("@")[1].split(".")[0]) < 70, setuptools
    assert not has_usage_data(sbom), "no usage data in the SBOM"

    for name in ("STREAMPROC_GATEWAY_CONFIG", "STREAMPROC_FEEDSER_SECRET",
                 "STREAMPROC_PLANNER_DEBOUNCE_S", "STREAMPROC_PLANNER_USAGE_ONLY"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)  # the defaults: 30 s window, usageOnly
    scanner_port = free_port()
    monkeypatch.setenv("STREAMPROC_SCANNER_URL", f"http://127.0.0.1:{scanner_port}")
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
    )
    dev = prepare_dev_auth(settings)
    settings = dev.settings
    assert dev.issuer_key is not None
    system = System(settings, ["gateway", "planner", "runner", "scanner"])
    await system.start()
    monkeypatch.delenv("STREAMPROC_SCANNER_URL")  # the runner has it; seed_demo starts it
    demo = await seed_demo(system, scanner_port=scanner_port, configuration=env_configuration())
    digest = "sha256:" + hashlib.sha256(sbom.read_bytes()).hexdigest()
    try:
        nats = ["--nats-url", nats_server.url, "--prefix", prefix]
        argv = ["index", "add", *nats, "--tenant", "demo", "--image", digest,
                "--repo", "ghcr.io/acme/tiny-app", "--tag", "v1", "--sbom", str(sbom)]  # fmt: skip
        assert await asyncio.to_thread(main, argv) == 0
        assert "(usage unknown)" in capsys.readouterr().out

        argv = ["token", "issue", "--key", str(dev.issuer_key), "--tenant", "demo"]
        assert await asyncio.to_thread(main, argv) == 0
        token = capsys.readouterr().out.strip()
        api = f"{system.http_url}/api/v1/scheduler/preview/impact"
        body = {"productKeys": ["pkg:pypi/setuptools", "pkg:pypi/pip"]}  # usageOnly: default
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            for _ in range(200):
                async with s.post(api, json=body) as r:
                    assert r.status == 200, await r.text()
                    preview = await r.json()
                if digest in preview["sample"]:
                    break
                await asyncio.sleep(0.05)
        assert digest in preview["sample"] and preview["usageUnknown"] == preview["count"]
        assert preview["unmatched"] == []

        for name in ("GHSA-cx63-2mw6-8hw5.json", "DSA-5514-1.json"):
            shutil.copy(DATA / "osv" / name, demo.osv_dir / name)
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{demo.scanner_url}/advisories/reload") as r:
                assert r.status == 200
            body = {"imageDigest": digest, "tenant": "demo"}  # known from the log alone
            async with s.post(f"{demo.scanner_url}/reports", json=body) as r:
                assert r.status == 200, await r.text()
        argv = ["feedser", "export", "--osv", str(demo.osv_dir), "--kev", str(DATA / "kev.json"),
                "--debian-sources", str(demo.osv_dir.parent / "debian-sources.json"),
                "--url", system.http_url, "--secret", os.environ["STREAMPROC_FEEDSER_SECRET"],
                "--data-dir", str(settings.data_dir),  # its development issuer mints the token
                "--state", str(tmp_path / "feedser-state.json")]  # fmt: skip
        sent = time.monotonic()
        assert await asyncio.to_thread(main, argv) == 0
        notify = stream_names[2]
        delta = None
        while delta is None and time.monotonic() - sent < 5:
            for m in await stream_messages(system.nc, notify):
                data = m["data"]
                if str(m["subject"]).endswith(".rescan.delta") and data["imageDigest"] == digest:  # type: ignore[index]
                    delta = data
            await asyncio.sleep(0.05)
        assert delta is not None, "no rescan.delta for the image within 5 s of the export"
        found = {f["vulnId"] for f in delta["topFindings"]}  # type: ignore[index]
        assert "GHSA-cx63-2mw6-8hw5" in found
    finally:
        await demo.close()
        await system.close()
