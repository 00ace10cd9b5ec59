"""The README's ``make run`` flow as a reusable driver: gateway, planner and runner in one
process with the reference scanner; a signed Feedser export becomes a run with deltas.

Used by the scenario test and by the observability tests (metrics, spans) that need a real
end-to-end run to look at.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from streamproc.bus import jsapi
from streamproc.cli import main
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import DATA, Demo, seed_demo
from tests.helpers import env_configuration

NEW_ADVISORIES = ("GHSA-cx63-2mw6-8hw5.json", "DSA-5514-1.json")
EXPECTED_DELTAS = 2
"""setuptools' GHSA-cx63 lands in the two demo SBOMs that carry that setuptools version."""


@dataclass
class Flow:
    system: System
    demo: Demo
    settings: Settings
    notify: list[dict[str, object]]
    """Every message on the Notify stream once the run's summary is there."""


async def stream_messages(nc: object, stream: str) -> list[dict[str, object]]:
    info = await jsapi.stream_info(nc, stream)  # type: ignore[arg-type]
    assert info is not None
    out: list[dict[str, object]] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        doc = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})  # type: ignore[arg-type]
        data = base64.b64decode(doc["message"]["data"])
        out.append({"subject": doc["message"]["subject"], "data": msgspec.json.decode(data)})
    return out


@asynccontextmanager
async def feedser_run(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    before_export: Callable[[Demo], Awaitable[None]] | None = None,
) -> AsyncIterator[Flow]:
    """Start the roles and the demo, publish a Feedser export through the gateway, and
    yield once the run's ``run.summary`` is on the Notify stream."""
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")
    monkeypatch.setenv("STREAMPROC_FEEDSER_SECRET", "unused")
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "0")
    scanner_port = free_port()
    monkeypatch.setenv("STREAMPROC_SCANNER_URL", f"http://127.0.0.1:{scanner_port}")
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
        ops_port=free_port(),
    )
    settings = prepare_dev_auth(settings).settings
    system = System(settings, ["gateway", "planner", "runner", "scanner"])
    await system.start()
    demo = None
    try:
        monkeypatch.delenv("STREAMPROC_SCANNER_URL")  # the runner has it; seed_demo starts one
        demo = await seed_demo(system, scanner_port=scanner_port, configuration=env_configuration())
        for name in NEW_ADVISORIES:
            shutil.copy(DATA / "osv" / name, demo.osv_dir / name)
        import aiohttp

        async with aiohttp.ClientSession() as s, s.post(f"{demo.scanner_url}/advisories/reload"):
            pass
        if before_export is not None:
            await before_export(demo)
        secret = (settings.data_dir / "dev" / "feedser.secret").read_text().strip()
        argv = [
            "feedser", "export", "--osv", str(demo.osv_dir), "--kev", str(DATA / "kev.json"),
            "--debian-sources", str(demo.osv_dir.parent / "debian-sources.json"),
            "--url", system.http_url, "--secret", secret,
        ]  # fmt: skip
        monkeypatch.setenv("STREAMPROC_DATA_DIR", str(settings.data_dir))  # keeps its state
        assert await asyncio.to_thread(main, argv) == 0
        assert system.nc is not None
        notify = f"{prefix.upper()}_NOTIFY"
        for _ in range(300):
            msgs = await stream_messages(system.nc, notify)
            if any(str(m["subject"]).endswith(".run.summary") for m in msgs):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no run.summary within 30 s")
        yield Flow(system, demo, settings, msgs)
    finally:
        if demo is not None:
            await demo.close()
        await system.close()
