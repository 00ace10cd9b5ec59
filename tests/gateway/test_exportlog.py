"""Exports recorded exactly once on a bounded set of subjects (streamproc/recording/exportlog.py):
the subjects (and JetStream's duplicate-window entries) do not grow with the exports; two
replicas taking the same exports at once record each once; a resent publish is known as our
own; a read model that cannot catch up answers 503 and records nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.catalog import subject_for
from streamproc.events.envelope import decode, encode, new_event
from streamproc.hlc import HybridLogicalClock
from streamproc.names import EXPORT_SHARDS
from streamproc.readmodel.exports import export_digest
from streamproc.recording.exportlog import SCAN_MAX, Append, ExportLog, NotCaughtUp, Recorded
from tests.gateway.auth.test_replay import pair as pair  # the two-replica fixture
from tests.gateway.auth.test_webhooks import FEEDSER, export, post, shard
from tests.gateway.harness import Harness

TOKEN_TENANT = "acme"
"""The tenant of the harness's webhook token: what a delivery with a token records for."""


async def subjects_of(nc: FastClient, stream: str) -> dict[str, int]:
    doc = await jsapi.request(nc, f"STREAM.INFO.{stream}", {"subjects_filter": ">"})
    return dict(doc["state"].get("subjects") or {})


async def test_exports_share_a_few_subjects_and_leave_no_duplicate_window_entries(
    gw_tokenless: Harness,
) -> None:
    """300 exports for two tenants: 600 events on at most 2 x EXPORT_SHARDS subjects (a
    subject per export kept an index entry per export in nats-server's memory), none with a
    ``Nats-Msg-Id`` (each would hold an entry in the stream's one-hour duplicate window)."""
    gw = gw_tokenless
    n = 300
    answers = await asyncio.gather(*(post(gw, FEEDSER, export(f"e{i}")) for i in range(n)))
    assert [a[0] for a in answers] == [202] * n
    nc = gw.system.nc
    assert nc is not None
    stream = gw.system.settings.events_stream
    exports = {s: c for s, c in (await subjects_of(nc, stream)).items() if ".feedser." in s}
    assert sum(exports.values()) == 2 * n
    assert len(exports) <= 2 * EXPORT_SHARDS, len(exports)
    assert len(exports) > EXPORT_SHARDS, "spread over the shards"
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    js = nc.jetstream()
    for seq in range(info.state.last_seq - 20, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        assert "Nats-Msg-Id" not in (msg.headers or {}), msg.headers


async def test_two_replicas_taking_the_same_exports_at_once_record_each_once(
    pair: tuple[Harness, Harness],
) -> None:
    """Every export delivered to both replicas at the same moment (different delivery ids,
    as a sender retrying on another replica would): for each tenant exactly one answer says
    recorded, the other duplicate, and the log holds each export once per tenant."""
    one, two = pair
    n = 60
    sends = []
    for i in range(n):
        body = export(f"x{i}")
        sends += [post(one, FEEDSER, body, delivery=f"a-{i}"),
                  post(two, FEEDSER, body, delivery=f"b-{i}")]  # fmt: skip
    answers = await asyncio.gather(*sends)
    recorded: dict[tuple[str, str], int] = {}
    for status, doc, _ in answers:
        assert status in (200, 202), doc
        for e in doc["events"]:
            assert e["outcome"] in ("recorded", "duplicate"), doc
            key = (e["tenant"], doc["exportId"])
            recorded[key] = recorded.get(key, 0) + (e["outcome"] == "recorded")
    assert recorded == {(TOKEN_TENANT, f"x{i}"): 1 for i in range(n)}
    nc = one.system.nc
    assert nc is not None
    stream = one.system.settings.events_stream
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    refs = []
    js = nc.jetstream()
    for seq in range(1, info.state.last_seq + 1):
        event = decode((await js.get_msg(stream, seq)).data)
        if event.kind == "export.feedser":
            refs.append((event.tenant, event.payload.export_id))
    assert sorted(refs) == sorted(recorded)


async def test_revisions_sent_to_both_replicas_are_numbered_once_each(
    pair: tuple[Harness, Harness],
) -> None:
    """The same exportId with three bodies, each delivered to both replicas at the same
    moment: every body is recorded once, as revisions 1, 2 and 3 of the export on its shard —
    whichever replica took it — and the repeats answer with the revision holding their body."""
    one, two = pair
    bodies = [export("rev", kev=[f"CVE-2026-{n}"]) for n in range(3)]
    for i, body in enumerate(bodies):
        answers = await asyncio.gather(
            post(one, FEEDSER, body, delivery=f"r1-{i}"),
            post(two, FEEDSER, body, delivery=f"r2-{i}"),
        )
        assert sorted(a[0] for a in answers) == [200, 202], answers
        assert {a[1]["revision"] for a in answers} == {i + 1}, answers
    nc = one.system.nc
    assert nc is not None
    stream = one.system.settings.events_stream
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    revisions = []
    js = nc.jetstream()
    for seq in range(1, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        event = decode(msg.data)
        if event.kind == "export.feedser":
            assert msg.subject.endswith(shard("feedser-main:rev")), msg.subject
            revisions.append(event.payload.revision)
    assert revisions == [1, 2, 3]
    # The latest body again: a duplicate of revision 3, nothing appended.
    status, doc, _ = await post(two, FEEDSER, bodies[2], delivery="r-again")
    assert status == 200 and doc["events"][0]["revision"] == 3, doc


@pytest.fixture
async def publisher(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str]
) -> AsyncIterator[Publisher]:
    pub = await Publisher(nc, prefix=prefix).start()
    yield pub
    await pub.close()


def _event(prefix: str, export_id: str, clock: HybridLogicalClock) -> tuple[str, bytes, str, str]:
    payload = p.sourced_export(p.FeedserExportBody(export_id=export_id), "feedser")
    event = new_event("export.feedser", "acme", payload, clock.now(), event_id=f"ev-{export_id}")
    subject = subject_for(prefix, "acme", event.kind, payload)
    return subject, encode(event), event.id, export_digest(payload)


async def _append(
    log: ExportLog, subject: str, data: bytes, event_id: str, ref: str, digest: str
) -> tuple[Recorded, bool]:
    """Record an export the way the webhook does: its record answers a repeat."""
    this = Append(data, event_id, digest, 1)
    return await log.append(
        subject, ("acme", "feedser", ref), lambda: None, lambda latest: latest or this
    )


async def test_a_resent_publish_meets_its_own_first_copy_and_is_recorded(
    publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The first copy of an append was stored but its acknowledgement lost, so the
    publisher sent it again: the resend is refused as "wrong last sequence" naming that
    copy, which is ours, byte for byte, so the export counts as appended now, once."""
    stream = stream_names[0]
    clock = HybridLogicalClock("t", state_file=tmp_path / "hlc.json")

    async def wait_for(seq: int, timeout: float) -> None:
        return None

    publish = publisher.publish

    async def ack_lost_then_resent(*args: Any, **kw: Any) -> Any:
        await publish(*args, **kw)  # stored; its acknowledgement never arrives
        return await publish(*args, **kw)  # the resend: refused, naming the first copy

    log = ExportLog(publisher, stream, lambda: 0, wait_for, wait_s=1)
    subject, data, event_id, digest = _event(publisher.prefix, "r1", clock)
    monkeypatch.setattr(publisher, "publish", ack_lost_then_resent)
    rec, appended = await _append(log, subject, data, event_id, "feedser:r1", digest)
    monkeypatch.setattr(publisher, "publish", publish)
    assert appended and rec == Recorded(event_id, 1, digest, 1)
    info = await jsapi.stream_info(publisher.nc, stream)
    assert info is not None and info.state.messages == 1
    # Appending it again: known (not yet folded by the read model), nothing published.
    rec2, appended2 = await _append(log, subject, data, event_id, "feedser:r1", digest)
    assert rec2 == rec and not appended2
    info = await jsapi.stream_info(publisher.nc, stream)
    assert info is not None and info.state.messages == 1


def _on_the_same_shard(prefix: str, subject: str, clock: HybridLogicalClock, n: int) -> list[str]:
    """``n`` export ids whose events go to ``subject``'s shard."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        i += 1
        if _event(prefix, f"o{i}", clock)[0] == subject:
            out.append(f"o{i}")
    return out


async def _never(seq: int, timeout: float) -> None:
    raise TimeoutError


async def test_what_another_replica_appended_is_read_from_the_shard(
    publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    """Another replica appended to the shard and this read model is behind: the shard's few
    new events are read from the log, so the export is appended after another export, and
    found (not appended) when it is the export itself."""
    stream = stream_names[0]
    clock = HybridLogicalClock("t", state_file=tmp_path / "hlc.json")
    subject, data, event_id, digest = _event(publisher.prefix, "mine", clock)
    other, same = _on_the_same_shard(publisher.prefix, subject, clock, 1)[0], "mine"
    await publisher.publish(_event(publisher.prefix, other, clock)[0],
                            _event(publisher.prefix, other, clock)[1], None)  # fmt: skip
    log = ExportLog(publisher, stream, lambda: 0, _never, wait_s=0.1)
    rec, appended = await _append(log, subject, data, event_id, "feedser:mine", digest)
    assert appended and rec.seq == 2
    # A second replica (its own log, its read model behind too) takes the same export.
    twin = ExportLog(publisher, stream, lambda: 0, _never, wait_s=0.1)
    subject2, data2, event_id2, digest2 = _event(publisher.prefix, same, clock)
    assert subject2 == subject and data2 != data  # its own stamp
    rec2, appended2 = await _append(twin, subject2, data2, event_id2, "feedser:mine", digest2)
    assert not appended2 and rec2 == Recorded(event_id, 2, digest, 1)
    info = await jsapi.stream_info(publisher.nc, stream)
    assert info is not None and info.state.messages == 2


async def test_a_shard_far_ahead_of_a_read_model_that_cannot_catch_up_records_nothing(
    publisher: Publisher, stream_names: tuple[str, str, str], tmp_path: Path
) -> None:
    """More events on the shard than are read directly, and the read model does not reach
    them in time: whether the export is among them is unknown, so nothing is published (a
    503 to the sender, who retries)."""
    stream = stream_names[0]
    clock = HybridLogicalClock("t", state_file=tmp_path / "hlc.json")
    subject, data, event_id, digest = _event(publisher.prefix, "late", clock)
    for other in _on_the_same_shard(publisher.prefix, subject, clock, SCAN_MAX + 1):
        await publisher.publish(subject, _event(publisher.prefix, other, clock)[1], None)
    log = ExportLog(publisher, stream, lambda: 0, _never, wait_s=0.1)
    with pytest.raises(NotCaughtUp):
        await _append(log, subject, data, event_id, "feedser:late", digest)
    info = await jsapi.stream_info(publisher.nc, stream)
    assert info is not None and info.state.messages == SCAN_MAX + 1
