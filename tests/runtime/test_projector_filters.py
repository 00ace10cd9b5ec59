"""Each role reads only what it folds: its projector's consumer filters the event log to the
subjects of its kinds (streamproc/events/filters.py), against a real nats-server and RocksDB.
The position still reaches the stream head over events it never receives, an upgrade from an
unfiltered durable resumes at the checkpoint, and a real gap still stops it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration, Settings
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, encode
from streamproc.names import stream_names as stream_names_of
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import System, projections_for, rebuild
from streamproc.runtime.deliveries import role_filter
from streamproc.runtime.position import PositionError
from streamproc.runtime.projection import Projection
from streamproc.runtime.projector import Projector
from streamproc.scanner.indexed import IndexedImages
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore, Store
from tests.helpers import epoch, eventually, memory_fold, messages_of, publish_samples
from tests.samples import sample_event

IMAGE_KINDS = {"image.indexed", "image.removed"}


def scanner() -> list[Projection]:
    """The scanner role's projections: they fold ``image.indexed`` and ``image.removed``."""
    projections = projections_for("scanner", Configuration())
    assert {k for p in projections for k in p.kinds} == IMAGE_KINDS
    return projections


def images(events: list[Envelope]) -> int:
    return sum(e.kind in IMAGE_KINDS for e in events)


def quarantined(store: Store) -> dict[int, keys.Quarantined]:
    out = {}
    for _, v in store.scan(keys.META_CF, keys.QUARANTINE_PREFIX):
        q = msgspec.json.decode(v, type=keys.Quarantined)
        out[q.seq] = q
    return out


async def consumer_config(nc: FastClient, stream: str, consumer: str) -> dict[str, object]:
    doc = await jsapi.request(nc, f"CONSUMER.INFO.{stream}.{consumer}")
    return doc["config"]  # type: ignore[no-any-return]


