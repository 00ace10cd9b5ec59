"""Retention through the real projector and RocksDB: the live state, folded in small batches
as events arrive, equals a replay of the same log in one big batch (same digest)."""

from __future__ import annotations

from pathlib import Path

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration
from streamproc.readmodel import READ_MODEL
from streamproc.readmodel.queries import ReadModel
from streamproc.roles import rebuild
from streamproc.runtime.projector import Projector
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import publish_samples
from tests.readmodel.retention_scenario import EXPECTED_AFTER, scenario


async def test_pruned_live_state_equals_a_replay(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    stream = stream_names[0]
    events = scenario()
    half = len(events) // 2
    store = RocksStore(tmp_path / "live")
    try:
        # Live: two stretches of the log, a restart between them, batches of two events.
        await publish_samples(publisher, events[:half])
        proj = await Projector(
            nc, store, [f() for f in READ_MODEL], stream=stream, role="gateway", batch=2
        ).start()
        await proj.run(until_seq=half)
        await publish_samples(publisher, events[half:])
        proj = await Projector(
            nc, store, [f() for f in READ_MODEL], stream=stream, role="gateway", batch=2
        ).start()
        await proj.run(until_seq=len(events))
        rm = ReadModel(store)
        assert {t: [r.id for r in rm.runs(t, limit=10).items] for t in EXPECTED_AFTER} == (
            EXPECTED_AFTER
        )
        live = state_digest(store)
    finally:
        store.close()
    replayed = await rebuild(
        nc,
        stream,
        "gateway",
        tmp_path / "replay",
        batch=2000,
        progress=False,
        configuration=Configuration(),
    )
    assert replayed.events == len(events) and not replayed.partial
    assert replayed.digest == live
