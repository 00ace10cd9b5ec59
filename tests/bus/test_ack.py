"""Every ``$JS.ACK`` token layout (NATS ADR-15) through the one parser, and a real delivery."""

from __future__ import annotations

import pytest

from streamproc.bus import jsapi
from streamproc.bus.ack import AckInfo, NotAckSubject, is_ack, parse, stream_seq
from streamproc.bus.fastclient import FastClient
from streamproc.bus.pull import PullLoop

V1 = "$JS.ACK.ORDERS.worker.3.17.9.1700000000000000000.42"
V2 = "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.17.9.1700000000000000000.42.Xr4nd"
V2_NO_DOMAIN = "$JS.ACK._.ACCHASH.ORDERS.worker.3.17.9.1700000000000000000.42.Xr4nd"
V2_NO_TOKEN = "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.17.9.1700000000000000000.42"
V2_MORE = "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.17.9.1700000000000000000.42.Xr4nd.future.x"

FIELDS = {
    "stream": "ORDERS",
    "consumer": "worker",
    "delivered": 3,
    "stream_seq": 17,
    "consumer_seq": 9,
    "timestamp_ns": 1_700_000_000_000_000_000,
    "pending": 42,
}


@pytest.mark.parametrize(
    ("reply", "domain", "account_hash"),
    [
        (V1, "", ""),
        (V2, "hub", "ACCHASH"),
        (V2_NO_DOMAIN, "", "ACCHASH"),
        (V2_NO_TOKEN, "hub", "ACCHASH"),
        (V2_MORE, "hub", "ACCHASH"),
    ],
    ids=["v1", "v2", "v2-no-domain", "v2-no-random-token", "v2-extra-tokens"],
)
def test_every_layout_gives_the_same_fields(reply: str, domain: str, account_hash: str) -> None:
    want = AckInfo(**FIELDS, domain=domain, account_hash=account_hash)
    assert parse(reply) == want
    assert parse(reply.encode()) == want
    assert is_ack(reply) and is_ack(reply.encode())
    assert stream_seq(reply.encode()) == 17


@pytest.mark.parametrize(
    "reply",
    [
        "_INBOX.abc.1",  # a status message on a pull request's inbox
        "$JS.ACK.ORDERS.worker.3.17.9.1700000000000000000",  # 8 tokens: cut short
        "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.17.9.1700000000000000000",  # 10 tokens
        "$JS.ACK.ORDERS.worker.three.17.9.1700000000000000000.42",  # not a number
        "$JS.API.ORDERS.worker.3.17.9.1700000000000000000.42",  # another API
        "",
    ],
)
def test_anything_else_is_refused(reply: str) -> None:
    with pytest.raises(NotAckSubject):
        parse(reply)
    if reply.startswith("$JS.ACK.") and "three" not in reply:
        with pytest.raises(NotAckSubject):
            stream_seq(reply.encode())


def test_a_non_numeric_stream_sequence_is_refused_by_the_fast_path() -> None:
    with pytest.raises(NotAckSubject, match="no stream sequence"):
        stream_seq(b"$JS.ACK.ORDERS.worker.3.x.9.1700000000000000000.42")
    assert not is_ack(b"_INBOX.abc.1")
    with pytest.raises(NotAckSubject):
        stream_seq(b"_INBOX.abc.1")


async def test_a_real_delivery_parses(nc: FastClient, prefix: str) -> None:
    """What the running nats-server sends, whichever layout it uses, reads back right."""
    stream, subject = f"{prefix}_ACK", f"{prefix}.ack.x"
    await jsapi.request(nc, f"STREAM.CREATE.{stream}", {"name": stream, "subjects": [subject]})
    try:
        for i in range(3):
            await nc.publish(subject, b"%d" % i)
        await nc.flush()
        consumer = {"durable_name": "c", "ack_policy": "explicit"}
        await jsapi.request(
            nc, f"CONSUMER.CREATE.{stream}.c", {"stream_name": stream, "config": consumer}
        )
        loop = await PullLoop(nc, stream, "c", batch=3).start()
        try:
            got = []
            while len(got) < 3:
                got += await loop.next_batch(3, timeout=5)
        finally:
            await loop.close()
        infos = [parse(m[3]) for m in got]
        assert [i.stream_seq for i in infos] == [m[0] for m in got] == [1, 2, 3]
        assert {(i.stream, i.consumer, i.delivered) for i in infos} == {(stream, "c", 1)}
        assert [i.consumer_seq for i in infos] == [1, 2, 3]
        assert infos[-1].pending == 0  # the server's count when it sent each; none left
        assert all(i.timestamp_ns > 1_700_000_000 * 10**9 for i in infos)
    finally:
        await jsapi.request(nc, f"STREAM.DELETE.{stream}")
