"""Helpers for integration tests: publishing sample events, folding them in memory."""

from __future__ import annotations

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import Envelope, encode
from streamproc.projection import Folder, Projection
from streamproc.state.keys import Checkpoint
from streamproc.state.store import MemoryStore


async def publish_samples(pub: Publisher, events: list[Envelope]) -> int:
    acks = await pub.publish_events(events)
    return acks[-1].seq if acks else 0


def memory_fold(
    projections: list[Projection], messages: list[tuple[int, str, bytes]], cp: Checkpoint
) -> MemoryStore:
    """The reference: the same folds over the same messages, in memory, one batch."""
    store = MemoryStore()
    Folder(store, projections).apply(messages, cp)
    return store


def messages_of(
    pub: Publisher, events: list[Envelope], first_seq: int = 1
) -> list[tuple[int, str, bytes]]:
    return [(first_seq + i, pub.subject_of(e), encode(e)) for i, e in enumerate(events)]


async def epoch(nc: FastClient, stream: str) -> str:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    return info.created
