"""The projector runtime against a real nats-server and real RocksDB."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import encode
from streamproc.projections.activity import Activity, read_all
from streamproc.runtime.position import PositionError
from streamproc.runtime.projector import Projector
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.helpers import epoch, memory_fold, messages_of, publish_samples
from tests.samples import sample_event


async def fold_all(nc: FastClient, stream: str, path: Path, until: int) -> str:
    store = RocksStore(path)
    try:
        proj = await Projector(nc, store, [Activity()], stream=stream, role="t").start()
        await proj.run(until_seq=until)
        return state_digest(store)
    finally:
        store.close()


async def test_100k_mixed_events_match_pure_fold(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    events = [sample_event(i, tenants=11) for i in range(100_000)]
    last = await publish_samples(publisher, events)
    assert last == 100_000
    live = await fold_all(nc, stream_names[0], state_dir, last)
    cp = keys.Checkpoint(stream_names[0], await epoch(nc, stream_names[0]), last)
    reference = memory_fold([Activity()], messages_of(publisher, events), cp)
    assert live == state_digest(reference)
    counts = read_all(reference)
    assert sum(a.events for a in counts.values()) == 100_000
    assert len(counts) == 11


async def test_same_event_twice_is_one_message_and_one_application(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    event = sample_event(0)
    first = await publisher.publish_event(event)
    second = await publisher.publish_event(event)
    assert (first.seq, first.duplicate) == (1, False)
    assert (second.seq, second.duplicate) == (1, True)
    info = await jsapi.stream_info(nc, stream_names[0])
    assert info is not None and info.state.messages == 1
    await publisher.publish_event(sample_event(1))
    store = RocksStore(state_dir)
    proj = await Projector(nc, store, [Activity()], stream=stream_names[0], role="t").start()
    await proj.run(until_seq=2)
    acts = read_all(store)
    assert sum(a.events for a in acts.values()) == 2
    assert acts[event.tenant].counts[event.kind] == 1
    store.close()


async def test_malformed_messages_are_quarantined_and_folding_goes_on(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    good = encode(sample_event(0))  # a segment.started event of tenant-0
    bad_kinds = [
        (b"{not json", "malformed_json"),
        (b'{"id":"x"}', "invalid_envelope"),
        (good.replace(b'"segment.started"', b'"segment.exploded"'), "unknown_kind"),
        (good.replace(b'"schema":1', b'"schema":9'), "unsupported_schema_version"),
        (good.replace(b'"tenant-0"', b'"Tenant.0"'), "invalid_envelope"),
        (good.replace(b'"runner":"runner-1"', b'"runner":""'), "invalid_payload"),
    ]
    items, expected_reasons, valid = [], {}, 0
    for i in range(2000):
        if i % 2:
            data, reason = bad_kinds[(i // 2) % len(bad_kinds)]
            assert data != good
            items.append((f"{prefix}.events.tenant-x.bad.{i}", data, f"bad-{i}"))
            expected_reasons[i + 1] = reason
        else:
            e = sample_event(i)
            items.append((publisher.subject_of(e), encode(e), e.id))
            valid += 1
    acks = await publisher.publish_many(items)
    assert [a.seq for a in acks] == list(range(1, 2001))
    store = RocksStore(state_dir)
    proj = await Projector(nc, store, [Activity()], stream=stream_names[0], role="t").start()
    task = asyncio.create_task(proj.run())
    await proj.wait_for(2000, timeout=30)
    assert not task.done(), "the projector must keep running after quarantining"
    quarantined = {
        msgspec.json.decode(v, type=keys.Quarantined).seq: msgspec.json.decode(
            v, type=keys.Quarantined
        )
        for _, v in store.scan(keys.META_CF, keys.QUARANTINE_PREFIX)
    }
    assert len(quarantined) == 1000
    for seq, reason in expected_reasons.items():
        assert quarantined[seq].reason == reason, seq
        assert quarantined[seq].detail
        assert quarantined[seq].subject.startswith(f"{prefix}.events.tenant-x.bad.")
    assert sum(a.events for a in read_all(store).values()) == valid
    proj.stop()
    await task
    store.close()


async def test_wait_for_gives_read_your_writes(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    store = RocksStore(state_dir)
    proj = await Projector(nc, store, [Activity()], stream=stream_names[0], role="t").start()
    task = asyncio.create_task(proj.run())
    for i in range(20):
        ack = await publisher.publish_event(sample_event(i, tenants=1))
        await proj.wait_for(ack.seq, timeout=5)
        assert read_all(store)["tenant-0"].events == i + 1
    proj.stop()
    await task
    store.close()


async def test_resume_from_checkpoint_applies_nothing_twice(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    await publish_samples(publisher, [sample_event(i) for i in range(3000)])
    await fold_all(nc, stream_names[0], state_dir, 3000)
    await publish_samples(publisher, [sample_event(i) for i in range(3000, 5000)])
    resumed = await fold_all(nc, stream_names[0], state_dir, 5000)
    clean = await fold_all(nc, stream_names[0], state_dir.with_name("clean"), 5000)
    assert resumed == clean


async def test_recreated_stream_is_refused_and_state_unchanged(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    await publish_samples(publisher, [sample_event(i) for i in range(100)])
    before = await fold_all(nc, stream_names[0], state_dir, 100)
    await jsapi.request(nc, f"STREAM.DELETE.{stream_names[0]}")
    await streams.apply(nc, streams.definitions(prefix))
    await publish_samples(publisher, [sample_event(i) for i in range(200)])
    store = RocksStore(state_dir)
    with pytest.raises(PositionError, match="recreated") as err:
        await Projector(nc, store, [Activity()], stream=stream_names[0], role="t").start()
    assert stream_names[0] in str(err.value)
    assert state_digest(store) == before
    store.close()


async def test_retention_gap_is_refused_and_state_unchanged(
    nc: FastClient, prefix: str, publisher: Publisher, state_dir: Path
) -> None:
    events_def = streams.definitions(prefix)[0]
    events_def.update({"max_msgs": 100, "discard": "old", "deny_delete": False})
    await streams.apply(nc, [events_def])
    name = events_def["name"]
    try:
        await publish_samples(publisher, [sample_event(i) for i in range(50)])
        before = await fold_all(nc, name, state_dir, 50)
        await publish_samples(publisher, [sample_event(i) for i in range(50, 250)])
        store = RocksStore(state_dir)
        with pytest.raises(PositionError, match="retention gap") as err:
            await Projector(nc, store, [Activity()], stream=name, role="t").start()
        assert "51..150" in str(err.value)
        assert state_digest(store) == before
        store.close()
        # A fresh state cannot be built either: the log no longer starts at 1.
        fresh = RocksStore(state_dir.with_name("fresh"))
        with pytest.raises(PositionError, match="no longer starts at sequence 1"):
            await Projector(nc, fresh, [Activity()], stream=name, role="t").start()
        fresh.close()
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


async def test_gap_while_running_stops_the_projector(
    nc: FastClient, prefix: str, publisher: Publisher, state_dir: Path
) -> None:
    events_def = streams.definitions(prefix)[0]
    events_def["deny_delete"] = False
    await streams.apply(nc, [events_def])
    name = events_def["name"]
    try:
        await publish_samples(publisher, [sample_event(i) for i in range(10)])
        await jsapi.request(nc, f"STREAM.MSG.DELETE.{name}", {"seq": 5})
        store = RocksStore(state_dir)
        proj = await Projector(nc, store, [Activity()], stream=name, role="t").start()
        with pytest.raises(PositionError, match="expected sequence 5, received 6"):
            await proj.run(until_seq=10)
        cp = proj.folder.checkpoint()
        assert cp is not None and cp.last_seq == 4
        store.close()
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{name}")


async def test_a_vanished_consumer_is_recreated_from_the_checkpoint(
    nc: FastClient, publisher: Publisher, stream_names: tuple[str, str, str], state_dir: Path
) -> None:
    """A NATS node shutting down (or an operator) removes the consumer under a running
    projector: it carries on from its checkpoint, applying nothing twice and skipping nothing."""
    stream = stream_names[0]
    events = [sample_event(i) for i in range(400)]
    await publish_samples(publisher, events[:200])
    store = RocksStore(state_dir)
    try:
        proj = await Projector(nc, store, [Activity()], stream=stream, role="t").start()
        task = asyncio.create_task(proj.run())
        await proj.wait_for(200, timeout=10)
        await jsapi.delete_consumer(nc, stream, proj.consumer)
        await publish_samples(publisher, events[200:])
        await proj.wait_for(400, timeout=15)
        assert proj.failure is None and not task.done()
        proj.stop()
        await task
        cp = keys.Checkpoint(stream, await epoch(nc, stream), 400)
        reference = memory_fold([Activity()], messages_of(publisher, events, 1), cp)
        assert state_digest(store) == state_digest(reference)
    finally:
        store.close()


async def test_a_rejection_is_logged_once_counted_and_not_applied(
    nc: FastClient,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from streamproc.events import payloads as p
    from streamproc.events.envelope import new_event
    from streamproc.runner.state import RunnerState

    role = "rejtest"
    hlc = "1767225600000:0:n1"
    events = [
        new_event("run.planned", "acme", p.RunPlanned(run_id="ghost", trigger="manual"), hlc,
                  event_id="ev-ghost"),
        new_event("run.requested", "acme", p.RunRequested(run_id="r1", trigger="manual"), hlc,
                  event_id="ev-r1"),
    ]  # fmt: skip
    last = await publish_samples(publisher, events)

    def sample(name: str, labels: dict[str, str]) -> float:
        from prometheus_client import REGISTRY

        return REGISTRY.get_sample_value(name, labels) or 0.0

    applied = {"role": role, "result": "applied"}
    refused = {"role": role, "result": "rejected"}
    unknown = {"projection": "runner", "reason": "unknown_run"}
    before = [
        sample("streamproc_projector_events_total", applied),
        sample("streamproc_projector_events_total", refused),
        sample("streamproc_rejected_events_total", unknown),
    ]
    for _ in range(2):  # a restart resumes after its checkpoint: nothing is logged again
        store = RocksStore(state_dir)
        try:
            proj = Projector(nc, store, [RunnerState()], stream=stream_names[0], role=role)
            await proj.start()
            await proj.run(until_seq=last)
            assert proj.folder.rejections == {"runner": {"unknown_run": 1}}
        finally:
            store.close()
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [x for x in lines if "rejected" in x] == [
        f"{role}: event ev-ghost (run.planned, sequence 1) rejected by runner: unknown_run "
        "(run.planned for run ghost, never requested)"
    ]
    assert [
        sample("streamproc_projector_events_total", applied),
        sample("streamproc_projector_events_total", refused),
        sample("streamproc_rejected_events_total", unknown),
    ] == [before[0] + 1, before[1] + 1, before[2] + 1]
