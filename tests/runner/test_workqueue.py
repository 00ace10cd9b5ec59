"""Fair consumption of the work queue: one durable consumer per (tenant, priority),
round-robin across tenants, most urgent priority first within a tenant."""

from __future__ import annotations

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.runner.settings import RunnerSettings
from streamproc.runner.workqueue import WorkQueue, ack_info, consumer_name


async def test_round_robin_across_tenants_most_urgent_first(
    nc: FastClient, publisher: Publisher, prefix: str, stream_names: tuple[str, str, str]
) -> None:
    items = [(f"{prefix}.work.big.segment.6", b"big-6-%d" % i, f"b6-{i}") for i in range(5)]
    items += [(f"{prefix}.work.big.segment.1", b"big-1", "b1")]
    items += [(f"{prefix}.work.small.segment.4", b"small-4", "s4")]
    items += [(f"{prefix}.work.tiny.segment.8", b"tiny-8", "t8")]
    await publisher.publish_many(items)
    queue = await WorkQueue(nc, prefix, stream_names[1], RunnerSettings(ack_wait_s=5)).start()
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
            f"$JS.API.CONSUMER.INFO.{stream_names[1]}.{consumer_name('big', 6)}", b"", timeout=5
        )
        assert b'"filter_subject":"%s.work.big.segment.6"' % prefix.encode() in info.data
    finally:
        await queue.close()
    assert ack_info("$JS.ACK.S.C.3.17.9.1700000000.0") == (3, 17)
    assert ack_info("$JS.ACK.dom.acc.S.C.2.5.4.1700000000.0.tok") == (2, 5)