async def test_a_roles_consumer_delivers_only_the_kinds_it_folds(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    stream = stream_names[0]
    events = [sample_event(i) for i in range(440)]
    good = encode(sample_event(0))
    last = await publish_samples(publisher, events)
    # A message that does not decode, on an image subject and on a verdict subject: only the
    # first is the scanner's to quarantine.
    bad = await publisher.publish_many(
        [
            (f"{prefix}.events.tenant-x.image.bad", b"{not json", "bad-image"),
            (f"{prefix}.events.tenant-x.verdict.bad", b"{not json", "bad-verdict"),
            (f"{prefix}.events.tenant-x.verdict.x", good, "wrong-subject"),  # a segment event
        ]
    )
    tail = await publish_samples(publisher, [sample_event(440), sample_event(441)])  # no image
    assert tail == last + 5
    store = RocksStore(state_dir)
    try:
        projections = scanner()
        filters = role_filter(prefix, projections)
        assert filters == [f"{prefix}.events.*.image.>"]
        proj = Projector(
            nc, store, projections, stream=stream, role="t", subjects=f"{prefix}.events.",
            filter_subjects=filters,
        )  # fmt: skip
        await proj.start()
        config = await consumer_config(nc, stream, proj.consumer)
        assert config["filter_subjects"] == filters
        assert proj.lag() == images(events) + 1, "lag is what the consumer holds for us"
        task = asyncio.create_task(proj.run())
        await proj.wait_for(tail, timeout=10)  # the tail is of kinds it never receives
        assert proj.failure is None and not task.done()
        assert proj.received == images(events) + 1  # nothing else was delivered
        assert proj.lag() == 0
        assert proj.folder.checkpoint() == keys.Checkpoint(stream, proj.epoch, tail)
        assert [(q.seq, q.reason) for q in quarantined(store).values()] == [
            (bad[0].seq, "malformed_json")
        ]
        proj.stop()
        await task
    finally:
        store.close()

    # An unfiltered projector of the same role quarantines all three, and folds the same.
    everything = RocksStore(state_dir.with_name("unfiltered"))
    try:
        proj = Projector(
            nc, everything, scanner(), stream=stream, role="u", subjects=f"{prefix}.events."
        )
        await proj.start()
        await proj.run(until_seq=tail)
        assert proj.received == tail
        assert sorted(quarantined(everything)) == [a.seq for a in bad]
    finally:
        everything.close()


async def test_upgrade_from_an_unfiltered_durable_resumes_at_the_checkpoint(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    """An older build left a durable consumer of the whole log; this one's filter differs, so
    it replaces the consumer from its checkpoint: nothing folded twice, nothing missed."""
    stream = stream_names[0]
    events = [sample_event(i) for i in range(600)]
    half = await publish_samples(publisher, events[:300])
    store = RocksStore(state_dir)
    try:
        old = Projector(nc, store, scanner(), stream=stream, role="t", consumer="proj_t")
        await (await old.start()).run(until_seq=half)
        config = await consumer_config(nc, stream, "proj_t")
        assert not config.get("filter_subjects") and not config.get("filter_subject")
        assert old.received == half
        last = await publish_samples(publisher, events[300:])

        filters = role_filter(prefix, scanner())
        new = Projector(
            nc,
            store,
            scanner(),
            stream=stream,
            role="t",
            consumer="proj_t",
            filter_subjects=filters,
        )
        await new.start()
        assert (await consumer_config(nc, stream, "proj_t"))["filter_subjects"] == filters
        await new.run(until_seq=last)
        assert new.received == images(events[300:]), "resumed at the checkpoint, no refold"
        cp = keys.Checkpoint(stream, await epoch(nc, stream), last)
        reference = memory_fold(scanner(), messages_of(publisher, events), cp)
        assert state_digest(store) == state_digest(reference), "nothing lost"
    finally:
        store.close()


async def test_the_position_passes_events_it_never_receives_and_keeps_it(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    """Read-your-writes holds for an event of a kind the role does not fold (a reactor that
    waits for the head), and the moved position is committed: a restart resumes past it."""
    stream = stream_names[0]
    verdict = next(i for i in range(30) if sample_event(i).kind == "verdict.recorded")
    store = RocksStore(state_dir)
    try:
        filters = role_filter(prefix, scanner())
        proj = Projector(nc, store, scanner(), stream=stream, role="t", filter_subjects=filters)
        task = asyncio.create_task((await proj.start()).run())
        ack = await publisher.publish_event(sample_event(verdict))
        await proj.wait_for(ack.seq, timeout=5)
        assert proj.received == 0
        cp = proj.folder.checkpoint()
        assert cp is not None and cp.last_seq == ack.seq
        proj.stop()
        await task
    finally:
        store.close()


async def limited_stream(nc: FastClient, prefix: str, **limits: object) -> str:
    events_def = streams.definitions(prefix)[0]
    events_def.update({"deny_delete": False, **limits})
    await streams.apply(nc, [events_def])
    return str(events_def["name"])


async def test_a_gap_in_the_kinds_it_folds_still_stops_it(
    nc: FastClient, prefix: str, publisher: Publisher, state_dir: Path
) -> None:
    """A limited stream drops the oldest events while the projector is behind: among them
    images it had not received. The consumer skips them without a trace; the projector sees
    from the stream that what it passed over is gone, and stops before folding past it."""
    name = await limited_stream(nc, prefix, max_msgs=100, discard="old")
    try:
        events = [sample_event(i) for i in range(40)]
        await publish_samples(publisher, events)
        store = RocksStore(state_dir)
        filters = role_filter(prefix, scanner())
        proj = Projector(
            nc, store, scanner(), stream=name, role="t", batch=2, filter_subjects=filters
        )
        await proj.start()
        await proj.step()  # folds the first two images, has asked for four more
        applied = proj.applied
        assert proj.received == 2
        # 200 more: sequences 1..140 leave the stream, images among them never delivered.
        await publish_samples(publisher, [sample_event(i) for i in range(40, 240)])
        with pytest.raises(PositionError, match="were removed before this projector's consumer"):
            for _ in range(20):
                await proj.step()
        cp = proj.folder.checkpoint()
        assert cp is not None and cp.last_seq <= 140
        assert cp.last_seq >= applied
        store.close()
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


async def test_a_deleted_event_it_needed_stops_it(
    nc: FastClient, prefix: str, publisher: Publisher, state_dir: Path
) -> None:
    """A message deleted from the middle of the stream is no skip a filtered consumer
    shows: the stream's deleted sequences do."""
    name = await limited_stream(nc, prefix)
    try:
        events = [sample_event(i) for i in range(30)]
        await publish_samples(publisher, events)
        seqs = [i + 1 for i, e in enumerate(events) if e.kind in IMAGE_KINDS]
        await jsapi.request(nc, f"STREAM.MSG.DELETE.{name}", {"seq": seqs[1]})
        store = RocksStore(state_dir)
        filters = role_filter(prefix, scanner())
        proj = Projector(nc, store, scanner(), stream=name, role="t", filter_subjects=filters)
        await proj.start()
        with pytest.raises(PositionError, match=f"event {seqs[1]} was removed"):
            await proj.run(until_seq=30)
        cp = proj.folder.checkpoint()
        assert cp is not None and cp.last_seq == seqs[0], "folded up to the gap, not past it"
        store.close()
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


def test_sample_events_cover_images_and_others() -> None:
    kinds = {sample_event(i).kind for i in range(60)}
    assert kinds >= IMAGE_KINDS and len(kinds - IMAGE_KINDS) > 5 and kinds <= KINDS.keys()


async def test_a_clean_stop_leaves_the_checkpoint_at_the_head(
    nats_server: EmbeddedNats, prefix: str, publisher: Publisher, tmp_path: Path
) -> None:
    """The log ends with kinds the role does not fold: a clean stop still leaves its checkpoint
    at the head, so its state equals a replay of the same log, checkpoint included."""
    settings = Settings(data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix)
    system = System(settings, ["scanner"], http=False)
    await system.start()
    events = [sample_event(i) for i in range(30)]
    try:
        last = await publish_samples(publisher, events)
        assert events[-1].kind not in IMAGE_KINDS
        proj = system.projectors["scanner"]
        await eventually(lambda: proj.received == images(events) and proj.lag() == 0)
    finally:
        await system.close()
    store = RocksStore(settings.state_dir("scanner"))
    try:
        raw = store.get(keys.META_CF, keys.CHECKPOINT_KEY)
        assert raw is not None
        assert msgspec.json.decode(raw, type=keys.Checkpoint).last_seq == last
        live = state_digest(store)
    finally:
        store.close()
    nc = await connect(nats_server.url)
    try:
        stream = stream_names_of(prefix)[0]
        fresh = await rebuild(
            nc,
            stream,
            "scanner",
            tmp_path / "replay",
            progress=False,
            configuration=Configuration(),
        )
    finally:
        await nc.close()
    assert fresh.digest == live


async def test_a_sync_never_passes_over_one_of_its_kinds_the_consumer_has_not_counted(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer's pending count can lag a message the stream has just stored (seen under
    load: a run created through the gateway vanished from its read model). Here the sync
    gets the consumer's real answer from the moment before the image was stored — nothing
    pending — and must still not move the position over the image: the stream is asked."""
    stream = stream_names[0]
    other = next(e for e in map(sample_event, range(50)) if e.kind not in IMAGE_KINDS)
    image = next(e for e in map(sample_event, range(50)) if e.kind == "image.indexed")
    store = RocksStore(state_dir)
    try:
        filters = role_filter(prefix, scanner())
        proj = Projector(nc, store, scanner(), stream=stream, role="t", filter_subjects=filters)
        await proj.start()
        await publisher.publish_event(other)
        before = await jsapi.consumer_info(nc, stream, proj.consumer)
        assert before is not None and before.num_pending == 0
        ack = await publisher.publish_event(image)

        async def as_it_was(*_: object) -> jsapi.ConsumerInfo:
            return before

        monkeypatch.setattr(jsapi, "consumer_info", as_it_was)
        await proj.sync()
        monkeypatch.undo()
        assert proj.applied < ack.seq
        task = asyncio.create_task(proj.run())
        await proj.wait_for(ack.seq, timeout=10)
        assert IndexedImages(store).count() == 1
        proj.stop()
        await task
    finally:
        store.close()
