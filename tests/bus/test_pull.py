"""The pull loop driven one request at a time (``fetch``) and
the one acknowledgement helper, on a real nats-server."""

from __future__ import annotations

from streamproc.bus import jsapi
from streamproc.bus.ack import parse
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.pull import REPLY, PullLoop, ack_body, acknowledge
from tests.helpers import eventually


async def test_fetch_takes_what_is_there_and_answers_through_one_helper(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    work = stream_names[1]
    subject = f"{prefix}.work.acme.segment.3"
    await jsapi.create_consumer(nc, work, {
        "durable_name": "pull_test", "filter_subject": subject, "ack_policy": "explicit",
        "ack_wait": 30 * 10**9, "max_deliver": 3,
    })  # fmt: skip
    loop = await PullLoop(nc, work, "pull_test", outstanding=0).start()
    try:
        assert await loop.fetch(5, timeout=5) == [], "nothing there: a status ends it at once"
        await publisher.publish_many([(subject, b"item-%d" % i, f"i{i}") for i in range(3)])
        first = await loop.fetch(2, timeout=5)
        assert [m[2] for m in first] == [b"item-0", b"item-1"]
        rest = await loop.fetch(5, timeout=5)
        assert [m[2] for m in rest] == [b"item-2"], "fewer than asked: the request still ends"
        assert [delivery(m[REPLY]) for m in first + rest] == [(1, 1), (1, 2), (1, 3)]

        await acknowledge(nc, first[0][REPLY], "ack")
        await acknowledge(nc, first[1][REPLY], "term")
        await acknowledge(nc, rest[0][REPLY], "nak", 0.0)
        again = await eventually(lambda: loop.fetch(5, timeout=5), what="the redelivery")
        assert [(m[2], delivery(m[REPLY])) for m in again] == [(b"item-2", (2, 3))]
        await acknowledge(nc, again[0][REPLY], "progress")
        await acknowledge(nc, again[0][REPLY], "ack")

        async def all_done() -> bool:
            info = await nc.request(f"$JS.API.CONSUMER.INFO.{work}.pull_test", b"", timeout=5)
            return b'"num_ack_pending":0' in info.data and b'"num_pending":0' in info.data

        await eventually(all_done, what="every item acknowledged")
    finally:
        await loop.close()


def delivery(reply: bytes) -> tuple[int, int]:
    info = parse(reply)
    return info.delivered, info.stream_seq


def test_ack_bodies() -> None:
    assert ack_body("ack") == b"+ACK" and ack_body("term") == b"+TERM"
    assert ack_body("progress") == b"+WPI" and ack_body("nak") == b"-NAK"
    assert ack_body("nak", 1.5) == b'-NAK {"delay": 1500000000}'
