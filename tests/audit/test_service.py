"""Chain verification as the auditor's NATS service, asked by a gateway in another System
(the split layout) and in the same one (``up``): gateway auth and tenant isolation, the
service's 404 for a tenant without a chain, 503 with Retry-After when no auditor answers,
and no route on the auditor's own port (never a 500)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from streamproc.app import System
from streamproc.audit.dsse import Keyring
from streamproc.audit.service import serve_verification
from streamproc.bus import services
from streamproc.bus.fastclient import FastClient
from streamproc.bus.server import EmbeddedNats, free_port
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.queries import AUDITOR, VERIFY
from tests.bus.test_services import discover
from tests.cluster.processes import gateway_config
from tests.gateway.harness import token
from tests.helpers import eventually

PATH = "/api/v1/scheduler/chain/verify"


@pytest.fixture
def gateway_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = gateway_config(tmp_path / "gw", ("acme", "globex"))
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", str(config))


def settings(tmp: Path, name: str, url: str, prefix: str) -> Settings:
    return Settings(data_dir=tmp / name, nats_url=url, prefix=prefix, http_port=free_port(),
                    node_id=name)  # fmt: skip


@pytest.fixture
async def split(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, gateway_env: None
) -> AsyncIterator[tuple[System, System]]:
    """An auditor and a gateway, each a System of its own (own data dir, own connection)."""
    auditor = System(settings(tmp_path, "auditor", nats_server.url, prefix), ["auditor"])
    gateway = System(settings(tmp_path, "gateway", nats_server.url, prefix), ["gateway"])
    await auditor.start()
    await gateway.start()
    try:
        yield auditor, gateway
    finally:
        await gateway.close()
        await auditor.close()


async def audit_something(system: System, tenant: str = "acme") -> None:
    assert system.clock is not None and system.publisher is not None
    for i in range(3):
        event = new_event("schedule.paused", tenant, p.ScheduleStateChange(schedule_id=f"s{i}"),
                          system.clock.now())  # fmt: skip
        ack = await system.publisher.publish_event(event)
    await system.projectors["auditor"].wait_for(ack.seq, 10)


async def get(url: str, tenant: str | None, query: str = "acme") -> tuple[int, dict, dict]:
    headers = {"Authorization": f"Bearer {token(tenant, 'scheduler.read')}"} if tenant else {}
    params = {"tenantId": query}
    async with aiohttp.ClientSession() as http, http.get(url + PATH, params=params,
                                                         headers=headers) as r:  # fmt: skip
        json_body = "json" in r.headers.get("Content-Type", "")
        body = await r.json(content_type=None) if json_body else {"text": await r.text()}
        return r.status, body, dict(r.headers)


async def test_chain_verify_through_a_gateway_of_its_own(
    split: tuple[System, System], prefix: str
) -> None:
    auditor, gateway = split
    await audit_something(auditor)
    status, body, _ = await get(gateway.http_url, "acme")
    assert status == 200, body
    assert body["verified"] is True and body["tenantId"] == "acme" and body["entries"] == 3
    assert (await get(gateway.http_url, "globex"))[0] == 404  # another tenant's chain
    status, body, _ = await get(gateway.http_url, "globex", query="globex")
    assert status == 404 and "no audit chain" in body["detail"], body  # the service's 404
    assert (await get(gateway.http_url, None))[0] == 401
    status, body, _ = await get(gateway.http_url, "acme", query="not a tenant!")
    assert status == 400 and body["type"].endswith("invalid-tenant")
    # The auditor's own port has ops endpoints only: no chain route, never a 500.
    assert (await get(auditor.http_url, "acme"))[0] == 404
    assert gateway.nc is not None
    name = services.service_name(prefix, AUDITOR)
    (info,) = await discover(gateway.nc, "INFO", name)
    assert info["endpoints"][0]["subject"] == services.subject(prefix, AUDITOR, VERIFY)
    assert info["metadata"] == {"node": "auditor"}
    await auditor.close()  # no auditor left: 503 with Retry-After, at once
    began = time.monotonic()
    status, body, headers = await get(gateway.http_url, "acme")
    assert status == 503 and headers["Retry-After"] == "5", body
    assert body["type"].endswith("auditor-unavailable")
    assert time.monotonic() - began < 2


async def test_the_same_path_in_one_process(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, gateway_env: None
) -> None:
    system = System(settings(tmp_path, "up", nats_server.url, prefix), ["gateway", "auditor"])
    await system.start()
    try:
        await audit_something(system)
        status, body, _ = await get(system.http_url, "acme")
        assert status == 200 and body["verified"] is True, body
    finally:
        await system.close()


async def test_a_second_auditor_instance_shares_the_questions(
    tmp_path: Path, split: tuple[System, System], prefix: str, nats_server: EmbeddedNats
) -> None:
    auditor, gateway = split
    await audit_something(auditor)
    standby = System(settings(tmp_path, "standby", nats_server.url, prefix), ["auditor"])
    await standby.start()
    try:
        await standby.projectors["auditor"].wait_for(auditor.projectors["auditor"].applied, 10)
        await eventually(lambda: "auditor" in standby.served, 10, "the standby serves")
        answers = [await get(gateway.http_url, "acme") for _ in range(16)]
        assert all(s == 200 and b["entries"] == 3 for s, b, _ in answers)
        counts = [s.served["auditor"].service.stats().endpoints[0].num_requests
                  for s in (auditor, standby)]  # fmt: skip
        assert sum(counts) == 16 and all(counts), counts
    finally:
        await standby.close()


async def test_an_auditor_without_state_answers_503(
    nc: FastClient, prefix: str, tmp_path: Path
) -> None:
    served = await serve_verification(nc, prefix, tmp_path / "none", Keyring)
    try:
        subject = services.subject(prefix, AUDITOR, VERIFY)
        with pytest.raises(services.ServiceFailure) as failure:
            await services.call(nc, subject, b'{"tenant":"acme"}', 5)
        assert failure.value.status == 503 and failure.value.slug == "no-audit-state"
        with pytest.raises(services.ServiceFailure) as bad:
            await services.call(nc, subject, b'{"tenant":"a b"}', 5)
        assert bad.value.status == 400
    finally:
        await served.stop()
