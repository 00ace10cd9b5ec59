"""``seed_demo``: the `make run` catalog, scanner and guide, on a real stack."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from streamproc.bus import objects
from streamproc.bus.fastclient import FastClient
from streamproc.config import ConfigError, Settings
from streamproc.configfile.loader import environ
from streamproc.names import sbom_bucket
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System
from streamproc.scanner.demo import DATA, load_scanner_port, seed_demo
from tests.helpers import env_configuration, eventually
from tests.runner.harness import events


async def test_seed_demo_indexes_real_sboms_the_scanner_learns_from_the_log(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix, node_id="t")
    system = System(settings, ["scanner"], http=False)
    await system.start()
    demo = await seed_demo(system, scanner_url=None, scanner_port=0)
    try:
        assert demo.scanner is not None and "curl" in demo.guide and "feedser export" in demo.guide
        indexed = await events(nc, stream_names[0], "image.indexed")
        assert {e.payload.digest for e in indexed} == set(demo.images)
        assert all(e.tenant == "demo" and e.payload.components for e in indexed)
        assert all(e.payload.usage_known is False for e in indexed), "real SBOMs: unknown"
        async with aiohttp.ClientSession() as s:

            async def knows_all() -> bool:
                stats = await (await s.get(f"{demo.scanner_url}/admin/stats")).json()
                return bool(stats["images"] == 4 and stats["registeredImages"] == 0)

            await eventually(knows_all, what="the scanner folded the demo images")
            for digest in demo.images:  # by image digest and tenant, nothing uploaded
                body = {"imageDigest": digest, "tenant": "demo"}
                async with s.post(f"{demo.scanner_url}/reports", json=body) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["imageDigest"] == digest
            body = {"imageDigest": next(iter(demo.images)), "tenant": "other"}
            async with s.post(f"{demo.scanner_url}/reports", json=body) as r:
                assert r.status == 404, "another tenant's image is not this tenant's"
        again = await seed_demo(system, scanner_url=demo.scanner_url)
        assert again.scanner is None
        assert len(await events(nc, stream_names[0], "image.indexed")) == 4, "seeded once"
    finally:
        await demo.close()
        await system.close()


async def test_the_demo_scanner_needs_the_scanner_role(
    nats_server: EmbeddedNats, prefix: str, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path, nats_url=nats_server.url, prefix=prefix, node_id="t")
    system = System(settings, ["activity"], http=False)
    await system.start()
    try:
        with pytest.raises(ValueError, match="'scanner' role"):
            await seed_demo(system, scanner_url=None, scanner_port=0)
    finally:
        await system.close()


def test_up_demos_scanner_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMPROC_SCANNER_PORT", raising=False)
    assert load_scanner_port(environ()) == 8490
    monkeypatch.setenv("STREAMPROC_SCANNER_PORT", "9123")
    assert load_scanner_port(environ()) == 9123
    monkeypatch.setenv("STREAMPROC_SCANNER_PORT", "http")
    with pytest.raises(
        ConfigError, match=r"STREAMPROC_SCANNER_PORT\).*expected an integer, got 'http'"
    ):
        load_scanner_port(environ())


async def test_with_a_tool_kind_the_demo_keeps_every_sbom_and_starts_no_reference_scanner(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`make run` with ``scanner.kind = grype``: the runners evaluate the demo's SBOMs from
    the SBOM store, so each one is kept as the file holds it."""
    monkeypatch.setenv("STREAMPROC_SCANNER_KIND", "grype")
    monkeypatch.setenv("STREAMPROC_SCANNER_GRYPE_PATH", "/opt/grype/bin/grype")
    monkeypatch.delenv("STREAMPROC_SCANNER_URL", raising=False)
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path,
        nats_url=nats_server.url,
        prefix=prefix,
        node_id="t",
    )
    system = System(settings, ["activity"], http=False)  # no scanner role: none is needed
    await system.start()
    demo = await seed_demo(system, scanner_port=0)
    try:
        assert demo.scanner is None and "/reports" not in demo.guide
        assert "scanner.kind grype (/opt/grype/bin/grype)" in demo.guide
        assert "/advisories/reload" not in demo.guide and "feedser export" in demo.guide
        indexed = await events(nc, stream_names[0], "image.indexed")
        assert len(indexed) == 4
        for e in indexed:
            sent = (DATA / "sboms" / demo.images[e.payload.digest]).read_bytes()
            assert e.payload.sbom == objects.key_of(sent)
            assert await objects.get(nc, sbom_bucket(prefix), e.payload.sbom) == sent
    finally:
        await demo.close()
        await system.close()
