"""``seed_demo``: the `make run` catalog, scanner and guide, on a real stack."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from streamproc.bus.fastclient import FastClient
from streamproc.bus.server import EmbeddedNats
from streamproc.runner.settings import RunnerSettings
from streamproc.scanner.demo import seed_demo
from tests.runner.harness import events, start_runner


async def test_seed_demo_starts_a_scanner_indexes_real_sboms_and_prints_a_guide(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: object,
) -> None:
    system = await start_runner(tmp_path, nats_server.url, prefix, RunnerSettings())
    demo = await seed_demo(system, scanner_url=None, scanner_port=0)
    try:
        assert demo.scanner is not None and "curl" in demo.guide and "feedser export" in demo.guide
        async with aiohttp.ClientSession() as s:
            stats = await (await s.get(f"{demo.scanner_url}/admin/stats")).json()
        assert stats["images"] == 4 and stats["advisories"] == 3
        indexed = await events(nc, stream_names[0], "image.indexed")
        assert {e.payload.digest for e in indexed} == set(demo.images)
        assert all(e.tenant == "demo" and e.payload.components for e in indexed)
        again = await seed_demo(system, scanner_url=demo.scanner_url)
        assert again.scanner is None
        assert len(await events(nc, stream_names[0], "image.indexed")) == 4, "seeded once"
    finally:
        await demo.close()
        await system.close()
