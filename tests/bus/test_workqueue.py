"""Fair consumption of the work queue: one durable consumer per (tenant, priority),
round-robin across tenants, most urgent priority first within a tenant, and workers that
wait together served by one batched request."""

from __future__ import annotations

import asyncio
from typing import Any

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.workqueue import (
    QueueConfig,
    WorkQueueConsumer,
    parse_work_subject,
)
from streamproc.names import work_consumer


async def test_round_robin_across_tenants_most_urgent_first(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    items = [(f"{prefix}.work.big.segment.6", b"big-6-%d" % i, f"b6-{i}") for i in range(5)]
    items += [(f"{prefix}.work.big.segment.1", b"big-1", "b1")]
    items += [(f"{prefix}.work.small.segment.4", b"small-4", "s4")]
    items += [(f"{prefix}.work.tiny.segment.8", b"tiny-8", "t8")]
    await publisher.publish_many(items)
    queue = await WorkQueueConsumer(nc, prefix, stream_names[1], QueueConfig(ack_wait_s=5)).start()
    try:
        order = []
        for _ in range(8):
            item = await queue.next()
            order.append(item.data.decode())
            await queue.ack(item)
        # The big tenant's backlog does not delay the others: one each per round, and its
        # urgent segment (priority 1) goes before its nightly ones (priority 6).
        first_round = order[:3]
        assert sorted(first_round) == ["big-1", "small-4", "tiny-8"]
        assert order[3:] == [f"big-6-{i}" for i in range(5)]
        info = await nc.request(
            f"$JS.API.CONSUMER.INFO.{stream_names[1]}.{work_consumer('big', 6)}", b"", timeout=5
        )
        assert b'"filter_subject":"%s.work.big.segment.6"' % prefix.encode() in info.data
    finally:
        await queue.close()
    assert parse_work_subject(f"{prefix}.work.big.segment.6") == ("big", 6)
    assert parse_work_subject(f"{prefix}.work.big.segment.x") is None
    assert parse_work_subject(f"{prefix}.events.big.segment.6") is None


async def test_waiting_workers_share_one_request_and_the_tenants_fairly(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    work = stream_names[1]
    items = [(f"{prefix}.work.big.segment.5", b"big-%d" % i, f"b-{i}") for i in range(8)]
    items += [(f"{prefix}.work.small.segment.5", b"small-%d" % i, f"s-{i}") for i in range(2)]
    await publisher.publish_many(items)
    queue = await WorkQueueConsumer(nc, prefix, work, QueueConfig(ack_wait_s=5)).start()
    asked: list[bytes] = []

    async def seen(msg: Any) -> None:
        asked.append(msg.data)

    spy = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{work}.*", cb=seen)
    try:
        # Six workers free at once: the small tenant's two and four of the big one's,
        # in three requests (big 3, small 3 of which 2 came, big again for the last 1).
        got = await asyncio.gather(*(queue.next() for _ in range(6)))
        names = sorted(i.data.decode() for i in got)
        assert names == ["big-0", "big-1", "big-2", "big-3", "small-0", "small-1"]
        assert all(i.deliveries == 1 for i in got) and len({i.stream_seq for i in got}) == 6
        await nc.flush()
        assert [a for a in asked if b'"batch":3' in a], asked
        assert len(asked) <= 3, asked
        for item in got:
            await queue.ack(item)
        # An item given back (nak) comes again, counted as its second delivery.
        *done, again = [await queue.next() for _ in range(4)]
        for item in done:
            await queue.ack(item)
        await queue.nak(again, 0)
        redelivered = await queue.next()
        assert (redelivered.stream_seq, redelivered.deliveries) == (again.stream_seq, 2)
        await queue.term(redelivered)
    finally:
        await spy.unsubscribe()
        await queue.close()
