"""A projector that cannot keep up (slow store, stalled fold): the instance says it is not
ready, with its lag, and loses nothing — the events wait in the log (failure-mode table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamproc.bus import jsapi
from streamproc.bus.publisher import Publisher
from streamproc.config import Settings
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System
from streamproc.runtime import app
from tests.helpers import publish_samples
from tests.samples import sample_event


async def test_a_lagging_projector_is_not_ready_and_nothing_is_dropped(
    nats_server: EmbeddedNats,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "READY_LAG", 10)
    settings = Settings(data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix)
    system = System(settings, ["activity"], http=False)
    await system.start()
    try:
        await publish_samples(publisher, [sample_event(i) for i in range(5)])
        proj = system.projectors["activity"]
        await proj.wait_for(5, timeout=10)
        ok, detail = await system.ready()
        assert ok and detail["lag"] == {"activity": 0}

        proj.stop()  # the fold stalls (as behind a store that no longer keeps up)
        await next(t for t in system.tasks if t.get_name() == "projector-activity")
        await publish_samples(publisher, [sample_event(i) for i in range(5, 30)])
        ok, detail = await system.ready()
        assert not ok and detail["lag"] == {"activity": 25}
        assert system.nc is not None
        info = await jsapi.stream_info(system.nc, stream_names[0])
        assert info is not None and (info.state.first_seq, info.state.messages) == (1, 30)
    finally:
        await system.close()
