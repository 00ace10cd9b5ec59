"""Every response bounded by its page, not by history: storms of 3,000 exports each — Feedser
and Vexer export events on a real nats-server, coalesced by the real planner into one run per
source and window — leave each run's view a few kilobytes (how many exports, the first few,
the specification's singular ids), ``GET /runs/{id}/exports`` pages through all 3,000 of
each, and the default page of ``GET /runs`` holds every run within 256 KB."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.gateway.api.query import PAGE_BYTES
from streamproc.ids import derive_id
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from tests.helpers import env_configuration, mint_token

STORM = 3_000
DEBOUNCE_S = 5
TENANT = "demo"
pytestmark = pytest.mark.slow


def export_event(sys_: System, source: str, export_id: str) -> Envelope:
    """An export as the gateway records a delivery of it (``streamproc/gateway/webhooks``)."""
    payload: p.Payload
    if source == "feedser":
        payload = p.FeedserExport(
            export_id=export_id, changed_product_keys=["pkg:pypi/setuptools"], source=source
        )
        kind = "export.feedser"
    else:
        claim = p.ChangedClaim(product_key="pkg:deb/debian/openssl", vuln_id="CVE-2023-5678",
                               status="not_affected→affected")  # fmt: skip
        payload = p.VexerExport(export_id=export_id, changed_claims=[claim], source=source)
        kind = "export.vexer"
    assert sys_.clock is not None
    return new_event(kind, TENANT, payload, sys_.clock.now(),
                     event_id=derive_id(source, export_id, TENANT))  # fmt: skip


async def test_storms_of_3000_exports_keep_every_response_bounded(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", str(DEBOUNCE_S))
    settings = Settings(
        configuration=env_configuration(),
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        prefix=prefix,
        http_port=free_port(),
    )
    settings = prepare_dev_auth(settings).settings
    sys_ = System(settings, ["gateway", "planner"])
    await sys_.start()
    try:
        assert sys_.publisher is not None
        api = f"{sys_.http_url}/api/v1/scheduler"
        tok = await asyncio.to_thread(mint_token, settings.data_dir / "dev" / "issuer.jwk")
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {tok}"}) as http:

            async def get(path: str) -> tuple[Any, int]:
                async with http.get(api + path) as r:
                    raw = await r.read()
                    assert r.status == 200, raw
                    return await r.json(), len(raw)

            async def runs_of(source: str, n: int) -> list[dict[str, Any]]:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    items = (await get(f"/runs?trigger={source}&limit=500"))[0]["items"]
                    if len(items) >= n:
                        return items  # type: ignore[no-any-return]
                    await asyncio.sleep(0.1)
                raise AssertionError(f"{source}: fewer than {n} runs within 60 s")

            sent: dict[str, list[str]] = {"feedser": [], "vexer": []}
            # The first export of each source, after a quiet spell, is planned at once.
            await sys_.publisher.publish_events(
                [export_event(sys_, s, f"{s}-lead") for s in ("feedser", "vexer")]
            )
            for window in range(2):
                for source in ("feedser", "vexer"):
                    await runs_of(source, 1 + window)  # the run that opened this window
                # A storm: 3,000 exports of each source within the window it opened.
                storm = []
                for source in ("feedser", "vexer"):
                    ids = [f"2026-01-05T10:00:00.{window}-{source}-{i:05d}" for i in range(STORM)]
                    sent[source] += ids
                    storm += [export_event(sys_, source, x) for x in ids]
                await sys_.publisher.publish_events(storm)

            storms = []
            for source in ("feedser", "vexer"):
                runs = await runs_of(source, 3)
                counts = sorted(r["reason"]["exportCount"] for r in runs)
                assert counts == [1, STORM, STORM], (source, counts)
                storms += [r for r in runs if r["reason"]["exportCount"] == STORM]

            covered: set[str] = set()
            for run in storms:
                source = run["trigger"]
                view, size = await get(f"/runs/{run['id']}")
                assert size < 4_000, f"a run's view is {size} bytes"
                why = view["reason"]
                assert why[f"{source}ExportId"] == why["exports"][0].split(":", 1)[1]
                assert len(why["exports"]) == 5 and why["cursor"]
                first, _ = await get(f"/runs/{run['id']}/exports")  # the default page size
                assert len(first["items"]) == 50 and first["nextCursor"]
                seen: list[str] = []
                cursor = None
                pages = 0
                while True:
                    after = f"&cursor={cursor}" if cursor else ""
                    page, size = await get(f"/runs/{run['id']}/exports?limit=500{after}")
                    assert size <= PAGE_BYTES
                    seen += [x["exportId"] for x in page["items"]]
                    pages += 1
                    cursor = page["nextCursor"]
                    if not cursor:
                        break
                assert pages >= STORM // 500 and len(seen) == len(set(seen)) == STORM
                assert set(seen) <= set(sent[source]) and seen[0] == why[f"{source}ExportId"]
                assert seen[-1] == why["cursor"]
                covered |= set(seen)
            assert covered == set(sent["feedser"] + sent["vexer"]), "each export in one run"

            page, size = await get("/runs")  # the default page size
            assert len(page["items"]) == 6 and page["nextCursor"] is None
            assert size <= 256_000, f"GET /runs answered {size} bytes"
            cursors, _ = await get("/impact-cursors")
            assert cursors["feedserLastExportId"].startswith("2026-01-05T10:00:00.1-feedser")
            assert cursors["vexerLastExportId"].startswith("2026-01-05T10:00:00.1-vexer")
    finally:
        await sys_.close()
