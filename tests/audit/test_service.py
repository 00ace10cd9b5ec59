"""Chain verification as the auditor's NATS service, asked by a gateway in another System
(the split layout) and in the same one (``up``): gateway auth and tenant isolation, the
service's 404 for a tenant without a chain, 503 with Retry-After when no auditor answers,
and no route on the auditor's own port (never a 500)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from streamproc import metrics
from streamproc.audit.dsse import Keyring
from streamproc.audit.service import Verifications, serve_verification
from streamproc.bus import services
from streamproc.bus.fastclient import FastClient
from streamproc.bus.services import ServiceFailure
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.gateway.remote import Remote
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.problems import ProblemError
from streamproc.queries import AUDITOR, VERIFY, ChainReport
from streamproc.roles import System
from tests.bus.test_services import discover
from tests.cluster.processes import gateway_config
from tests.gateway.harness import token
from tests.helpers import env_configuration, eventually

PATH = "/api/v1/scheduler/chain/verify"


@pytest.fixture
def gateway_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = gateway_config(tmp_path / "gw", ("acme", "globex"))
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", str(config))


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


async def get(
    url: str, tenant: str | None, query: str = "acme", **more: str
) -> tuple[int, dict, dict]:
    headers = {"Authorization": f"Bearer {token(tenant, 'scheduler.read')}"} if tenant else {}
    params = {"tenantId": query, **more}
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
    status, body, _ = await get(gateway.http_url, "acme", logView="maybe")
    assert status == 400 and body["field"] == "query.logView", body
    status, body, _ = await get(gateway.http_url, "acme", logView="on")
    assert status == 200 and body["verified"] is True, body
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


# ---------------------------------------------------------------------- bounded verification


class Chains:
    """A stand-in for the blocking verification: records who ran, when, and how many at
    once; each run blocks until released (a real thread, as the service runs it)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, bool]] = []
        self.running = 0
        self.most = 0
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, tenant: str, log_view: bool) -> ChainReport:
        self.running += 1
        self.most = max(self.most, self.running)
        self.runs.append((tenant, log_view))
        self.gate.wait(10)
        self.running -= 1
        return ChainReport(tenant=tenant, ok=True, entries=len(self.runs),
                                 head_chain_link=None, head_hlc=None, snapshots=0,
                                 snapshotted=0)  # fmt: skip


async def test_one_verification_at_a_time_and_identical_questions_share_one() -> None:
    chains = Chains()
    v = Verifications(chains, cooldown=0)
    try:
        chains.gate.clear()
        first = asyncio.create_task(v.ask("acme", False))
        await eventually(lambda: chains.runs, 5, "the first verification runs")
        # Arriving while it runs: they wait for one more verification, started after them.
        later = [asyncio.create_task(v.ask("acme", False)) for _ in range(3)]
        other = asyncio.create_task(v.ask("globex", False))
        await asyncio.sleep(0.05)
        chains.gate.set()
        reports = await asyncio.gather(first, *later, other)
        assert chains.runs == [("acme", False), ("acme", False), ("globex", False)]
        assert chains.most == 1, "never two at once"
        assert [r.entries for r in reports[1:4]] == [2, 2, 2], "the three shared the second"
    finally:
        await v.close()


async def test_a_tenant_waits_out_its_cooldown_and_others_go_first() -> None:
    chains = Chains()
    now = [100.0]
    v = Verifications(chains, cooldown=4, clock=lambda: now[0])
    try:
        chains.gate.clear()
        first = asyncio.create_task(v.ask("acme", False))
        await eventually(lambda: chains.runs, 5, "the first verification runs")
        now[0] += 2.0  # it takes 2 s: acme's next may start 8 s after it ended
        chains.gate.set()
        await first
        again = asyncio.create_task(v.ask("acme", False))
        other = asyncio.create_task(v.ask("globex", False))
        await other
        assert chains.runs == [("acme", False), ("globex", False)] and not again.done()
        now[0] += 8.0
        v.wake()
        await again
        assert chains.runs[-1] == ("acme", False)
    finally:
        await v.close()


async def test_waiting_is_bounded_per_tenant_and_in_all() -> None:
    chains = Chains()
    v = Verifications(chains, cooldown=0, per_tenant=2, waiting=3)
    try:
        chains.gate.clear()
        held = [asyncio.create_task(v.ask("acme", False)),
                asyncio.create_task(v.ask("acme", True))]  # fmt: skip
        await asyncio.sleep(0.05)
        with pytest.raises(ServiceFailure) as quota:
            await v.ask("acme", False)
        assert quota.value.status == 429 and quota.value.slug == "verify-quota"
        held.append(asyncio.create_task(v.ask("globex", False)))
        await asyncio.sleep(0.05)
        with pytest.raises(ServiceFailure) as busy:
            await v.ask("initech", False)
        assert busy.value.status == 503 and busy.value.slug == "busy"
        chains.gate.set()
        await asyncio.gather(*held)
        assert (await v.ask("initech", False)).tenant == "initech", "room again"
    finally:
        await v.close()


async def test_many_verify_requests_through_a_gateway_run_few_verifications(
    split: tuple[System, System],
) -> None:
    auditor, gateway = split
    await audit_something(auditor, "acme")
    ran = metrics.CHAIN_VERIFICATIONS.labels("acme")
    before = ran._value.get()
    answers = await asyncio.gather(*(get(gateway.http_url, "acme") for _ in range(4)))
    assert [s for s, _, _ in answers] == [200] * 4
    assert all(b["verified"] and b["entries"] == 3 for _, b, _ in answers)
    assert ran._value.get() - before <= 2, "joined, not one whole-chain pass each"
    answers = await asyncio.gather(*(get(gateway.http_url, "acme") for _ in range(12)))
    statuses = [s for s, _, _ in answers]
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 4, statuses
    for status, body, headers in answers:
        if status == 429:  # more than four of this tenant's questions waiting
            assert body["type"].endswith("verify-quota") and headers["Retry-After"] == "5"


async def test_no_error_body_shows_the_state_directory(
    nc: FastClient, prefix: str, tmp_path: Path
) -> None:
    state = tmp_path / "secret-state-dir" / "auditor"
    served = await serve_verification(nc, prefix, state, Keyring)
    subject = services.subject(prefix, AUDITOR, VERIFY)
    remote = Remote(nc, prefix, preview_timeout_s=5, verify_timeout_s=5)
    try:
        with pytest.raises(services.ServiceFailure) as missing:
            await services.call(nc, subject, b'{"tenant":"acme"}', 5)
        assert missing.value.status == 503 and "secret-state-dir" not in missing.value.detail
        state.mkdir(parents=True)
        (state / "CURRENT").write_text("MANIFEST-000009\n")  # RocksDB fails to open it: 500
        with pytest.raises(services.ServiceFailure) as broken:
            await services.call(nc, subject, b'{"tenant":"acme"}', 5)
        assert broken.value.status == 500
        assert "secret-state-dir" not in broken.value.detail, broken.value.detail
        with pytest.raises(ProblemError) as answered:
            await remote.verify("acme", False)
        problem = answered.value
        assert problem.status == 502 and "secret-state-dir" not in problem.detail
        assert "Error" not in problem.detail, "no exception names either"
    finally:
        await served.stop()
