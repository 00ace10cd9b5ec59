"""A projection's deferred work (the impact index's merging) is done while no event waits,
and a clean stop leaves none, in a projector and in a role's process: real nats-server, real
RocksDB, the real impact projection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.impact import keys as K
from streamproc.impact import pending
from streamproc.impact.projection import ImpactProjection
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System
from streamproc.runtime.projector import Projector
from streamproc.state.store import MemoryStore, RocksStore, Store
from tests.helpers import env_configuration, eventually, publish_samples
from tests.impact.helpers import indexed, purl
from tests.impact.test_projection import fold, impact_digest

IMAGES = 60


@pytest.fixture(autouse=True)
def _small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero budget and one group a slice: each flush merges one group only."""
    monkeypatch.setattr(pending, "MERGE_SLICE", 1)


def events() -> list:
    return [
        indexed("t1", i, [(*purl(p, i % 3), p % 2 == 0) for p in range(i % 7, 40, 3)])
        for i in range(IMAGES)
    ]


def entries(store: Store) -> int:
    return sum(1 for _ in store.scan(K.NAMES_CF, K.PENDING))


def pending_gauge() -> float | None:
    return REGISTRY.get_sample_value("streamproc_impact_pending_images")


def plain_digest() -> str:
    store = MemoryStore()
    fold(store, events(), sizes=[16])
    return impact_digest(store)


async def started(
    nc: FastClient, publisher: Publisher, stream: str, state_dir: Path, batch: int
) -> tuple[int, RocksStore, ImpactProjection, Projector]:
    """The events published, and a projector of the impact projection merging one group a
    flush, started on them."""
    last = await publish_samples(publisher, events())
    store = RocksStore(state_dir)
    impact = ImpactProjection(max_bytes=None, warm_on_start=False, merge_budget_s=0.0)
    proj = Projector(nc, store, [impact], stream=stream, role="impact", batch=batch)
    await proj.start()
    return last, store, impact, proj


async def test_deferred_merging_finishes_while_the_stream_is_quiet(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    last, store, impact, proj = await started(nc, publisher, stream_names[0], state_dir, 16)
    task = asyncio.create_task(proj.run())
    try:
        await proj.wait_for(last)
        await eventually(lambda: not impact.has_deferred(), 20, "merged with no new event")
        assert entries(store) == 0
        assert impact_digest(store) == plain_digest()
    finally:
        proj.stop()
        await task
        store.close()


async def test_a_clean_stop_merges_what_is_left(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    last, store, impact, proj = await started(nc, publisher, stream_names[0], state_dir, IMAGES)
    while proj.applied < last:
        await proj.step()
    assert impact.has_deferred() and entries(store) > 0
    assert pending_gauge() == impact.index.pending_images > 0
    proj.stop()
    await proj.run()  # stopped already: only what a clean stop does
    assert not impact.has_deferred()
    assert pending_gauge() == 0
    assert entries(store) == 0
    assert impact_digest(store) == plain_digest()
    store.close()


async def test_a_role_stopped_cleanly_does_its_projectors_deferred_work(
    nats_server: EmbeddedNats,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The role's projector tasks are cancelled at a clean stop; the deferred work is then
    done by ``System.close`` itself, before the stores close."""
    last = await publish_samples(publisher, events())
    finished: list[str] = []
    real = Projector.finish

    def spy(self: Projector) -> None:
        finished.append(self.role)
        real(self)

    monkeypatch.setattr(Projector, "finish", spy)
    data = tmp_path / "data"
    settings = Settings(
        configuration=env_configuration(),
        data_dir=data,
        nats_url=nats_server.url,
        prefix=prefix,
        node_id="p",
    )
    system = System(settings, ["planner"], http=False)
    try:
        await system.start()
        await system.projectors["planner"].wait_for(last)
    finally:
        await system.close()
    assert finished == ["planner"]
    store = RocksStore(data / "state" / "planner")
    try:
        assert entries(store) == 0
    finally:
        store.close()
