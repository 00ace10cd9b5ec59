"""The ``feeds`` role on a real nats-server with real RocksDB: an OSV directory becomes one
Feedser export per tenant, planned as a webhook's is; nothing new is recorded for an
unchanged directory, by the same process, by a replacement with a fresh state directory, or
by a second instance (the lease); an unreadable directory or a malformed advisory is logged
and skipped, and the role goes on."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamproc import metrics
from streamproc.config import Settings
from streamproc.devsetup import prepare_dev_auth
from streamproc.events.envelope import Envelope, new_event
from streamproc.events.payloads import FeedserExport, sourced_export
from streamproc.feeds.ledger import SOURCE
from streamproc.feeds.plan import plan
from streamproc.feeds.queries import LedgerQueries
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.recording.exports import revision_event_id
from streamproc.roles import System, rebuild
from streamproc.scanner.advisories import AdvisoryDb
from streamproc.state.store import RocksStore
from streamproc.status.report import assess, render
from tests.gateway.conftest import drop_streams
from tests.helpers import env_configuration, eventually, mint_token
from tests.runner.harness import events

DATA = Path(__file__).resolve().parents[1] / "data"
FIRST = ("GHSA-r9hx-vwmv-q579", "DSA-5514-1")
LATER = "GHSA-cx63-2mw6-8hw5"
TENANTS = ("demo", "globex")


def polls(result: str) -> float:
    value: float = metrics.FEEDS_POLLS.labels(result)._value.get()
    return value


async def a_poll_completes(result: str) -> None:
    """Until a poll that started after this call ends with ``result`` (two increments: the
    one running now may have started before)."""
    start = polls(result)
    await eventually(lambda: polls(result) >= start + 2, 30, f"two {result} polls")


def copy(osv: Path, *names: str) -> None:
    osv.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(DATA / f"osv/{name}.json", osv / f"{name}.json")


async def exports(system: System) -> list[Envelope]:
    assert system.nc is not None
    evs = await events(system.nc, system.settings.events_stream, "export.feedser")
    return [e for e in evs if isinstance(e.payload, FeedserExport) and e.payload.source == SOURCE]


def configure(monkeypatch: pytest.MonkeyPatch, osv: Path | None) -> None:
    if osv is None:
        monkeypatch.delenv("STREAMPROC_FEEDS_OSV_DIR", raising=False)
    else:
        monkeypatch.setenv("STREAMPROC_FEEDS_OSV_DIR", str(osv))
    monkeypatch.setenv("STREAMPROC_FEEDS_TENANTS", ",".join(TENANTS))
    monkeypatch.setenv("STREAMPROC_FEEDS_POLL_INTERVAL_S", "1")
    monkeypatch.setenv("STREAMPROC_FEEDS_KEV_FILE", str(DATA / "kev.json"))
    monkeypatch.setenv("STREAMPROC_FEEDS_DEBIAN_SOURCES", str(DATA / "osv/debian-sources.json"))
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", "")


@asynccontextmanager
async def running(
    url: str, prefix: str, data: Path, roles: list[str], node_id: str
) -> AsyncIterator[System]:
    settings = Settings(
        configuration=env_configuration(),
        data_dir=data,
        nats_url=url,
        prefix=prefix,
        http_port=free_port(),
        node_id=node_id,
    )
    if "gateway" in roles:
        settings = prepare_dev_auth(settings).settings
    system = System(settings, roles)
    await system.start()
    try:
        yield system
    finally:
        await system.close()


@pytest.fixture
async def dropped(nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[None]:
    yield
    await drop_streams(nats_server.url, prefix)


def advisories_of(e: Envelope) -> list[str]:
    assert isinstance(e.payload, FeedserExport)
    return [a.vuln_id for a in e.payload.advisories]


async def test_a_directory_becomes_exports_per_tenant_planned_as_a_webhooks(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    dropped: None,
) -> None:
    caplog.set_level(logging.WARNING, logger="streamproc.feeds.reactor")
    osv = tmp_path / "osv"
    configure(monkeypatch, osv)
    roles = ["gateway", "planner", "feeds"]
    async with running(nats_server.url, prefix, tmp_path / "a", roles, "feeds-a") as system:
        # The directory does not exist yet: logged, tried again, the role goes on.
        await a_poll_completes("failed")
        assert f"cannot read {osv}" in caplog.text
        assert await exports(system) == []
        copy(osv, *FIRST)
        (osv / "broken.json").write_text("{not json")
        got = await eventually(lambda: _n(exports(system), 2), 30, "one export per tenant")
        assert sorted(e.tenant for e in got) == sorted(TENANTS)
        assert all(sorted(advisories_of(e)) == sorted(FIRST) for e in got)
        assert f"{osv / 'broken.json'} left out: not JSON" in caplog.text
        ref = f"{SOURCE}:{got[0].payload.export_id}"  # type: ignore[union-attr]

        # Planned as a webhook's export is: a run whose reason names the export's ref.
        tok = await asyncio.to_thread(mint_token, system.settings.data_dir / "dev/issuer.jwk")
        api = f"{system.http_url}/api/v1/scheduler"
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {tok}"}) as http:

            async def planned() -> list[dict[str, Any]]:
                async with http.get(f"{api}/runs?trigger=feedser") as r:
                    assert r.status == 200
                    items: list[dict[str, Any]] = (await r.json())["items"]
                return [run for run in items if ref in run["reason"]["exports"]]

            (run,) = await eventually(planned, 30, "a run planned from the export")
            assert run["trigger"] == "feedser"

        await a_poll_completes("unchanged")
        assert len(await exports(system)) == 2, "no change, no export"

        copy(osv, LATER)  # one new advisory: one new export per tenant, of it alone
        got = await eventually(lambda: _n(exports(system), 4), 30, "the new advisory's exports")
        assert [advisories_of(e) for e in got[2:]] == [[LATER], [LATER]]
        ids = {e.payload.export_id for e in got[2:]}  # type: ignore[union-attr]
        assert len(ids) == 1, "one export, recorded for each tenant"
        await a_poll_completes("unchanged")
        assert len(await exports(system)) == 4

    # A replacement elsewhere (a fresh state directory) continues from the log; a replay
    # (`streamproc replay --role feeds`) rebuilds the same ledger.
    async with running(nats_server.url, prefix, tmp_path / "b", ["feeds"], "feeds-b") as system:
        await a_poll_completes("unchanged")
        assert len(await exports(system)) == 4, "nothing recorded again"
        assert system.nc is not None
        s = system.settings
        target = tmp_path / "replayed"
        await rebuild(
            system.nc, s.events_stream, "feeds", target, progress=False,
            configuration=s.configuration,
        )  # fmt: skip
        live = LedgerQueries(system.contexts["feeds"].store)
        replayed = RocksStore(target, read_only=True)
        try:
            for tenant in TENANTS:
                sent = LedgerQueries(replayed).sent(tenant)
                assert sent == live.sent(tenant) and sorted(sent) == sorted([*FIRST, LATER])
        finally:
            replayed.close()


async def test_two_instances_record_each_export_once(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dropped: None,
) -> None:
    osv = tmp_path / "osv"
    copy(osv, *FIRST)
    configure(monkeypatch, osv)
    url = nats_server.url
    async with (
        running(url, prefix, tmp_path / "a", ["feeds"], "feeds-a") as a,
        running(url, prefix, tmp_path / "b", ["feeds"], "feeds-b") as b,
    ):
        await eventually(lambda: _n(exports(a), 2), 30, "one export per tenant")
        await a_poll_completes("unchanged")
        copy(osv, LATER)
        await eventually(lambda: _n(exports(a), 4), 30, "the new advisory's exports")
        await a_poll_completes("unchanged")
        got = await exports(a)
        assert len(got) == 4, [(e.tenant, advisories_of(e)) for e in got]
        states = sorted(str(s.leaders["feeds"].state) for s in (a, b))
        assert states == ["active", "standby"]


async def test_a_crash_between_two_tenants_is_finished_for_the_other_alone(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dropped: None,
) -> None:
    """An instance recorded the export for the first tenant and died: the next one records
    the very same export (its exportId from the content) for the second, nothing for the
    first."""
    osv = tmp_path / "osv"
    configure(monkeypatch, osv)
    async with running(nats_server.url, prefix, tmp_path / "a", ["feeds"], "feeds-a") as system:
        await a_poll_completes("failed")  # no directory yet: nothing recorded
        staged = tmp_path / "staged"
        copy(staged, *FIRST)
        db = AdvisoryDb.load(staged, DATA / "kev.json", DATA / "osv/debian-sources.json")
        (only,) = plan(db, {TENANTS[0]: {}}).exports
        body = only.body
        event_id = revision_event_id(SOURCE, body.export_id, TENANTS[0], 1)
        assert system.publisher is not None and system.clock is not None
        await system.publisher.publish_event(
            new_event(
                "export.feedser",
                TENANTS[0],
                sourced_export(body, SOURCE),
                system.clock.now(),
                event_id=event_id,
            )
        )
        ledger = LedgerQueries(system.contexts["feeds"].store)
        await eventually(lambda: ledger.sent(TENANTS[0]), 30, "the first tenant's export folded")
        copy(osv, *FIRST)
        got = await eventually(lambda: _n(exports(system), 2), 30, "the second tenant's")
        assert [(e.tenant, e.payload.export_id) for e in got] == [  # type: ignore[union-attr]
            (TENANTS[0], body.export_id),
            (TENANTS[1], body.export_id),
        ]
        await a_poll_completes("unchanged")
        assert len(await exports(system)) == 2


async def test_without_a_directory_the_role_says_so_and_stays_healthy(
    nats_server: EmbeddedNats,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dropped: None,
) -> None:
    configure(monkeypatch, None)
    async with running(nats_server.url, prefix, tmp_path, ["feeds"], "feeds-a") as system:
        ctx = system.contexts["feeds"]
        await eventually(lambda: ctx.notes, 30, "the note")
        assert system.heartbeat is not None
        (beat,) = system.heartbeat.records(0)
        assert beat.notes == ["no OSV directory set (feeds.osv_dir): recording nothing"]
        report = assess([beat], ["feeds"], beat.updated_ms)
        assert report.ok and [i.health for i in report.instances] == ["ok"]
        assert f"note: feeds {beat.instance}: no OSV directory set" in render(report)


async def _n(got: Any, n: int) -> list[Envelope] | None:
    evs: list[Envelope] = await got
    return evs if len(evs) >= n else None
