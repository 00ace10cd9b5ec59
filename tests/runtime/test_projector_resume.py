"""A delivery gap is not a stream gap: messages lost in flight (the client's server died, the
consumer's leader moved) are read again from the stream instead of stopping the projector.
Found by tests/cluster/test_leader_failover.py; reproduced here on one server by losing a
delivered message between the server and the pull loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamproc.bus.ack import is_ack, stream_seq
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.pull import PullLoop
from streamproc.projections.activity import Activity
from streamproc.runtime.projector import Projector
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import publish_samples
from tests.samples import sample_event


def lose_once(monkeypatch: pytest.MonkeyPatch, lost: set[int]) -> list[int]:
    """Drop the first delivery of each sequence in ``lost``; returns what was dropped."""
    dropped: list[int] = []
    original = PullLoop._on_msg

    def on_msg(self: PullLoop, subject: bytes, reply: bytes, data: bytes, headers: Any) -> None:
        if is_ack(reply):
            seq = stream_seq(reply)
            if seq in lost and seq not in dropped:
                dropped.append(seq)
                return
        original(self, subject, reply, data, headers)

    monkeypatch.setattr(PullLoop, "_on_msg", on_msg)
    return dropped


async def test_messages_lost_in_flight_are_read_again(
    nc: FastClient,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    last = await publish_samples(publisher, [sample_event(i) for i in range(50)])
    reference = RocksStore(tmp_path / "reference")
    try:
        proj = Projector(nc, reference, [Activity()], stream=stream_names[0], role="r")
        await (await proj.start()).run(until_seq=last)
        expected = state_digest(reference)
    finally:
        reference.close()

    dropped = lose_once(monkeypatch, {7, 8, 30})
    store = RocksStore(tmp_path / "state")
    try:
        proj = Projector(nc, store, [Activity()], stream=stream_names[0], role="t", batch=10)
        await (await proj.start()).run(until_seq=last)
        assert dropped == [7, 8, 30]
        cp = proj.folder.checkpoint()
        assert cp is not None and cp.last_seq == last
        assert state_digest(store) == expected
    finally:
        store.close()
