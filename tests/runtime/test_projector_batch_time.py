"""A backlog of costly events is folded in batches that fit ``projector.batch_max_s``, so the
process's event loop keeps turning while it folds (lease renewals, NATS services). Real
nats-server, real RocksDB."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration, Settings
from streamproc.configfile.sections import Sections
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope
from streamproc.events.payloads import Payload
from streamproc.natsd.server import EmbeddedNats
from streamproc.projections.activity import Activity, read_all
from streamproc.roles import System
from streamproc.runtime.batching import FIRST_BATCH, batch_time_from
from streamproc.runtime.fold import folds, payloads_of
from streamproc.runtime.projector import Projector
from streamproc.runtime.reactor import Reactor, RoleContext, RoleSpec
from streamproc.state.store import RocksStore
from streamproc.state.tx import Tx
from tests.helpers import publish_samples
from tests.samples import sample_event

EVENTS = 300
COST_S = 0.01
"""Each event's fold takes at least this long (a sleep: a floor no machine shortens)."""
MAX_S = 0.2


class Idle(Reactor):
    async def react(self, ctx: RoleContext) -> None:
        """Acts on nothing: what the lease guards here is only its being held."""


class Costly(Activity):
    @folds(*payloads_of(KINDS))
    def _event(self, tx: Tx, event: Envelope, payload: Payload) -> None:
        time.sleep(COST_S)
        super()._event(tx, event, payload)


async def test_a_costly_backlog_is_folded_in_batches_that_fit_the_time(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    await publish_samples(publisher, [sample_event(i, tenants=1) for i in range(EVENTS)])
    store = RocksStore(state_dir)
    proj = Projector(
        nc, store, [Costly()], stream=stream_names[0], role="costly", batch=1000, batch_max_s=MAX_S
    )
    await proj.start()
    sizes: list[int] = []
    apply = proj.folder.apply

    def counted(messages, checkpoint):  # type: ignore[no-untyped-def]
        msgs = list(messages)
        sizes.append(len(msgs))
        return apply(msgs, checkpoint)

    proj.folder.apply = counted  # type: ignore[method-assign]
    gaps: list[float] = []

    async def ticker() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            gaps.append(time.perf_counter() - t)

    ticking = asyncio.create_task(ticker())
    try:
        await proj.run(until_seq=EVENTS)
        assert read_all(store)["tenant-0"].events == EVENTS
    finally:
        ticking.cancel()
        store.close()
    # ~16 events of >= 10 ms fit 0.8 x 0.2 s: no batch is larger, however many are buffered
    assert sum(sizes) == EVENTS and max(sizes) <= FIRST_BATCH, sizes
    shown = REGISTRY.get_sample_value("streamproc_projector_batch_events", {"role": "costly"})
    assert shown == proj.sizer.size <= FIRST_BATCH
    # one batch of all 300 would have held the loop for 3 s
    assert max(gaps) < 1.0, max(gaps)


async def test_the_roles_projectors_take_the_setting(
    nats_server: EmbeddedNats, prefix: str, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    assert batch_time_from(Sections()) == 0.5  # the default
    short = Configuration(values={"STREAMPROC_LEASE_TTL_S": "1.5"})
    assert short.built(batch_time_from) == 0.15  # a tenth of the lease: renewals wait for it
    conf = Configuration(values={"STREAMPROC_BATCH_MAX_S": "0.25"})
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix, configuration=conf
    )
    system = System(settings, ["activity"], http=False)
    await system.start()
    try:
        assert system.projectors["activity"].sizer.max_s == 0.25
    finally:
        await system.close()


async def test_a_singleton_keeps_its_lease_while_it_folds_a_costly_backlog(
    nats_server: EmbeddedNats,
    prefix: str,
    publisher: Publisher,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three seconds of folding, twice the lease's TTL: in one batch the renewals would
    wait for it, and the lease would lapse."""
    conf = Configuration(values={"STREAMPROC_LEASE_TTL_S": "1.5"})
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix, configuration=conf
    )
    spec = RoleSpec([Costly], [lambda _: Idle()], singleton=True)
    system = System(settings, ["activity"], http=False, specs={"activity": spec})
    await system.start()
    try:
        leader = system.leaders["activity"]
        await asyncio.wait_for(leader.wait_active(), 10)
        last = await publish_samples(publisher, [sample_event(i) for i in range(EVENTS)])
        await system.projectors["activity"].wait_for(last, timeout=60)
        assert leader.active
    finally:
        await system.close()
    assert "lost the lease" not in caplog.text
