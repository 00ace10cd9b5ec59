"""A segment whose every delivery went unanswered (its runners died) is dead-lettered
visibly from the max-deliveries advisory: segment.failed(deadLettered), and the run ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import encode, new_event
from streamproc.natsd.server import EmbeddedNats
from streamproc.runner.settings import RunnerSettings
from tests.runner.harness import Planner, digest_of, events, hlc, start_runner, wait_until


async def test_max_deliveries_advisory_dead_letters_an_abandoned_segment(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    events_stream, work_stream, _ = stream_names
    runner = await start_runner(tmp_path, nats_server.url, prefix, RunnerSettings())
    try:
        planner = Planner(publisher, prefix)
        (seg,) = await planner.run("acme", "lost", [digest_of("a"), digest_of("b")], enqueue=False)
        env = new_event("segment.enqueued", "acme", seg, hlc(), event_id=seg.segment_id)
        await publisher.publish_event(env)
        # A work subject this runner does not consume, and a consumer whose "runners" fetch
        # the segment and vanish: nobody ever acknowledges it.
        subject = f"{prefix}.work.acme.segment.lost"
        await publisher.publish(subject, encode(env), env.id)
        await jsapi.create_consumer(
            nc,
            work_stream,
            {"durable_name": "ghost", "filter_subject": subject, "ack_policy": "explicit",
             "ack_wait": 300_000_000, "max_deliver": 2},
        )  # fmt: skip
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        pull = f"$JS.API.CONSUMER.MSG.NEXT.{work_stream}.ghost"
        for _ in range(2):
            await nc.publish(pull, b'{"batch":1,"expires":2000000000}', reply=inbox)
            msg = await sub.next_msg(timeout=5)
            assert msg.reply.startswith("$JS.ACK.")
        # The server notices the exhausted message when the consumer is next pulled from
        # (live runners pull all the time); the max-deliveries advisory goes out then.
        await asyncio.sleep(0.5)
        await nc.publish(pull, b'{"batch":1,"no_wait":true}', reply=inbox)

        async def dead() -> list:
            return [e for e in await events(nc, events_stream, "segment.failed")]

        (failed,) = await wait_until(dead, timeout=20)
        assert failed.payload.dead_lettered and failed.payload.deliveries == 2
        assert "max deliveries" in failed.payload.reason
        done = await wait_until(lambda: events(nc, events_stream, "run.completed"), timeout=20)
        assert done[0].payload.coverage.reasons == {"dead_lettered": 2}
        info = await jsapi.stream_info(nc, work_stream)
        assert info is not None and info.state.messages == 0, "the dead work item is removed"
        await sub.unsubscribe()
    finally:
        await runner.close()
