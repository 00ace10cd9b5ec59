"""SBOM retention in both layouts, as operators run them: images indexed and removed with
``streamproc index add|remove``, ``STREAMPROC_SBOMS_RETENTION_S`` set, and the SBOM gone
from the store once the retention has passed.

- Every role in one process (``streamproc up``).
- The production layout: two planner processes on one NATS. Only the lease holder deletes;
  the standby folds the same references, deletes nothing, and takes over when the active
  one dies.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc.bus import objects
from streamproc.bus.fastclient import FastClient
from streamproc.cli import main
from streamproc.config import Settings
from streamproc.events.envelope import Envelope
from streamproc.names import sbom_bucket
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.roles import System
from streamproc.scanner.demo import DATA
from tests.helpers import env_configuration
from tests.planner.harness import events_of
from tests.role_helpers import wait_for

TTL = 1.5
SBOMS = sorted((DATA / "sboms").glob("*.json"))


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMPROC_SBOMS_RETENTION_S", "1")
    monkeypatch.setenv("STREAMPROC_LEASE_TTL_S", str(TTL))


async def _index(url: str, prefix: str, n: int, sbom: Path) -> None:
    argv = ["index", "add", "--nats-url", url, "--prefix", prefix, "--tenant", "acme",
            "--image", f"sha256:{n:064x}", "--repo", "ghcr.io/acme/app",
            "--sbom", str(sbom)]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0


async def _remove(url: str, prefix: str, n: int) -> None:
    argv = ["index", "remove", "--nats-url", url, "--prefix", prefix, "--tenant", "acme",
            "--image", f"sha256:{n:064x}"]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0


async def _gone(nc: FastClient, prefix: str, sbom: Path) -> bool:
    try:
        await objects.get(nc, sbom_bucket(prefix), objects.key_of(sbom.read_bytes()))
    except objects.Missing:
        return True
    except objects.ObjectError:
        return False  # its chunks were purged while we read them: the deletion is under way
    return False


async def _deleted(nc: FastClient, events: str) -> list[Envelope]:
    return await events_of(nc, events, "sbom.deleted")


async def _system(url: str, prefix: str, data: Path, roles: list[str], http: bool) -> System:
    settings = Settings(
        configuration=env_configuration(),
        data_dir=data,
        nats_url=url,
        prefix=prefix,
        node_id=data.name,
        http_port=free_port(),
    )
    system = System(settings, roles, http=http)
    try:
        await system.start()
    except BaseException:
        await system.close()
        raise
    return system


def _duplicates() -> float:
    got = REGISTRY.get_sample_value("streamproc_published_events_total", {"result": "duplicate"})
    return got or 0.0


async def test_every_role_in_one_process_deletes_the_sbom_after_the_retention(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    url = nats_server.url
    system = await _system(url, prefix, tmp_path / "up", ["gateway", "planner", "runner"], True)
    try:
        await _index(url, prefix, 1, SBOMS[0])
        await _index(url, prefix, 2, SBOMS[0])
        await _remove(url, prefix, 1)
        assert not await _gone(nc, prefix, SBOMS[0])
        before = time.time()
        await _remove(url, prefix, 2)  # the last image using it
        await wait_for(lambda: _gone(nc, prefix, SBOMS[0]), 20, "the SBOM deleted")
        assert time.time() - before >= 1.0, "deleted before its retention"
        (deleted,) = await wait_for(lambda: _deleted(nc, stream_names[0]), 10, "sbom.deleted")
        assert deleted.payload.sbom == objects.key_of(SBOMS[0].read_bytes())  # type: ignore[attr-defined]
    finally:
        await system.close()


async def test_only_the_planner_holding_the_lease_deletes_and_a_standby_takes_over(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    url, events = nats_server.url, stream_names[0]
    a = await _system(url, prefix, tmp_path / "pa", ["planner"], False)
    b = None
    try:
        await wait_for(lambda: a.leaders["planner"].state == "active", 10, "planner a active")
        b = await _system(url, prefix, tmp_path / "pb", ["planner"], False)
        assert b.leaders["planner"].state == "standby"
        dup = _duplicates()
        await _index(url, prefix, 1, SBOMS[0])
        await _remove(url, prefix, 1)
        await wait_for(lambda: _gone(nc, prefix, SBOMS[0]), 20, "the SBOM deleted by a")
        (first,) = await wait_for(lambda: _deleted(nc, events), 10, "sbom.deleted")
        assert first.hlc.endswith(":pa")
        await b.projectors["planner"].wait_for(a.projectors["planner"].applied, 10)
        assert _duplicates() == dup, "the standby published too (its copy was de-duplicated)"

        for lead in a.leaders.values():  # killed: the lease is not released, it expires
            lead.lease.revision = None
        await a.close()
        await wait_for(lambda: b.leaders["planner"].state == "active", TTL + 5, "b takes over")
        await _index(url, prefix, 2, SBOMS[1])
        await _remove(url, prefix, 2)
        await wait_for(lambda: _gone(nc, prefix, SBOMS[1]), 20, "the SBOM deleted by b")
        second = await wait_for(lambda: _n_deleted(nc, events, 2), 10, "the second sbom.deleted")
        assert second[1].hlc.endswith(":pb")
    finally:
        await a.close()
        if b is not None:
            await b.close()


async def _n_deleted(nc: FastClient, events: str, n: int) -> list[Envelope] | None:
    got = await _deleted(nc, events)
    return got if len(got) >= n else None
