"""The README's `make run` flow, automated: gateway, real planner, runner and the reference
scanner in one process; a signed Feedser export becomes exactly the expected deltas."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from streamproc.app import System
from streamproc.bus import jsapi
from streamproc.bus.server import EmbeddedNats, free_port
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.scanner.demo import DATA, seed_demo

NEW = ("GHSA-cx63-2mw6-8hw5.json", "DSA-5514-1.json")


async def notify_messages(nc: object, stream: str) -> list[dict[str, object]]:
    info = await jsapi.stream_info(nc, stream)  # type: ignore[arg-type]
    assert info is not None
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})  # type: ignore[arg-type]
        import base64

        out.append(
            {
                "subject": doc["message"]["subject"],
                "data": msgspec.json.decode(base64.b64decode(doc["message"]["data"])),
            }
        )
    return out


async def test_feedser_export_becomes_deltas_through_the_real_planner(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")
    monkeypatch.setenv("STREAMPROC_FEEDSER_SECRET", "unused")
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "0")
    scanner_port = free_port()
    monkeypatch.setenv("STREAMPROC_SCANNER_URL", f"http://127.0.0.1:{scanner_port}")
    http_port = free_port()
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix, http_port=http_port
    )
    prepare_dev_auth(settings)
    system = System(settings, ["gateway", "planner", "runner"])
    await system.start()
    demo = None
    try:
        monkeypatch.delenv("STREAMPROC_SCANNER_URL")  # the runner has it; seed_demo starts one
        demo = await seed_demo(system, scanner_port=scanner_port)
        for name in NEW:
            shutil.copy(DATA / "osv" / name, demo.osv_dir / name)
        assert demo.scanner is not None
        import aiohttp

        async with aiohttp.ClientSession() as s, s.post(f"{demo.scanner_url}/advisories/reload"):
            pass
        secret = (settings.data_dir / "dev" / "feedser.secret").read_text().strip()
        export = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "streamproc.cli", "feedser", "export",
             "--osv", str(demo.osv_dir), "--kev", str(DATA / "kev.json"),
             "--debian-sources", str(demo.osv_dir.parent / "debian-sources.json"),
             "--url", system.http_url, "--secret", secret,
             "--state", str(tmp_path / "feedser-state.json")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert export.returncode == 0, export.stderr
        assert "gateway answered 202" in export.stdout
        assert system.nc is not None
        notify = f"{prefix.upper()}_NOTIFY"
        for _ in range(200):
            msgs = await notify_messages(system.nc, notify)
            if any(m["subject"].endswith(".run.summary") for m in msgs):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no run.summary within 20 s")
        deltas = [m for m in msgs if m["subject"].endswith(".rescan.delta")]
        affected = {m["data"]["imageDigest"] for m in deltas}
        # setuptools' GHSA-cx63 lands in the two SBOMs that carry that setuptools version
        assert len(deltas) == len(affected) == 2, deltas
        assert all("GHSA-cx63-2mw6-8hw5" in str(m["data"]) for m in deltas)
        ready = [m for m in msgs if m["subject"].endswith(".report.ready")]
        assert len(deltas) + len(ready) == len(demo.images)
    finally:
        if demo is not None:
            await demo.close()
        await system.close()
