"""A pristine auditor state directory, built once through the real runtime: events published to
a real nats-server, folded by the projector into RocksDB, snapshots signed by the reactor,
published, and folded back."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamproc.audit.log import AuditLog
from streamproc.audit.reactor import SnapshotReactor
from streamproc.audit.settings import AuditSettings
from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.hlc import HybridLogicalClock
from streamproc.natsd.server import EmbeddedNats
from streamproc.runtime.projector import Projector
from streamproc.state.store import RocksStore
from tests.audit.helpers import chained_events, keyring, role_context, signer

BATCH = 50


@dataclass(frozen=True)
class Pristine:
    path: Path
    prefix: str
    acme_entries: int
    beta_entries: int


async def _build(url: str, prefix: str, path: Path, data_dir: Path) -> None:
    nc = await connect(url)
    await streams.apply(nc, streams.definitions(prefix))
    stream = streams.stream_names(prefix)[0]
    pub = await Publisher(nc, prefix=prefix).start()
    events = chained_events(230, tenant="acme") + chained_events(40, tenant="beta", node="n2")
    acks = await pub.publish_events(events)
    last = acks[-1].seq
    store = RocksStore(path)
    try:
        proj = await Projector(nc, store, [AuditLog()], stream=stream, role="auditor").start()
        await proj.run(until_seq=last)
        settings = Settings(data_dir=data_dir, prefix=prefix, node_id="auditor")
        reactor = SnapshotReactor(
            settings,
            AuditSettings(batch_size=BATCH, batch_interval_s=3600, verify_on_start=False),
            signer=signer(),
            keyring=keyring(),
            min_gap_s=0,
        )
        ctx = role_context(settings, store, pub, HybridLogicalClock("auditor"), last)
        stored = await reactor.snapshot(ctx)
        assert stored == 4  # acme 0..199 in four batches; beta has fewer than one batch
        proj = await Projector(nc, store, [AuditLog()], stream=stream, role="auditor").start()
        await proj.run(until_seq=last + stored)
    finally:
        store.close()
        await pub.close()
        await nc.close()


@pytest.fixture(scope="session")
def pristine(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    base = tmp_path_factory.mktemp("pristine")
    prefix = f"audp{os.getpid() % 10000}"
    asyncio.run(_build(nats_server.url, prefix, base / "auditor", base / "data"))
    return Pristine(base / "auditor", prefix, 230, 40)


@pytest.fixture
def auditor_copy(pristine: Pristine, tmp_path: Path) -> Path:
    """A private copy of the pristine state to tamper with."""
    target = tmp_path / "auditor"
    shutil.copytree(pristine.path, target)
    return target
