"""Impact previews as the planner's NATS service: the answer from a real ImpactIndex,
scoped to the asking tenant; asked through a gateway in a System of its own; answered by
the active planner and a standby alike; 503 once no planner is left."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from msgspec.json import Decoder

from streamproc.bus.services import ServiceFailure
from streamproc.config import Settings
from streamproc.impact.index import ImpactIndex
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.planner.service import preview
from streamproc.queries import PreviewQuery, PreviewRequest, read_query
from streamproc.roles import System
from tests.cluster.processes import gateway_config
from tests.gateway.harness import token
from tests.helpers import env_configuration, eventually
from tests.planner.util import add_images, digest, lib
from tests.role_helpers import TENANT, publish_planner_inputs

URL = "/api/v1/scheduler/preview/impact"


def test_the_answer_is_the_asking_tenants_only() -> None:
    index = ImpactIndex()
    add_images(index, "t1", 30)
    add_images(index, "t2", 5)
    keys = [lib(0), lib(2), "pkg:npm/nothing"]
    mine = preview(index, PreviewQuery(tenant="t1", request=PreviewRequest(product_keys=keys)))
    theirs = preview(index, PreviewQuery(tenant="t2", request=PreviewRequest(product_keys=keys)))
    everything = preview(index, PreviewQuery(tenant="t1", request=PreviewRequest(sample_size=3)))
    assert everything.count == 30 and len(everything.sample) == 3
    assert mine.count > 0 and theirs.count > 0
    assert set(mine.sample) <= {digest("t1", n) for n in range(30)}
    assert set(theirs.sample) <= {digest("t2", n) for n in range(5)}
    assert "pkg:npm/nothing" in mine.unmatched and mine.unmatched_count >= 1
    with pytest.raises(ServiceFailure) as bad:
        read_query(Decoder(PreviewQuery), b'{"tenant": "no such tenant", "request": {}}')
    assert bad.value.status == 400 and bad.value.slug == "invalid-tenant"
    with pytest.raises(ServiceFailure) as undecodable:
        read_query(Decoder(PreviewQuery), b'{"tenant": "t1", "request": {"x": 1}}')
    assert undecodable.value.slug == "invalid-body"
    with pytest.raises(ServiceFailure) as unparsable:
        preview(index, PreviewQuery(tenant="t1", request=PreviewRequest(product_keys=["!"])))
    assert unparsable.value.status == 400 and unparsable.value.field == "$.productKeys"


def settings(tmp: Path, name: str, url: str, prefix: str) -> Settings:
    return Settings(
        configuration=env_configuration(),
        data_dir=tmp / name,
        nats_url=url,
        prefix=prefix,
        http_port=free_port(),
        node_id=name,
    )


@pytest.fixture
async def gateway(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[System]:
    config = gateway_config(tmp_path / "gw", (TENANT,))
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("STREAMPROC_LEASE_TTL_S", "1")
    system = System(settings(tmp_path, "gateway", nats_server.url, prefix), ["gateway"])
    await system.start()
    try:
        yield system
    finally:
        await system.close()


async def ask(gateway: System, body: dict[str, object]) -> tuple[int, dict, dict]:
    headers = {"Authorization": f"Bearer {token(TENANT, 'scheduler.read')}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(gateway.http_url + URL, json=body, headers=headers) as r,
    ):
        return r.status, await r.json(content_type=None), dict(r.headers)


async def test_previews_from_active_and_standby_planners_through_a_separate_gateway(
    gateway: System, tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    assert gateway.publisher is not None
    await publish_planner_inputs(gateway.publisher, images=20)
    planners = [
        System(settings(tmp_path, f"planner-{n}", nats_server.url, prefix), ["planner"])
        for n in "ab"
    ]
    for planner in planners:
        await planner.start()
    try:
        for planner in planners:
            await eventually(lambda p=planner: "planner" in p.served, 20, "serving previews")
        assert {p.leaders["planner"].state for p in planners} == {"active", "standby"}
        for _ in range(12):
            status, body, _ = await ask(gateway, {"productKeys": [lib(1)], "sampleSize": 2})
            assert status == 200, body
            assert body["count"] == 5 and len(body["sample"]) == 2  # lib1: images 1, 5, 9…
        counts = [p.served["planner"].service.stats().endpoints[0].num_requests for p in planners]
        assert sum(counts) == 12 and all(counts), counts
        status, body, _ = await ask(gateway, {"sampleSize": 101})
        assert status == 400  # the gateway's own validation, before asking
        status, body, _ = await ask(gateway, {"productKeys": ["!"]})
        assert status == 400 and body["field"] == "$.productKeys", body  # the planner's 400
        for planner in planners:
            await planner.close()
        began = time.monotonic()
        status, body, headers = await ask(gateway, {"productKeys": [lib(1)]})
        assert status == 503 and headers["Retry-After"] == "5", body
        assert time.monotonic() - began < 2
    finally:
        for planner in planners:
            await planner.close()
