"""First-wins claims with per-key TTL in a real JetStream KV bucket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from streamproc.bus import jsapi, streams, ttlkv
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.ttlkv import BucketFull, KeyTaken, TtlBucket
from streamproc.natsd.server import EmbeddedNats
from tests.helpers import eventually


@pytest.fixture
async def bucket(nc: FastClient, publisher: Publisher, prefix: str) -> AsyncIterator[str]:
    name = f"{prefix}_claims"
    config = ttlkv.definition(name, replicas=1, max_keys=5, description="test")
    await streams.apply(nc, [config])
    yield name
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.{ttlkv.stream_name(name)}")


async def claims(b: TtlBucket, key: str) -> bool:
    """Whether a claim of ``key`` succeeds now (taken or full: not yet)."""
    try:
        await b.claim(key, 60)
    except (KeyTaken, BucketFull):
        return False
    return True


async def test_one_claim_wins_across_connections_and_expires(
    nats_server: EmbeddedNats, publisher: Publisher, bucket: str
) -> None:
    other_nc = await connect(nats_server.url)
    other = await Publisher(other_nc).start()
    try:
        mine, theirs = TtlBucket(publisher, bucket), TtlBucket(other, bucket, holder="gw2")
        outcomes = await asyncio.gather(
            *(b.claim("webhook.src.d1", 1) for b in (mine, theirs) for _ in range(5)),
            return_exceptions=True,
        )
        assert sum(isinstance(o, ttlkv.Claim) for o in outcomes) == 1
        assert sum(isinstance(o, KeyTaken) for o in outcomes) == 9
        assert await theirs.exists("webhook.src.d1") and not await mine.exists("webhook.src.d2")
        await eventually(lambda: claims(theirs, "webhook.src.d1"), 5, "the TTL removed the key")
    finally:
        await other.close()
        await other_nc.close()


async def test_a_full_bucket_refuses_and_bad_keys_are_refused(
    publisher: Publisher, bucket: str
) -> None:
    b = TtlBucket(publisher, bucket)
    for i in range(5):
        await b.claim(f"k.n{i}", 1)
    with pytest.raises(BucketFull):
        await b.claim("k.more", 60)
    await eventually(lambda: claims(b, "k.more"), 5, "expired keys made room")
    with pytest.raises(ValueError):
        await b.claim("bad key with spaces", 60)


async def test_a_resent_claim_that_meets_its_own_first_copy_is_ours(
    publisher: Publisher, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server checks the expected sequence before the duplicate window: a publish resent
    after a lost ack sees its own first copy as the key's last message."""
    monkeypatch.setattr(ttlkv, "new_token", lambda: "fixedtoken")
    stored = await publisher.publish(
        f"$KV.{bucket}.k.resent", b"gw1 fixedtoken", "first-copy", ttl_s=60
    )
    claim = await TtlBucket(publisher, bucket, holder="gw1").claim("k.resent", 60)
    assert claim.seq == stored.seq
    with pytest.raises(KeyTaken):  # someone else's value: a real conflict
        await TtlBucket(publisher, bucket, holder="gw2").claim("k.resent", 60)


async def test_expired_claims_leave_nothing_in_the_buckets_accounting(
    nc: FastClient, publisher: Publisher, prefix: str
) -> None:
    """What the bucket costs nats-server lasts as long as its live claims: a hundred claims
    expire to no message and no subject in JetStream's own accounting, and none of them
    was published with a ``Nats-Msg-Id`` (each would hold a duplicate-window entry)."""
    name = f"{prefix}_many"
    stream = ttlkv.stream_name(name)
    await streams.apply(nc, [ttlkv.definition(name, replicas=1, max_keys=1000, description="t")])
    try:
        b = TtlBucket(publisher, name, holder="gw1")
        claimed = await asyncio.gather(*(b.claim(f"webhook.src.k{i}", 1) for i in range(100)))
        js = nc.jetstream()
        for c in claimed[:5]:
            msg = await js.get_msg(stream, c.seq)
            assert "Nats-Msg-Id" not in (msg.headers or {}), msg.headers

        async def state() -> tuple[int, int]:
            doc = await jsapi.request(nc, f"STREAM.INFO.{stream}")
            return doc["state"]["messages"], doc["state"].get("num_subjects", 0)

        assert await state() == (100, 100)

        async def emptied() -> bool:
            return await state() == (0, 0)

        await eventually(emptied, 10, "the claims expired from the stream's accounting")
    finally:
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.request(nc, f"STREAM.DELETE.{stream}")
