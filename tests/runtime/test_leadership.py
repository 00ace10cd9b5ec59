"""Active/standby in-process: two planner (and two auditor) Systems with their own data
directories on one NATS. Only the lease holder acts; the standby takes over when the
active one dies (no release: the lease has to expire) and does the next piece of work."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc.audit import layout
from streamproc.audit.signing import build_keyring
from streamproc.audit.verify import verify_all
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.ids import export_run_id
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System
from streamproc.state.store import RocksStore
from tests.audit.helpers import chained_events, snapshot_events
from tests.helpers import env_configuration
from tests.role_helpers import (
    TENANT,
    drop_lease_bucket,
    planned,
    publish_export,
    publish_planner_inputs,
    take_lease,
    wait_for,
)

TTL = 1.5


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPROC_LEASE_TTL_S", str(TTL))
    monkeypatch.setenv("STREAMPROC_PLANNER_DEBOUNCE_S", "0")


async def _system(url: str, prefix: str, data: Path, role: str) -> System:
    settings = Settings(
        configuration=env_configuration(),
        data_dir=data,
        nats_url=url,
        prefix=prefix,
        node_id=data.name,
    )
    system = System(settings, [role], http=False)
    try:
        await system.start()
    except BaseException:
        await system.close()
        raise
    return system


async def _crash(system: System) -> None:
    """Stop as a killed process would: the lease is not released, it has to expire."""
    for lead in system.leaders.values():
        lead.lease.revision = None  # nothing left to release
    await system.close()


def _node(event_hlc: str) -> str:
    return event_hlc.rsplit(":", 1)[1]


def _duplicates() -> float:
    """Publishes JetStream de-duplicated, in this process: a standby redoing the active's
    work would show here (its events carry the same ids)."""
    got = REGISTRY.get_sample_value("streamproc_published_events_total", {"result": "duplicate"})
    return got or 0.0


async def _active(system: System, role: str) -> bool:
    return system.leaders[role].state == "active"


async def test_only_the_active_planner_plans_and_the_standby_takes_over(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events = stream_names[0]
    await publish_planner_inputs(publisher)
    a = await _system(nats_server.url, prefix, tmp_path / "pa", "planner")
    b = None
    try:
        await wait_for(lambda: _active(a, "planner"), 10, "planner a active")
        b = await _system(nats_server.url, prefix, tmp_path / "pb", "planner")
        assert b.leaders["planner"].state == "standby"

        dup = _duplicates()
        head = await publish_export(publisher, "fx-1")
        await wait_for(lambda: planned(nc, events), 10, "fx-1 planned")
        await b.projectors["planner"].wait_for(head, 10)
        await asyncio.sleep(1.0)  # several reactor passes of both
        assert _duplicates() == dup, "the standby published (its copies were de-duplicated)"
        runs = await planned(nc, events)
        assert [e.correlation_id for e in runs] == [export_run_id(TENANT, ["fx-1"])]
        assert _node(runs[0].hlc) == "pa"
        assert b.leaders["planner"].state == "standby"

        await _crash(a)
        died = time.monotonic()
        await wait_for(lambda: _active(b, "planner"), TTL + 2, "planner b takes over")
        took = time.monotonic() - died
        assert took < TTL + 1.0, took

        await publish_export(publisher, "fx-2")
        two = await wait_for(
            lambda: _planned_n(nc, events, 2), 10, "fx-2 planned by the new active"
        )
        assert two[1].correlation_id == export_run_id(TENANT, ["fx-2"])
        assert _node(two[1].hlc) == "pb"
        await asyncio.sleep(0.5)
        assert len(await planned(nc, events)) == 2, "exactly one run.planned per export"
    finally:
        await a.close()
        if b is not None:
            await b.close()
        await drop_lease_bucket(nc, prefix)


async def _planned_n(nc: FastClient, stream: str, n: int) -> list | None:  # type: ignore[type-arg]
    runs = await planned(nc, stream)
    return runs if len(runs) >= n else None


async def test_a_lost_lease_stops_the_reactors_until_it_is_back(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events = stream_names[0]
    await publish_planner_inputs(publisher)
    a = await _system(nats_server.url, prefix, tmp_path / "pa", "planner")
    try:
        lead = a.leaders["planner"]
        await wait_for(lambda: _active(a, "planner"), 10, "active")
        kv = lead.lease.kv
        assert lead.lease.revision is not None
        # another holder got the key (as after an expiry we slept through)
        await wait_for(lambda: take_lease(lead.lease), 10, "the lease taken by another")
        # noticed at the next renewal (every TTL/3), however late a loaded machine runs it
        await wait_for(lambda: _state(a, "standby"), 10, "the lease loss noticed")
        head = await publish_export(publisher, "fx-1")
        await a.projectors["planner"].wait_for(head, 10)
        await asyncio.sleep(1.0)
        assert await planned(nc, events) == [], "a standby does not plan"
        await kv.delete("planner")  # the other holder lets go
        await wait_for(lambda: planned(nc, events), 30, "planned after re-acquiring")
    finally:
        await a.close()
        await drop_lease_bucket(nc, prefix)


async def _state(system: System, want: str) -> bool:
    return system.leaders["planner"].state == want


async def test_the_standby_auditor_signs_once_the_active_one_is_gone(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMPROC_AUDIT_SIGNING_KEY", "11" * 32)  # the installation's key
    monkeypatch.delenv("STREAMPROC_AUDIT_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("STREAMPROC_AUDIT_BATCH_SIZE", "50")
    monkeypatch.setenv("STREAMPROC_AUDIT_BATCH_INTERVAL_S", "3600")
    events = stream_names[0]
    a = await _system(nats_server.url, prefix, tmp_path / "aa", "auditor")
    b = None
    try:
        await wait_for(lambda: _active(a, "auditor"), 10, "auditor a active")
        b = await _system(nats_server.url, prefix, tmp_path / "ab", "auditor")
        dup = _duplicates()
        await publisher.publish_events(chained_events(100, tenant="acme"))

        async def snapshots(n: int) -> list | None:  # type: ignore[type-arg]
            got = await snapshot_events(nc, events, prefix, "acme")
            return got if len(got) >= n else None

        await wait_for(lambda: snapshots(2), 15, "two snapshots by a")
        await b.projectors["auditor"].wait_for(a.projectors["auditor"].applied, 10)
        await asyncio.sleep(1.5)  # the standby's snapshot reactor would have run by now
        assert _duplicates() == dup, "the standby signed and published too"
        await _crash(a)
        died = time.monotonic()
        await wait_for(lambda: _active(b, "auditor"), TTL + 2, "auditor b takes over")
        assert time.monotonic() - died < TTL + 1.0
        await publisher.publish_events(chained_events(50, tenant="acme", first=100))
        await wait_for(lambda: snapshots(3), 15, "the third snapshot by b")
        await asyncio.sleep(0.5)
        signed = await snapshot_events(nc, events, prefix, "acme")
        assert [_node(s.hlc) for s in signed] == ["aa", "aa", "ab"]
        assert [s.payload.from_position for s in signed] == [0, 50, 100]
        head = signed[-1]
        await b.projectors["auditor"].wait_for(b.projectors["auditor"].head, 10)
        store = b.stores[0]
        h = layout.read_head(store, "acme")
        assert h is not None and h.snapshotted == h.entries == 150
        assert head.payload.to_position == 149
    finally:
        await a.close()
        if b is not None:
            await b.close()
        await drop_lease_bucket(nc, prefix)
    view = RocksStore(tmp_path / "ab" / "state" / "auditor", read_only=True)
    try:
        assert all(
            r.ok
            for r in verify_all(
                view, build_keyring(tmp_path / "ab", env=env_configuration().values)
            )
        )
    finally:
        view.close()
